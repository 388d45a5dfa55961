#!/bin/sh
# bench/bench_predict.sh -- moe-costmodel simulate's predictions against moe-run's measured
# times (moe-costmodel acceptance point 3, issue 20 acceptance 4): this machine calibrated with
# moe-run --calibrate, then every mode of moe-run on 8 CPU ranks (mpirun, oversubscribed) laid
# out as one node of 8 and as 2 nodes x 4, replaying DeepSeek-V2-Lite routing, at several
# sizes, predicted by simulate from the same trace, placement, hidden and FFN sizes, dtype and
# chunks, coherent's all-gather priced as the hidden vectors moe-run gathers. Prints layout,
# mode, size, predicted and measured milliseconds per iteration, |error| / measured, and the
# median error (goal <= 10%).
# Usage: sh bench/bench_predict.sh [BIN_DIR]   (needs mpirun and ../shared beside the checkout)
# Environment: BENCH_REPEATS (runs per point, the fastest counts; default 3), BENCH_LAYERS
# (MoE layers kept of the trace's 26; default 4), BENCH_SIZES (space-separated H:F:N, N tokens
# per rank; default "128:128:200 256:256:200 256:64:400"), BENCH_GPN (GPUs per node of each
# layout, space-separated; default "8 4": 1 x 8 and 2 x 4).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/cmd}
shared=${MOE_SHARED:-$here/../shared}
ds=$shared/traces/deepseek-v2-lite-chat
[ -f "$ds/tokens.txt.gz" ] || { echo "bench: $ds/tokens.txt.gz not found" >&2; exit 77; }
command -v mpirun >/dev/null || { echo "bench: mpirun not found" >&2; exit 77; }
"$bin/moe-run" --version | grep -q MPI || { echo "bench: moe-run without MPI" >&2; exit 77; }
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
reps=${BENCH_REPEATS:-3}
layers=${BENCH_LAYERS:-4}
sizes=${BENCH_SIZES:-128:128:200 256:256:200 256:64:400}
layouts=${BENCH_GPN:-8 4}
G=8
chunks=4
mt=$bin/moe-trace
mp=$bin/moe-place
mr=$bin/moe-run
mc=$bin/moe-costmodel
mpi() { mpirun --oversubscribe -np "$G" "$@"; }

"$mt" import --no-PG -q --meta "$ds/tokens.meta.txt.gz" -o "$tmp/ds.mft" "$ds/tokens.txt.gz"
"$mt" slice --no-PG --layers "0-$((layers - 1))" -o "$tmp/dsl.mft" "$tmp/ds.mft"

# the first value of a top-level JSON key
jval() { tr ',{}' '\n\n\n' <"$1" | sed -n "s/^ *\"$2\": \([-0-9.e+a-z]*\) *\$/\1/p" | head -n 1; }

echo "# moe-costmodel simulate against moe-run: $G CPU ranks (mpirun --oversubscribe) as nodes"
echo "# of $layouts on $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') processors;"
echo "# DeepSeek-V2-Lite routing, layers 0-$((layers - 1)), the first G x N tokens; placement"
echo "# moe-place fit --max-imbalance 1.10 on those tokens; fp32; pipelined --chunks $chunks."
echo "# Per layout and size: moe-run --calibrate --gpus-per-node g --hidden H --ffn F --experts 64"
echo "# (a fresh topology), then simulate --topology it --gather-bytes hidden; measured: moe-run's"
echo "# time per iteration, the fastest of $reps runs (1 warm-up + 1 timed iteration each)."
echo "# Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
printf '%-6s %-13s %-16s %12s %12s %8s\n' nodes mode "size(H:F:N)" predicted_ms measured_ms \
    error
: >"$tmp/err"
for gpn in $layouts; do
for sz in $sizes; do
    H=${sz%%:*}
    rest=${sz#*:}
    F=${rest%%:*}
    N=${rest#*:}
    "$mt" head --no-PG -n "$((G * N))" -o "$tmp/t.mft" "$tmp/dsl.mft"
    "$mp" fit --no-PG -q --ranks "$G" --gpus-per-node "$gpn" -@ 1 --max-imbalance 1.10 \
        -o "$tmp/p.moep" "$tmp/t.mft"
    mpi "$mr" --calibrate --gpus-per-node "$gpn" --hidden "$H" --ffn "$F" --experts 64 \
        -o "$tmp/cal.topo"
    # moe-run's coherent mode all-gathers the tokens' states: hidden vectors, not token ids
    "$mc" simulate --topology "$tmp/cal.topo" --hidden "$H" --ffn "$F" --dtype fp32 \
        --chunks "$chunks" --gather-bytes hidden --no-layers "$tmp/t.mft" "$tmp/p.moep" \
        >"$tmp/sim.txt"
    for mode in vanilla coherent pipelined hierarchical datacentric; do
        extra=
        [ "$mode" = pipelined ] && extra="--chunks $chunks"
        best=
        i=0
        while [ "$i" -lt "$reps" ]; do
            # shellcheck disable=SC2086
            mpi "$mr" --mode "$mode" $extra --trace "$tmp/t.mft" --placement "$tmp/p.moep" \
                --hidden "$H" --ffn "$F" --tokens-per-rank "$N" --iters 1 --warmup 1 \
                --json "$tmp/r.json" >/dev/null
            ms=$(jval "$tmp/r.json" iteration_ms)
            best=$(awk -v a="$ms" -v b="${best:-}" 'BEGIN { print (b == "" || a < b) ? a : b }')
            i=$((i + 1))
        done
        # the SCHEME line's time includes the per-iteration terms (coherent's all-gather)
        pred=$(awk -F '\t' -v m="$mode" '$1 == "SCHEME" && $2 == m { print $3 }' "$tmp/sim.txt")
        err=$(awk -v p="$pred" -v m="$best" 'BEGIN { e = (p - m) / m; if (e < 0) e = -e
            printf "%.3f", e }')
        echo "$err" >>"$tmp/err"
        printf '%-6s %-13s %-16s %12.1f %12.1f %7.1f%%\n' "$((G / gpn))x$gpn" "$mode" \
            "$H:$F:$N" "$pred" "$best" "$(awk -v e="$err" 'BEGIN { print 100 * e }')"
    done
done
done
sort -n "$tmp/err" | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "# median |predicted - measured| / measured over %d points: %.1f%% (goal <= 10%%: %s)\n",
        NR, 100 * m, m <= 0.10 ? "met" : "MISSED" }'
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?');" \
    "$(($(date +%s) - start)) s in all"
