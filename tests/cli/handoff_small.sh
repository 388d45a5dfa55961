#!/bin/sh
# tests/cli/handoff_small.sh -- issue 38, item 7, value by value: Megatron pipeline stages
# joined as layers (--pipeline-stages), a one-layer [tokens, top-k] .npy warned about, and an
# nccl-tests table from before the redop and root columns read as the current one. The samples
# come from data/make_small_forms.py (standard library), which names the producers' files and
# functions: Megatron-Core's router_trace.py (RouterTracer._record, _parse_router_module_name),
# nccl-tests v2.9.0 src/common.cu and src/all_gather.cu. (The FLAME-MoE recipes of
# moe-trace(1): tests/cli/flame_recipe.sh; bash completion: tests/cli/completion.sh.)
. "$(dirname "$0")/lib.sh"

D=$DATA_DIR/import
tab=$(printf '\t')
pp0=$D/megatron_pp0.jsonl
pp1=$D/megatron_pp1.jsonl

# want FILE LINE...: the lines, spaces as tabs.
want() {
    _f=$1
    shift
    printf '%s\n' "$@" | tr ' ' "$tab" >"$_f"
}

# The expected records: token t (0..5) at model layer m routes to (3t + m) mod 8 and
# (5t + m + 1) mod 8, model layers 1..7 (layer 0 dense).
stage_records() {
    for t in 0 1 2 3 4 5; do
        line="$t${tab}0${tab}$t${tab}0${tab}0"
        for m in 1 2 3 4 5 6 7; do
            line="$line$tab$(((3 * t + m) % 8)),$(((5 * t + m + 1) % 8))"
        done
        printf '%s\n' "$line"
    done
}

begin "megatron: two pipeline stages' files joined as layers, model layers of an even split"
run moe import --pipeline-stages 2 --model-layers 8 --no-PG -O t -o "$T/pp.txt" "$pp0" "$pp1"
expect_eq "$rc" 0 "status"
expect_no_stderr
stage_records >"$T/pp.want"
grep -v '^@' "$T/pp.txt" >"$T/pp.rec"
same_file "$T/pp.want" "$T/pp.rec" "records: stage 0's layers, then stage 1's"
grep '^@MT' "$T/pp.txt" | grep -q "layers:7${tab}experts:8${tab}topk:2" ||
    fail "header: $(grep '^@MT' "$T/pp.txt")"
grep -qx "@CO${tab}model-layers: layers 0..6 are model layers 1-7 of 8" "$T/pp.txt" ||
    fail "model layers: $(grep '^@CO' "$T/pp.txt")"
grep -qx "@CO${tab}pipeline: stage 1 of 2 is layers 3..6: '$pp1'" "$T/pp.txt" ||
    fail "stage line: $(grep '^@CO' "$T/pp.txt")"
# the joined trace hands SGLang a row per model layer, the dense layer 0 zero
run moe stats --format sglang -o "$T/lc.json" "$T/pp.txt"
expect_eq "$rc" 0 "stats status"
# its loads by the formula: model layer m's count of expert e over the six tokens
lc=$(awk 'BEGIN { s = "{\"logical_count\":[["
    for (m = 0; m < 8; m++) {
        for (e = 0; e < 8; e++) c[e] = 0
        for (t = 0; t < 6 && m > 0; t++) { c[(3 * t + m) % 8]++; c[(5 * t + m + 1) % 8]++ }
        r = "["; for (e = 0; e < 8; e++) r = r (e ? "," : "") c[e]
        s = s (m ? "," : "") r "]"
    }
    print s "]]}" }')
expect_eq "$(tr -d ' \n' <"$T/lc.json")" "$lc" "SGLang's logical_count: 8 rows, row 0 zero"
end

begin "megatron stages: offsets from the stages' last MoE layers, two pipelines in a row"
run moe import --pipeline-stages 2 --no-PG -O t -o "$T/pp2.txt" "$pp0" "$pp1" "$pp0" "$pp1"
expect_eq "$rc" 0 "status"
grep -qx "@CO${tab}model-layers: layers 0..6 are model layers 1-7" "$T/pp2.txt" ||
    fail "model layers: $(grep '^@CO' "$T/pp2.txt")"
{ stage_records; stage_records | awk -F"$tab" -v OFS="$tab" '{ $1 += 6; $2 = 2; print }'; } \
    >"$T/pp2.want"
grep -v '^@' "$T/pp2.txt" >"$T/pp2.rec"
same_file "$T/pp2.want" "$T/pp2.rec" "records of both pipelines (the second's sequence 2)"
end

begin "megatron stages: the joined layers' model layers given (an uneven split)"
run moe import --pipeline-stages 2 --moe-layers 2-8 --model-layers 9 --no-PG -O t \
    -o "$T/pp3.txt" "$pp0" "$pp1"
expect_eq "$rc" 0 "status"
grep -qx "@CO${tab}model-layers: layers 0..6 are model layers 2-8 of 9" "$T/pp3.txt" ||
    fail "model layers: $(grep '^@CO' "$T/pp3.txt")"
grep -v '^@' "$T/pp3.txt" >"$T/pp3.rec"
same_file "$T/pp.want" "$T/pp3.rec" "records as before"
end

begin "megatron stages: what cannot be joined fails with one line"
head -n 4 "$pp1" >"$T/short.jsonl" # its first micro-batch only
expect_exit 1 moe import --pipeline-stages 2 -o "$T/x.moet" "$pp0" "$T/short.jsonl"
expect_err_line "'$T/short.jsonl' (stage 1) has fewer tokens than '$pp0' (stage 0): the stages must hold the same tokens"
expect_exit 1 moe import --pipeline-stages 2 -o "$T/x.moet" "$pp0" "$pp1" "$pp0"
expect_err_line "3 inputs are not whole pipelines of 2 stages"
expect_exit 1 moe import --pipeline-stages 2 --model-layers 7 -o "$T/x.moet" "$pp0" "$pp1"
expect_err_line "--model-layers 7 does not split evenly into 2 stages: give the joined layers' model layers with --moe-layers"
expect_exit 1 moe import --pipeline-stages 2 --model-layers 6 -o "$T/x.moet" "$pp0" "$pp1"
expect_err_line "'$pp0' (stage 0): layer 3 is beyond the 3 layers of a stage of --model-layers 6"
expect_exit 1 moe import --pipeline-stages 2 --drop-incomplete -o "$T/x.moet" "$pp0" "$pp1"
expect_err_line "--drop-incomplete would drop tokens stage by stage and misalign the stages: not with --pipeline-stages"
# without the option the stage files are tokens of different layers: refused
expect_exit 1 moe import -o "$T/x.moet" "$pp0" "$pp1"
expect_err_line "'$pp1': 4 layers, top-2, but '$pp0' has 3 layers, top-2"
end

begin ".npy: one layer's [tokens, top-6] read as six top-1 layers, with a warning"
run moe import --no-PG -O t -o "$T/one.txt" "$D/one_layer_top6.npy"
expect_eq "$rc" 0 "status"
expect_tool_err_line moe-trace "warning: '$D/one_layer_top6.npy': a 2-D array reads as 6 layers of top-1 ids, but none of its first 40 rows repeats an id, as one layer's top-6 rows never do: if it is one layer, save it as [tokens, 1, 6] (a[:, None, :] in NumPy); stack per-layer files along axis 1"
# ExFlow's own 2-D top-1 traces (layers' ids repeat) read without one
run moe import -o "$T/x.moet" "$D/top1_i8.npy"
expect_eq "$rc" 0 "status"
grep -q warning "$T/err" && fail "a warning: $(cat "$T/err")"
end

begin "nccl-tests before the redop and root columns (v2.9.0): the same fit"
for f in all_gather_8 all_gather_8_v2.9; do
    run moe_tool moe-costmodel fit --nccl-tests="$DATA_DIR/nccl/$f.txt" --class=intra \
        -o "$T/$f.topo"
    expect_eq "$rc" 0 "status of $f"
    grep -v '^# fitted by' "$T/$f.topo" >"$T/$f.body"
done
same_file "$T/all_gather_8.body" "$T/all_gather_8_v2.9.body" "fitted topology"
grep -q '^efficiency intra 1024:0.0002781 ' "$T/all_gather_8_v2.9.body" ||
    fail "efficiency: $(grep efficiency "$T/all_gather_8_v2.9.body")"
end

finish
