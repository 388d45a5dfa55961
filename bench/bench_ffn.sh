#!/bin/sh
# bench/bench_ffn.sh -- moe-run's expert FFN against a bare cblas_sgemm on the same shapes
# (issue 43, acceptance 3: >= 0.8x). moe-run on 2 CPU ranks (one per core, no rank
# time-sliced), hidden 1024, ffn 2048, SwiGLU, 4096 tokens (2048 per rank), top-2 over 16
# experts, one layer, forward only. Its FFN GFLOP/s: the slowest rank's expert-token rows
# (the layer's max_load) times 2 (H C + F H) flops a row (C = 2F), over the layer's compute_ms
# (the slowest rank's; it also holds the gate, mixer and permutes, so the figure is a lower
# bound). The bare figure: bench_ffn, the same two products on the same rows, two processes
# at once as the two ranks run (the slower's figure). Paired runs, the median ratio of
# BENCH_PAIRS (default 3).
# Usage: sh bench/bench_ffn.sh [BIN_DIR [BENCH_FFN]]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/cmd}
bf=${2:-$bin/../bench/bench_ffn}
command -v mpirun >/dev/null || { echo "bench: mpirun not found" >&2; exit 77; }
[ -x "$bf" ] || { echo "bench: $bf not built (needs a CBLAS: configure --with-blas)" >&2; exit 77; }
"$bin/moe-run" --version | grep -q '^features: .*\(openblas\|blis\)' ||
    { echo "bench: moe-run built without a BLAS" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
H=1024
F=2048
pairs=${BENCH_PAIRS:-3}
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
jnum() { tr ',{}' '\n\n\n' <"$1" | sed -n "s/^ *\"$2\": \([-0-9.e+]*\) *\$/\1/p" | head -n 1; }

echo "# expert FFN: moe-run (2 ranks, H $H, F $F, swiglu, 4096 tokens, top-2 of 16, the"
echo "# slowest rank) against cblas_sgemm on its rows (one thread, 2 at once); GFLOP/s, $pairs pairs"
printf '%-5s %8s %10s %10s %7s\n' pair rows moe-run sgemm ratio
i=1
while [ "$i" -le "$pairs" ]; do
    mpirun --oversubscribe -np 2 "$bin/moe-run" --layers 1 --experts 16 --topk 2 \
        --hidden "$H" --ffn "$F" --expert swiglu --tokens-per-rank 2048 --iters 2 --warmup 1 \
        --seed "$i" --json "$tmp/r.json" >"$tmp/r.txt"
    rows=$(jnum "$tmp/r.json" max_load)
    ms=$(jnum "$tmp/r.json" compute_ms)
    mr=$(awk -v n="$rows" -v ms="$ms" -v H="$H" -v F="$F" \
        'BEGIN { printf "%.2f", n * 2 * (H * 2 * F + F * H) / (ms * 1e-3) / 1e9 }')
    # two at once, as moe-run's two ranks run, the slower one's figure
    for k in 1 2; do
        "$bf" --rows "${rows%.*}" --hidden "$H" --ffn "$F" --expert swiglu --reps 3 \
            >"$tmp/s$k" &
    done
    wait
    sg=$(sed -n 's/^gflops //p' "$tmp/s1" "$tmp/s2" | sort -g | head -n 1)
    r=$(awk -v a="$mr" -v b="$sg" 'BEGIN { printf "%.3f", a / b }')
    printf '%-5s %8s %10s %10s %7s\n' "$i" "${rows%.*}" "$mr" "$sg" "$r"
    echo "$r" >>"$tmp/ratios"
    i=$((i + 1))
done
echo "median ratio $(med <"$tmp/ratios") (goal >= 0.8)"
