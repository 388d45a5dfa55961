#!/bin/sh
# tests/cli/import_megatron.sh -- Megatron-Core router traces (router_trace_rank{R}.jsonl, as
# megatron/core/transformer/moe/router_trace.py writes them): dense layers between the MoE
# layers, multi-token-prediction records, activation-recompute repeats, bad records. Each
# imported trace is compared value by value with the ids of the sample files.
. "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

D=$DATA_DIR/import
OUT=$T/out.moet
tab=$(printf '\t')

# want FILE LINE...: FILE holds the lines, with ' ' for the text view's tabs.
want() {
    _f=$1
    shift
    printf '%s\n' "$@" | tr ' ' "$tab" >"$_f"
}

begin "megatron: MoE layers 1, 3, 4 between dense layers are layers 0..2; MTP skipped"
run moe import --no-PG -O t -o "$T/dense.txt" "$D/megatron_dense.jsonl"
expect_eq "$rc" 0 "status"
expect_err_line "skipped 2 MTP records (--mtp keeps them)"
grep -v '^@' "$T/dense.txt" >"$T/dense.rec"
# token seq pos step rank, then layers 1, 3, 4: every token complete.
want "$T/dense.want" \
    "0 0 0 0 0 0,1 3,0 1,3" \
    "1 0 1 0 0 2,3 1,0 0,2" \
    "2 0 2 0 0 1,2 2,1 3,2" \
    "3 1 0 1 0 1,0 0,2 3,1" \
    "4 1 1 1 0 3,2 2,3 1,0"
same_file "$T/dense.want" "$T/dense.rec" "records"
expect_eq "$(grep -c '^@CO	megatron: layers 0..2 are model layers 1,3,4$' "$T/dense.txt")" 1 \
    "model layer ids in the header"
expect_eq "$(grep -c '^@MT.*layers:3	' "$T/dense.txt")" 1 "three layers"
end

begin "megatron: --drop-incomplete keeps every token of a dense+MoE model"
run moe import --drop-incomplete --no-PG -O t -o "$T/drop.txt" "$D/megatron_dense.jsonl"
expect_eq "$rc" 0 "status"
grep -v '^@' "$T/drop.txt" >"$T/drop.rec"
same_file "$T/dense.want" "$T/drop.rec" "records"
end

begin "megatron: --mtp keeps the MTP layer after the decoder layers"
run moe import --mtp --no-PG -O t -o "$T/mtp.txt" "$D/megatron_dense.jsonl"
expect_eq "$rc" 0 "status"
expect_no_stderr
grep -v '^@' "$T/mtp.txt" >"$T/mtp.rec"
want "$T/mtp.want" \
    "0 0 0 0 0 0,1 3,0 1,3 2,0" \
    "1 0 1 0 0 2,3 1,0 0,2 3,1" \
    "2 0 2 0 0 1,2 2,1 3,2 0,1" \
    "3 1 0 1 0 1,0 0,2 3,1 0,3" \
    "4 1 1 1 0 3,2 2,3 1,0 2,1"
same_file "$T/mtp.want" "$T/mtp.rec" "records"
expect_eq "$(grep -c '^@CO	megatron: layers 0..3 are model layers 1,3,4,mtp0.0$' "$T/mtp.txt")" \
    1 "model layer ids in the header"
end

begin "megatron: activation recompute repeats are skipped with one warning"
run moe import --no-PG -O t -o "$T/rc.txt" "$D/megatron_recompute.jsonl"
expect_eq "$rc" 0 "status"
expect_eq "$(grep -c 'warning: .*line 3: step 5 gives layer 5 of the same tokens again' \
    "$T/err")" 1 "one warning"
expect_eq "$(grep -c 'skipped 4 repeated (layer, token) cells' "$T/err")" 1 "report"
expect_eq "$(wc -l <"$T/err" | tr -d ' ')" 2 "stderr lines"
grep -v '^@' "$T/rc.txt" >"$T/rc.rec"
# Step 5: micro-batch 1 (tokens 0, 1), its recomputed layers 5 and 2 skipped, micro-batch 2
# (tokens 2, 3); step 6: one token.
want "$T/rc.want" \
    "0 0 0 5 1 4,5 7,0" \
    "1 0 1 5 1 6,7 1,2" \
    "2 0 2 5 1 3,2 0,6" \
    "3 0 3 5 1 5,4 2,1" \
    "4 1 0 6 1 1,0 6,3"
same_file "$T/rc.want" "$T/rc.rec" "records"
end

begin "megatron: a repeated explicit (layer, token) keeps the first"
printf '%s\n' '{"step": 2, "layer": 1, "token": 0, "top_indices": [1, 2]}' \
    '{"step": 2, "layer": 3, "token": 0, "top_indices": [3, 0]}' \
    '{"step": 2, "layer": 1, "token": 0, "top_indices": [2, 1]}' >"$T/dup.jsonl"
run moe import --no-PG -O t -o "$T/dup.txt" "$T/dup.jsonl"
expect_eq "$rc" 0 "status"
expect_eq "$(grep -v '^@' "$T/dup.txt")" "0${tab}0${tab}0${tab}2${tab}0${tab}1,2${tab}3,0" \
    "record"
expect_eq "$(grep -c 'skipped 1 repeated' "$T/err")" 1 "report"
end

# bad_import WHAT SUBSTRING JSON-LINES [OPTIONS...]: import fails cleanly.
bad_import() {
    _what=$1 _sub=$2
    printf '%s\n' "$3" >"$T/bad.jsonl"
    shift 3
    begin "megatron: $_what"
    expect_exit 1 moe import --format megatron "$@" -o "$OUT" "$T/bad.jsonl"
    expect_err_line "$_sub"
    expect_no_output "$OUT"
    end
}
bad_import "unknown block" "'block' is not \"decoder\" or \"mtp\"" \
    '{"step": 0, "block": "encoder", "layer": 1, "top_indices": [[1, 2]]}'
bad_import "num_tokens disagrees" "'num_tokens' is 3 but 'top_indices' has 1 tokens" \
    '{"step": 0, "layer": 1, "num_tokens": 3, "top_indices": [[1, 2]]}'
bad_import "a layer the first step lacks" "line 2: layer 2 is not one of the 1 layers" \
    '{"step": 0, "layer": 1, "top_indices": [[1, 2]]}
{"step": 1, "layer": 2, "top_indices": [[1, 2]]}'
bad_import "an MTP head the first step lacks" "line 4: layer mtp1.0 is not one of the 2 layers" \
    '{"step": 0, "layer": 1, "top_indices": [[1, 2]]}
{"step": 0, "block": "mtp", "mtp_idx": 0, "layer": 0, "top_indices": [[1, 2]]}
{"step": 1, "layer": 1, "top_indices": [[1, 2]]}
{"step": 1, "block": "mtp", "mtp_idx": 1, "layer": 0, "top_indices": [[1, 2]]}' --mtp
bad_import "MTP records only" "no tokens in input (1 MTP records skipped: --mtp keeps them)" \
    '{"step": 0, "block": "mtp", "mtp_idx": 0, "layer": 0, "top_indices": [[1, 2]]}'
bad_import "negative mtp_idx" "'mtp_idx' is not a valid count" \
    '{"step": 0, "block": "mtp", "mtp_idx": -1, "layer": 0, "top_indices": [[1, 2]]}' --mtp

finish
