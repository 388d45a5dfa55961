#!/bin/sh
# bench/bench_predict.sh -- moe-costmodel simulate's predictions against moe-run's measured
# times (moe-costmodel acceptance point 3, issue 20 acceptance 4): this machine calibrated with
# moe-run --calibrate, then every mode of moe-run on 8 CPU ranks (mpirun, oversubscribed) laid
# out as one node of 8 and as 2 nodes x 4, replaying DeepSeek-V2-Lite routing, at several
# sizes, predicted by simulate from the same trace, placement, hidden and FFN sizes, dtype and
# chunks, coherent's all-gather priced as the hidden vectors moe-run gathers. Prints layout,
# mode, size, predicted and measured milliseconds per iteration, |error| / measured, and the
# median error (goal <= 10%). Then training (issue 22): moe-costmodel simulate --train
# against moe-run --train, per mode and memory-reuse strategy, time per step and peak
# activation bytes (goals: median time error <= 15%, peak-memory error <= 10% per strategy).
# Usage: sh bench/bench_predict.sh [BIN_DIR]   (needs mpirun and ../shared beside the checkout)
# Environment: BENCH_REPEATS (runs per point, the fastest counts; default 3), BENCH_LAYERS
# (MoE layers kept of the trace's 26; default 4), BENCH_SIZES (space-separated H:F:N, N tokens
# per rank; default "128:128:200 256:256:200 256:64:400"), BENCH_GPN (GPUs per node of each
# layout, space-separated; default "8 4": 1 x 8 and 2 x 4), BENCH_PARTS ("forward train", or
# one of them), BENCH_TRAIN_SIZES (default "128:128:200 256:256:100"), BENCH_TRAIN_GPN
# (default "4"), BENCH_EXPERT (the experts of moe-run and simulate: swiglu, the default, or
# silu).
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
expert=${BENCH_EXPERT:-swiglu}
mt=$bin/moe-trace
mp=$bin/moe-place
mr=$bin/moe-run
mc=$bin/moe-costmodel
mpi() { mpirun --oversubscribe -np "$G" "$@"; }

"$mt" import --no-PG -q --meta "$ds/tokens.meta.txt.gz" -o "$tmp/ds.mft" "$ds/tokens.txt.gz"
"$mt" slice --no-PG --layers "0-$((layers - 1))" -o "$tmp/dsl.mft" "$tmp/ds.mft"

# prepare GPN H:F:N: sets H, F and N; $tmp/t.mft the first G x N tokens, $tmp/p.moep the
# placement fitted on them for nodes of GPN ranks, $tmp/cal.topo this machine calibrated
prepare() {
    H=${2%%:*}
    rest=${2#*:}
    F=${rest%%:*}
    N=${rest#*:}
    "$mt" head --no-PG -n "$((G * N))" -o "$tmp/t.mft" "$tmp/dsl.mft"
    "$mp" fit --no-PG -q --ranks "$G" --gpus-per-node "$1" -@ 1 --max-imbalance 1.10 \
        -o "$tmp/p.moep" "$tmp/t.mft"
    mpi "$mr" --calibrate --gpus-per-node "$1" --hidden "$H" --ffn "$F" --expert "$expert" \
        --experts 64 \
        -o "$tmp/cal.topo"
}

# median COL FILE: the median of column COL of FILE's lines
median() {
    awk -v c="$1" '{ print $c }' "$2" | sort -n |
        awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# the first value of a top-level JSON key
jval() { tr ',{}' '\n\n\n' <"$1" | sed -n "s/^ *\"$2\": \([-0-9.e+a-z]*\) *\$/\1/p" | head -n 1; }

parts=${BENCH_PARTS:-forward train}
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }

if want forward; then
echo "# moe-costmodel simulate against moe-run: $G CPU ranks (mpirun --oversubscribe) as nodes"
echo "# of $layouts on $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?') processors;"
echo "# DeepSeek-V2-Lite routing, layers 0-$((layers - 1)), the first G x N tokens; placement"
echo "# moe-place fit --max-imbalance 1.10 on those tokens; fp32; $expert experts; pipelined"
echo "# --chunks $chunks."
echo "# Per layout and size: moe-run --calibrate --gpus-per-node g --hidden H --ffn F --experts 64"
echo "# (a fresh topology), then simulate --topology it --gather-bytes hidden; measured: moe-run's"
echo "# time per iteration, the fastest of $reps runs (1 warm-up + 1 timed iteration each)."
echo "# Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
printf '%-6s %-13s %-16s %12s %12s %8s\n' nodes mode "size(H:F:N)" predicted_ms measured_ms \
    error
: >"$tmp/err"
for gpn in $layouts; do
for sz in $sizes; do
    prepare "$gpn" "$sz"
    # moe-run's coherent mode all-gathers the tokens' states: hidden vectors, not token ids
    "$mc" simulate --topology "$tmp/cal.topo" --hidden "$H" --ffn "$F" --expert "$expert" \
        --dtype fp32 \
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
                --hidden "$H" --ffn "$F" --expert "$expert" --tokens-per-rank "$N" --iters 1 \
                --warmup 1 \
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
awk -v m="$(median 1 "$tmp/err")" -v n="$(wc -l <"$tmp/err")" 'BEGIN {
    printf "# median |predicted - measured| / measured over %d points: %.1f%% (goal <= 10%%: %s)\n",
        n, 100 * m, m <= 0.10 ? "met" : "MISSED" }'
fi

# Training: one step of every mode, and of every memory-reuse strategy where the mode has a
# serving side, predicted by simulate --train and measured by moe-run --train (SGD).
if want train; then
tsizes=${BENCH_TRAIN_SIZES:-128:128:200 256:256:100}
tlayouts=${BENCH_TRAIN_GPN:-4}
tchunks=3
echo
echo "# Training: moe-costmodel simulate --train against moe-run --train, $G CPU ranks as nodes"
echo "# of $tlayouts; tokens and placement made as above, a fresh calibration per size; SGD;"
echo "# pipelined --chunks $tchunks. Measured: time per step (the fastest of $reps runs, 1 warm-up"
echo "# + 1 timed step each), peak_activation_bytes (the runtime's count of its live activations"
echo "# and buffers, the largest rank) and, for scale, peak RSS (the largest rank's process)."
echo "# Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
printf '%-6s %-13s %-5s %-12s %9s %9s %6s %11s %11s %6s %9s\n' nodes mode reuse "size(H:F:N)" \
    pred_ms meas_ms error pred_peak meas_peak error rss_MB
: >"$tmp/terr"
: >"$tmp/parts"
for gpn in $tlayouts; do
for sz in $tsizes; do
    prepare "$gpn" "$sz"
    "$mc" simulate --topology "$tmp/cal.topo" --hidden "$H" --ffn "$F" --expert "$expert" \
        --dtype fp32 \
        --chunks "$tchunks" --gather-bytes hidden --no-layers --train --reuse all \
        "$tmp/t.mft" "$tmp/p.moep" >"$tmp/sim.txt"
    for point in "vanilla none" "vanilla S1" "vanilla S2" "vanilla S3" "vanilla S4" \
        "coherent none" "coherent S4" "pipelined none" "pipelined S1" "pipelined S2" \
        "pipelined S3" "pipelined S4" "hierarchical S4" "datacentric none"; do
        mode=${point% *}
        st=${point#* }
        extra=
        [ "$mode" = pipelined ] && extra="--chunks $tchunks"
        case $mode in hierarchical | datacentric) ;; *) extra="$extra --reuse $st" ;; esac
        best=
        i=0
        while [ "$i" -lt "$reps" ]; do
            # shellcheck disable=SC2086
            mpi "$mr" --train --mode "$mode" $extra --trace "$tmp/t.mft" \
                --placement "$tmp/p.moep" --hidden "$H" --ffn "$F" --expert "$expert" \
                --tokens-per-rank "$N" \
                --iters 1 --warmup 1 --json "$tmp/r.json" >/dev/null
            ms=$(jval "$tmp/r.json" iteration_ms)
            if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then
                best=$ms
                cp "$tmp/r.json" "$tmp/best.json"
            fi
            i=$((i + 1))
        done
        peak=$(jval "$tmp/best.json" peak_activation_bytes)
        rss=$(jval "$tmp/best.json" peak_rss_bytes)
        # the step's parts, predicted and measured (the best run's ranks' mean), for the bias
        awk -F '\t' -v m="$mode" -v s="$st" -v f="$(jval "$tmp/best.json" forward_ms)" \
            -v b="$(jval "$tmp/best.json" backward_ms)" -v u="$(jval "$tmp/best.json" update_ms)" \
            '$1 == "TRAIN" && $2 == m && $3 == s { print ($5 - f) / f, ($6 - b) / b, ($7 - u) / u }' \
            "$tmp/sim.txt" >>"$tmp/parts"
        set -- $(awk -F '\t' -v m="$mode" -v s="$st" \
            '$1 == "TRAIN" && $2 == m && $3 == s { print $4, $8 }' "$tmp/sim.txt")
        awk -v l="$((G / gpn))x$gpn" -v m="$mode" -v s="$st" -v z="$H:$F:$N" -v pt="$1" \
            -v mt="$best" -v pp="$2" -v mp="$peak" -v rss="$rss" 'BEGIN {
            et = (pt - mt) / mt; if (et < 0) et = -et
            ep = (pp - mp) / mp; if (ep < 0) ep = -ep
            printf "%-6s %-13s %-5s %-12s %9.1f %9.1f %5.1f%% %11.0f %11.0f %5.2f%% %9.1f\n",
                l, m, s, z, pt, mt, 100 * et, pp, mp, 100 * ep, rss / 1e6
            printf "%s %.4f %.5f\n", s, et, ep >> "/dev/stderr" }' 2>>"$tmp/terr"
    done
done
done
awk 'function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    { n++; t[n] = $2; c[$1]++; k = $1; ts[k, c[k]] = $2; if ($3 > pm[k]) pm[k] = $3 }
    END {
        m = med(t, n)
        printf "# training, median |predicted - measured| / measured step time over %d points: " \
            "%.1f%% (goal <= 15%%: %s)\n", n, 100 * m, m <= 0.15 ? "met" : "MISSED"
        split("none S1 S2 S3 S4", st, " ")
        for (i = 1; i <= 5; i++) {
            s = st[i]; if (!c[s]) continue
            delete x; for (j = 1; j <= c[s]; j++) x[j] = ts[s, j]
            printf "#   %-4s %2d points: median time error %5.1f%%, largest peak-memory error " \
                "%5.2f%% (goal <= 10%%: %s)\n", s, c[s], 100 * med(x, c[s]), 100 * pm[s],
                pm[s] <= 0.10 ? "met" : "MISSED"
        }
    }' "$tmp/terr"
# where the step's error sits: (predicted - measured) / measured of each part, the median
awk -v f="$(median 1 "$tmp/parts")" -v b="$(median 2 "$tmp/parts")" \
    -v u="$(median 3 "$tmp/parts")" 'BEGIN { printf "#   step parts, median signed error: " \
    "forward %+.1f%%, loss and backward %+.1f%%, update %+.1f%%\n", 100 * f, 100 * b, 100 * u }'
fi

echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?');" \
    "$(($(date +%s) - start)) s in all"
