#!/bin/sh
# tests/cli/place_real.sh -- moe-place on real routing (../shared): DeepSeek-V2-Lite fitted on
# prompts 1-500 and evaluated on the held-out rest (contiguous pinned at 7.9702 vanilla and 7.5277
# coherent transfers per token per layer on 8 ranks; affinity coherent below 0.7 x that vanilla
# figure), and ExFlow's published Mixtral placements (../shared/anchors/exflow-mixtral) against
# `fit --topk 1` on the Mixtral trace: ours need no more top-1 hops per token on 4 and 8 ranks.
# Skipped (77) without the traces.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-place" ]; then
    echo "MOE_BIN must hold moe-place (got '$MOE_BIN')" >&2
    exit 99
fi

mp() { moe_tool moe-place "$@"; }

SHARED=${MOE_SHARED:-$top_srcdir/../shared}
DS=$SHARED/traces/deepseek-v2-lite-chat
MX=$SHARED/traces/mixtral-8x7b-instruct-fp8
ANCHORS=$SHARED/anchors/exflow-mixtral
if [ ! -f "$DS/tokens.txt.gz" ] || [ ! -f "$MX/tokens.txt.gz" ] ||
    [ ! -f "$MX/tokens.weights.txt.gz" ] || [ ! -d "$ANCHORS" ]; then
    echo "skip: real traces or ExFlow anchors not found under $SHARED"
    exit 77
fi

# scheme_of FILE SCHEME COLUMN: a column of eval's SCHEME line (3 per_token_layer, 11 hops).
scheme_of() {
    awk -v s="$2" -v c="$3" '$1 == "SCHEME" && $2 == s { print $c }' "$1"
}

# le A B WHAT: A <= B (numbers).
le() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && b != "" && a + 0 <= b + 0) }' ||
        fail "$3: $1 > $2"
}

moe import --no-PG --meta "$DS/tokens.meta.txt.gz" -o "$T/ds.moet" "$DS/tokens.txt.gz" &&
    moe split --no-PG --ids 1-500 --train "$T/fit.moet" --test "$T/held.moet" "$T/ds.moet" ||
    { echo "cannot import and split the DeepSeek trace"; exit 1; }
moe import --no-PG --meta "$MX/tokens.meta.txt.gz" --weights "$MX/tokens.weights.txt.gz" \
    -o "$T/mx.moet" "$MX/tokens.txt.gz" 2>/dev/null ||
    { echo "cannot import the Mixtral trace"; exit 1; }

# ------------------------------------------------------------------ DeepSeek, held out

begin "DeepSeek-V2-Lite held out: contiguous on 8 ranks, vanilla 7.9702, coherent 7.5277"
expect_eq "$(stat_of "$T/held.moet" tokens)" 44575 "held-out tokens"
run mp fit --no-PG --ranks 8 --method contiguous -o "$T/dense.moep" "$T/fit.moet"
expect_eq "$rc" 0 "fit exit status"
expect_no_stderr
run mp eval --no-layers -@ 2 "$T/dense.moep" "$T/held.moet"
expect_eq "$rc" 0 "eval exit status"
sed -n 's/^SCHEME/  SCHEME/p' "$T/out"
cp "$T/out" "$T/dense.eval"
expect_eq "$(scheme_of "$T/dense.eval" vanilla 3)" 7.9702 "contiguous vanilla transfers"
expect_eq "$(scheme_of "$T/dense.eval" coherent 3)" 7.5277 "contiguous coherent transfers"
end

begin "DeepSeek-V2-Lite held out: affinity coherent < 0.7 x contiguous vanilla"
# --cv 0: the held-out half is the test here; place_cv.sh tests the fit's own cross-validation
run mp fit --no-PG --ranks 8 -@ 2 --cv 0 -o "$T/aff.moep" "$T/fit.moet"
expect_eq "$rc" 0 "fit exit status"
expect_no_stderr
run mp check "$T/aff.moep"
expect_eq "$rc" 0 "check"
run mp eval --no-layers "$T/aff.moep" "$T/held.moet"
expect_eq "$rc" 0 "eval exit status"
sed -n 's/^SCHEME/  SCHEME/p' "$T/out"
coh=$(scheme_of "$T/out" coherent 3)
van=$(scheme_of "$T/dense.eval" vanilla 3)
limit=$(awk -v v="$van" 'BEGIN { printf "%.4f", 0.7 * v }')
awk -v c="$coh" -v l="$limit" 'BEGIN { exit !(c != "" && c < l) }' ||
    fail "affinity coherent $coh, expected below $limit"
# and it also beats contiguous under the scheme it was not fitted for
le "$(scheme_of "$T/out" vanilla 3)" "$van" "affinity vanilla vs contiguous vanilla"
end

# ------------------------------------------------------------------ Mixtral vs ExFlow

begin "ExFlow's Mixtral placements import, export back byte for byte, and evaluate"
for G in 4 8; do
    csv=$(ls "$ANCHORS"/solution_intra${G}_*.csv 2>/dev/null | head -n 1)
    if [ -z "$csv" ]; then
        fail "no ExFlow anchor for $G GPUs"
        continue
    fi
    run mp import --no-PG --format exflow -o "$T/exflow$G.moep" "$csv"
    expect_eq "$rc" 0 "import of $csv"
    expect_no_stderr
    expect_eq "$(head -n 1 "$T/exflow$G.moep")" \
        "@PL	VN:1.0	layers:32	experts:8	ranks:$G	gpus_per_node:$G	capacity:$((8 / G))" \
        "shape of ExFlow's $G-GPU placement"
    mp export --format exflow "$T/exflow$G.moep" >"$T/back.csv"
    same_file "$csv" "$T/back.csv" "ExFlow CSV exported back"
    run mp eval --topk 1 --no-layers "$T/exflow$G.moep" "$T/mx.moet"
    expect_eq "$rc" 0 "eval of ExFlow's $G-GPU placement"
    cp "$T/out" "$T/exflow$G.eval"
    sed -n "s/^SCHEME/  ExFlow $G GPUs: SCHEME/p" "$T/out"
done
# pinned: ExFlow's own placements on this trace, top-1 coherent hops per token
expect_eq "$(scheme_of "$T/exflow4.eval" coherent 11)" 21.0373 "ExFlow 4-GPU coherent hops"
expect_eq "$(scheme_of "$T/exflow8.eval" coherent 11)" 25.6343 "ExFlow 8-GPU coherent hops"
end

begin "fit --topk 1 needs no more hops per token than ExFlow's placements (4 and 8 ranks)"
for G in 4 8; do
    run mp fit --no-PG --topk 1 --ranks "$G" -o "$T/ours$G.moep" "$T/mx.moet"
    expect_eq "$rc" 0 "fit --topk 1 --ranks $G"
    expect_no_stderr
    run mp eval --topk 1 --no-layers "$T/ours$G.moep" "$T/mx.moet"
    expect_eq "$rc" 0 "eval"
    sed -n "s/^SCHEME/  ours $G ranks: SCHEME/p" "$T/out"
    [ -f "$T/exflow$G.eval" ] || continue
    le "$(scheme_of "$T/out" coherent 11)" "$(scheme_of "$T/exflow$G.eval" coherent 11)" \
        "coherent hops per token on $G ranks (ours vs ExFlow)"
    le "$(scheme_of "$T/out" coherent 3)" "$(scheme_of "$T/exflow$G.eval" coherent 3)" \
        "coherent transfers per token per layer on $G ranks (ours vs ExFlow)"
done
end

begin "the exflow method on the Mixtral trace is valid and no worse than ExFlow's files"
for G in 4 8; do
    run mp fit --no-PG --method exflow --time-limit 5 --ranks "$G" -o "$T/ilp$G.moep" \
        "$T/mx.moet"
    expect_eq "$rc" 0 "fit --method exflow --ranks $G"
    run mp check "$T/ilp$G.moep"
    expect_eq "$rc" 0 "check"
    run mp eval --topk 1 --no-layers "$T/ilp$G.moep" "$T/mx.moet"
    sed -n "s/^SCHEME/  exflow method $G ranks: SCHEME/p" "$T/out"
    grep -q 'status:optimal' "$T/ilp$G.moep" || continue
    [ -f "$T/exflow$G.eval" ] || continue
    le "$(scheme_of "$T/out" coherent 11)" "$(scheme_of "$T/exflow$G.eval" coherent 11)" \
        "exflow method hops on $G ranks vs ExFlow's file"
done
end

finish
