#!/bin/sh
# tests/cli/replica_ref.sh -- issue 38 item 6: the replica rules of vLLM and SGLang in the one
# accounting (moe-place eval --replica-rule) against tests/data/place/replica_ref.py, which
# restates them from their source: vLLM's eplb_map_to_physical_and_record (positional:
# pos_indices % replica_count; even: the hashed token index, after vLLM's PR #40810) over the
# EPLB tensors vLLM loads, SGLang's compute_logical_to_rank_dispatch_physical_map with
# CPython's own random.Random(42) over every row of the map SGLang loads, its dense row
# included. Placement: rebalance_experts' own output (data/place/eplb_dsv2lite.json: two slots
# of one expert on one GPU); trace: 26 layers x 64, top-6, from 8 recorded ranks. The vanilla
# rank x rank transfers must be equal, entry by entry. Skipped (77) without python3.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
mp() { moe_tool moe-place "$@"; }
D=$DATA_DIR/place
REF=$D/replica_ref.py

moe gen -L 26 -E 64 -k 6 -n 400 -s 8 -r 8 -S 11 --no-PG -o "$T/t.moet" &&
    moe view --no-header "$T/t.moet" >"$T/t.txt" &&
    mp import --format eplb --ranks 8 --no-PG -o "$T/e.moep" "$D/eplb_dsv2lite.json" &&
    mp export --format eplb -o "$T/e.json" "$T/e.moep" &&
    mp export --first-moe-layer 1 --model-layers 27 -o "$T/e27.moep" "$T/e.moep" &&
    mp export --format sglang -o "$T/e27.json" "$T/e27.moep" ||
    { echo "cannot make the test inputs"; exit 99; }

# matrix RULE PLACEMENT: eval's vanilla transfers per (source, destination) rank
matrix() {
    mp eval --scheme vanilla --replica-rule "$1" --hidden 1 --elem-bytes 1 \
        --matrix-bytes "$T/m" "$2" "$T/t.moet" >/dev/null || fail "eval --replica-rule $1"
}

for rule in positional even; do
    begin "$rule: vLLM's rule over the EPLB tensors it loads"
    matrix $rule "$T/e.moep"
    run python3 "$REF" --rule $rule --map "$T/e.json" --trace "$T/t.txt" --ranks 8 --experts 64
    expect_eq "$rc" 0 "the restatement"
    same_file "$T/m" "$T/out" "rank x rank transfers"
    end
done

begin "sglang-static: SGLang's table of the 27-row map it loads (model layer 0 dense)"
matrix sglang-static "$T/e27.moep"
run python3 "$REF" --rule sglang-static --map "$T/e27.json" --trace "$T/t.txt" --ranks 8 \
    --experts 64 --moe-layers 1-26
expect_eq "$rc" 0 "the restatement"
same_file "$T/m" "$T/out" "rank x rank transfers"
# the dense row draws from the same generator first: without it the table is another one
cp "$T/out" "$T/ref27"
matrix sglang-static "$T/e.moep"
differ_file "$T/m" "$T/ref27" "the table of the map without its dense row"
end

begin "the four rules differ on this placement"
for rule in nearest even positional sglang-static; do
    matrix $rule "$T/e27.moep"
    cp "$T/m" "$T/m.$rule"
done
differ_file "$T/m.even" "$T/m.positional" "even and positional"
differ_file "$T/m.positional" "$T/m.sglang-static" "positional and sglang-static"
differ_file "$T/m.nearest" "$T/m.sglang-static" "nearest and sglang-static"
end

finish
