#!/bin/sh
# bench/bench_papers.sh -- the four papers' quantitative results against moe-costmodel's
# predictions from the inputs each paper states: one row per result (paper, result, published
# figure, prediction, relative error), or the reason a result cannot be predicted from what the
# paper gives; a last line "median error X% over N results". The published figures are typed in
# from the papers (../shared/papers/) with their table or figure named in the row; the
# predictions are computed here, by moe-costmodel, every run. Usage: sh bench/bench_papers.sh
# [BIN_DIR]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/cmd}
mc=$bin/moe-costmodel
topo=$here/share/topologies
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/errors"

# row PAPER WHERE RESULT PUBLISHED PREDICTED: one predicted result; the error is relative to the
# published figure.
row() {
    err=$(awk -v p="$4" -v q="$5" 'BEGIN { e = (q - p) / p; if (e < 0) e = -e;
        printf "%.1f", 100 * e }')
    echo "$err" >>"$tmp/errors"
    printf '%-7s %-12s %-46s %10s %10s %6s%%\n' "$1" "$2" "$3" "$4" "$5" "$err"
}
# norow PAPER WHERE RESULT WHY: a result the paper's stated inputs do not let us predict.
norow() {
    printf '%-7s %-12s %-46s not predictable: %s\n' "$1" "$2" "$3" "$4"
}
# val JSON KEY: a number from a flat --json report (the first "KEY": value).
val() {
    printf '%s\n' "$1" | tr ',{}' '\n\n\n' | awk -v k="\"$2\"" -F: '
        { sub(/^[ \t]+/, "") } index($0, k ":") == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }'
}

printf '%-7s %-12s %-46s %10s %10s %7s\n' paper where result published predicted error

# ---------------------------------------------------------------- ExFlow

# ---------------------------------------------------------------- MoNTA

# ---------------------------------------------------------------- MPMoE

# ---------------------------------------------------------------- Janus

# ---------------------------------------------------------------- whole iterations

sort -n "$tmp/errors" | awk '{ e[NR] = $1 } END {
    if (NR == 0) { print "median error - over 0 results"; exit }
    m = NR % 2 ? e[(NR + 1) / 2] : (e[NR / 2] + e[NR / 2 + 1]) / 2
    printf "median error %.1f%% over %d results\n", m, NR }'
