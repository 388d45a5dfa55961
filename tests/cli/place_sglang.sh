#!/bin/sh
# tests/cli/place_sglang.sh -- SGLang's --init-expert-location JSON (moe-place export/import
# --format sglang, moe-trace stats --format sglang), EPLB files with two slots of one expert on
# one rank, and the --json outputs of moe-trace stats, moe-place check and moe-costmodel fit.
#
# The sample files in tests/data/place/ were written by hand from the layouts that SGLang's
# python/sglang/srt/eplb/expert_location.py reads (a dict with one key, physical_to_logical_map
# of layers x physical slots, slot p on GPU p / (slots / ep_size)) and that DeepSeek's
# eplb.py rebalance_experts returns (phy2log, log2phy, logcnt): no third-party file is copied.

. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }
mc() { moe_tool moe-costmodel "$@"; }
D=$DATA_DIR/place

# records FILE: the @PL line and the records of a placement (no @CO/@FT/@PG, no comments).
records() {
    grep -v -e '^@CO' -e '^@FT' -e '^@PG' -e '^#' "$1"
}

# copies FILE: "layer expert rank rank ..." per expert, the ranks in increasing order.
copies() {
    records "$1" | awk -F'\t' 'NR > 1 { n = split($3, r, ",");
        for (i = 2; i <= n; i++) for (j = i; j > 1 && r[j] + 0 < r[j - 1] + 0; j--) {
            x = r[j]; r[j] = r[j - 1]; r[j - 1] = x }
        s = $1 " " $2; for (i = 1; i <= n; i++) s = s " " r[i]; print s }'
}

# figures FILE: eval's output without the line naming the placement file.
figures() {
    grep -v '^# placement: ' "$1"
}

# expect_one_line SUBSTRING: stderr is one 'moe-place: ' line holding SUBSTRING, stdout empty.
expect_one_line() {
    expect_tool_err_line moe-place "$1"
    [ -s "$T/out" ] && fail "output on a failed run"
}

# json_ok FILE EXPR: FILE parses as JSON and the Python expression EXPR over it (d) is true;
# without python3, a grep-level check that FILE starts with '{' or '['.
if command -v python3 >/dev/null 2>&1; then
    json_ok() {
        python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" || fail "JSON check failed: $2 ($1)"
    }
else
    json_ok() {
        head -c 1 "$1" | grep -q '[[{]' || fail "not JSON: $1"
    }
fi

TR=$T/g.moet   # 3 layers x 10 experts, top-2, 4 recorded ranks
moe gen -L 3 -E 10 -k 2 -n 3000 -s 24 -r 4 -S 7 --no-PG -o "$TR" ||
    { echo "cannot make the test trace"; exit 1; }

# ------------------------------------------------------------------ SGLang placements

begin "export --format sglang writes physical_to_logical_map slot by slot"
run mp export --format sglang "$D/full_6x4.moep"
expect_eq "$rc" 0 "export"
printf '{"physical_to_logical_map":[\n[0,1,2,3,4,5,1,4],\n[2,3,2,4,1,5,0,5]\n]}\n' >"$T/want"
same_file "$T/out" "$T/want" "SGLang export of full_6x4.moep"
json_ok "$T/out" '(list(d) == ["physical_to_logical_map"] and
    len(d["physical_to_logical_map"][1]) == 8)'
end

begin "import --format sglang reads the hand-written map value by value"
run mp import --format sglang --ranks 4 --gpus-per-node 2 --no-PG "$D/sglang_map.json"
expect_eq "$rc" 0 "import"
cp "$T/out" "$T/sg.moep"
printf '@PL\tVN:1.1\tlayers:2\texperts:6\tranks:4\tgpus_per_node:2\tcapacity:2\tmodel_layers:2\n' \
    >"$T/want"
# layer 0: slots 0..7 hold 0 1 | 2 3 | 4 5 | 1 4 on ranks 0..3 (two slots each)
printf '0\t0\t0\n0\t1\t0,3\n0\t2\t1\n0\t3\t1\n0\t4\t2,3\n0\t5\t2\n' >>"$T/want"
# layer 1: 5 5 | 0 1 | 2 3 | 4 5: expert 5 twice on rank 0 is one copy there, its three
# slots kept (0, 0, 3)
printf '1\t0\t1\n1\t1\t1\n1\t2\t2\n1\t3\t2\n1\t4\t3\n1\t5\t0,3\t0,0,3\n' >>"$T/want"
records "$T/sg.moep" >"$T/got"
same_file "$T/got" "$T/want" "imported records"
grep -q '^@CO	source: .*sglang_map.json (format sglang)$' "$T/sg.moep" || fail "no source line"
grep -q 'second slot' "$T/sg.moep" && fail "a line about merged slots"
# both slots of expert 5 on rank 0 export again: every slot filled, the same map
run mp export --format sglang "$T/sg.moep"
expect_eq "$rc" 0 "export of the imported map"
tr -d ' ' <"$D/sglang_map.json" | tr -d '\n' >"$T/want"
tr -d '\n' <"$T/out" >"$T/got"
same_file "$T/got" "$T/want" "SGLang -> moeflow -> SGLang"
end

begin "a placement with an empty slot does not export to SGLang"
printf '@PL\tVN:1.0\tlayers:1\texperts:3\tranks:2\tgpus_per_node:2\tcapacity:2\n0\t0\t0\n0\t1\t0\n0\t2\t1\n' \
    >"$T/empty.moep"
run mp export --format sglang "$T/empty.moep"
expect_eq "$rc" 1 "export with an empty slot"
expect_one_line "layer 0: rank 1 fills 1 of its 2 slots; SGLang's map has no empty slot"
end

begin "round trip trace -> fit -> SGLang JSON -> import -> eval keeps every figure"
for fit in "4 2 --method balanced --replicas 2" "4 2 --method balanced --replicas 6" \
    "5 5 --method random --seed 3" "2 1 --method contiguous"; do
    # shellcheck disable=SC2086
    set -- $fit
    ranks=$1 gpn=$2
    shift 2
    run mp fit --ranks "$ranks" --gpus-per-node "$gpn" "$@" --no-PG -o "$T/f.moep" "$TR"
    expect_eq "$rc" 0 "fit $fit"
    run mp export --format sglang -o "$T/f.json" "$T/f.moep"
    expect_eq "$rc" 0 "export ($fit)"
    run mp import --format sglang --ranks "$ranks" --gpus-per-node "$gpn" -o "$T/f2.moep" \
        "$T/f.json"
    expect_eq "$rc" 0 "import ($fit)"
    for o in "" "--json" "--hidden 64 --elem-bytes 2"; do
        # shellcheck disable=SC2086
        mp eval $o "$T/f.moep" "$TR" >"$T/e1" && mp eval $o "$T/f2.moep" "$TR" >"$T/e2" ||
            fail "eval $o ($fit)"
        figures "$T/e1" >"$T/e1f"
        figures "$T/e2" >"$T/e2f"
        same_file "$T/e1f" "$T/e2f" "eval $o after the SGLang round trip ($fit)"
    done
    # the same copies of every expert (the primary may move to the lowest slot)
    copies "$T/f.moep" >"$T/c1"
    copies "$T/f2.moep" >"$T/c2"
    same_file "$T/c1" "$T/c2" "copies per expert ($fit)"
    mp export --format sglang "$T/f2.moep" >"$T/f3.json" || fail "re-export ($fit)"
    same_file "$T/f.json" "$T/f3.json" "SGLang JSON re-exported ($fit)"
done
end

begin "logical_count from moe-trace stats matches its load lines"
run moe stats --format sglang "$TR"
expect_eq "$rc" 0 "stats --format sglang"
cp "$T/out" "$T/lc.json"
moe stats --loads "$TR" | awk '$1 == "load" { $1 = ""; $2 = ""; print }' |
    sed 's/^ *//' >"$T/loads"
# the JSON one layer per line between '{"logical_count":[[' and ']]}'
head -n 1 "$T/lc.json" | grep -qx '{"logical_count":\[\[' || fail "logical_count head"
tail -n 1 "$T/lc.json" | grep -qx ']]}' || fail "logical_count tail"
sed -n '2,$p' "$T/lc.json" | sed '$d' | tr -d '[]' | sed 's/,$//' | tr ',' ' ' >"$T/lc"
same_file "$T/lc" "$T/loads" "logical_count values against stats --loads"
json_ok "$T/lc.json" '(list(d) == ["logical_count"] and len(d["logical_count"]) == 1 and
    len(d["logical_count"][0]) == 3 and
    all(len(r) == 10 and sum(r) == 6000 for r in d["logical_count"][0]))'
# what SGLang loads as logical_count is loads, not a placement
run mp import --format sglang --ranks 4 "$T/lc.json"
expect_eq "$rc" 1 "import of logical_count"
expect_one_line "holds 'logical_count'"
end

begin "bad SGLang files: exit 1, one line"
bad() {
    printf '%s\n' "$2" >"$T/bad.json"
    run mp import --format sglang --ranks 2 "$T/bad.json"
    expect_eq "$rc" 1 "import of $2"
    expect_one_line "$1"
}
bad "exactly one key" '{"physical_to_logical_map": [[0, 1]], "ep_size": 2}'
bad "exactly one key" '{}'
bad "(1 key here: 'phy2log')" '{"phy2log": [[0, 1]]}'
bad "not a SGLang expert location" '[[0, 1]]'
bad "layer 0 slot 1: '-1' is not an expert id" '{"physical_to_logical_map": [[0, -1]]}'
bad "not a list of layers of equally many slots" '{"physical_to_logical_map": [[0, 1], [0]]}'
bad "3 physical slots per layer do not split over 2 ranks" \
    '{"physical_to_logical_map": [[0, 1, 1]]}'
bad "layer 0: expert 1 has 0 slots" '{"physical_to_logical_map": [[0, 2]]}'
bad "malformed JSON" '{"physical_to_logical_map": [[0, 1]]'
printf '{"physical_to_logical_map": [[0, 1]]}\n' >"$T/nor.json"
run mp import --format sglang "$T/nor.json"
expect_eq "$rc" 1 "import without --ranks"
expect_one_line "the number of ranks is unknown"
end

# ------------------------------------------------------------------ EPLB: two slots on one rank

begin "EPLB rebalance_experts output with two slots of an expert on one rank imports"
run mp import --format eplb --ranks 2 --no-PG "$D/eplb_two_slots.json"
expect_eq "$rc" 0 "import"
cp "$T/out" "$T/two.moep"
records "$T/two.moep" >"$T/got"
records "$D/eplb_two_slots.moep" >"$T/want"
same_file "$T/got" "$T/want" "records: one copy per rank, every slot kept"
run mp check "$T/two.moep"
expect_eq "$rc" 0 "check"
moe gen -L 2 -E 4 -k 2 -n 1500 -s 12 -r 2 -S 9 --no-PG -o "$T/t4.moet" || fail "gen"
for o in "" "--json"; do
    # shellcheck disable=SC2086
    mp eval $o "$T/two.moep" "$T/t4.moet" >"$T/e1" &&
        mp eval $o "$D/eplb_two_slots.moep" "$T/t4.moet" >"$T/e2" || fail "eval $o"
    figures "$T/e1" >"$T/e1f"
    figures "$T/e2" >"$T/e2f"
    same_file "$T/e1f" "$T/e2f" "eval $o of the import and of the hand-written placement"
done
# the JSON names the shape the import gave: 4 experts on 2 ranks, the trace's 1500 tokens
mp eval --json "$T/two.moep" "$T/t4.moet" >"$T/e.json" || fail "eval --json"
json_ok "$T/e.json" 'd["tokens"] == 1500 and d["ranks"] == 2 and d["experts"] == 4'
end

# ------------------------------------------------------------------ --json outputs

begin "moe-trace stats --json"
run moe stats --json --loads "$TR"
expect_eq "$rc" 0 "stats --json"
cp "$T/out" "$T/st.json"
moe stats "$TR" >"$T/st.txt"
json_ok "$T/st.json" '(d["tokens"] == 3000 and d["layers"] == 3 and d["experts"] == 10 and
    d["weights"] is False and len(d["per_layer"]) == 3 and
    all(sum(x["loads"]) == 6000 for x in d["per_layer"]))'
# the figures agree with the text report's
tok=$(awk '$1 == "tokens" { print $2 }' "$T/st.txt")
grep -q "^{\"tokens\": $tok, " "$T/st.json" || fail "tokens differ from the report's"
hot=$(awk '$1 == "layer" && $2 == 2 { print $10 }' "$T/st.txt")
json_ok "$T/st.json" "d['per_layer'][2]['hottest'] == $hot"
run moe stats --format yaml "$TR"
expect_eq "$rc" 2 "unknown --format"
end

begin "moe-place check --json"
run mp check --json "$D/full_6x4.moep" "$D/eplb_two_slots.moep"
expect_eq "$rc" 0 "check --json"
cp "$T/out" "$T/ck.json"
json_ok "$T/ck.json" '(len(d) == 2 and d[0]["ok"] and d[0]["replicas"] == 4 and
    d[0]["capacity"] == 2 and d[1]["ranks"] == 2 and d[1]["replicas"] == 4)'
printf 'not a placement\n' >"$T/bad.moep"
run mp check --json "$D/full_6x4.moep" "$T/bad.moep"
expect_eq "$rc" 1 "check --json of a bad file"
cp "$T/out" "$T/ck2.json"
json_ok "$T/ck2.json" 'd[0]["ok"] is True and d[1]["ok"] is False and "@PL" in d[1]["error"]'
tool_err
[ "$(wc -l <"$errf" | tr -d ' ')" = 1 ] || fail "expected one line on stderr"
end

begin "moe-costmodel fit --json"
N=$DATA_DIR/nccl/alltoall_2x8.txt
run mc fit --nccl-tests "$N" --class inter --json
expect_eq "$rc" 0 "fit --json"
cp "$T/out" "$T/fit.json"
mc fit --nccl-tests "$N" --class inter | sed 1d >"$T/fit.topo" || fail "fit"
json_ok "$T/fit.json" '(d["class"] == "inter" and d["points"] == len(d["curve"]) and
    d["curve"][-1]["efficiency"] == 1 and
    d["topology"] == open(sys.argv[1].replace("fit.json", "fit.topo")).read())'
end

finish
