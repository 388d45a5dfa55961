#!/bin/sh
# bench/bench_costmodel.sh -- how long moe-costmodel simulate takes as ranks and tokens grow, on a
# DeepSeek-V3-shaped trace (58 MoE layers, 256 experts, top-8, hidden 7168, bf16; generated as in
# bench_place.sh), on 2 cores (-@ 1), beside the time the shared accounting alone takes on the
# same inputs (moe-place eval -@ 1) and the time to read the trace (moe-trace stats -@ 1).
#  - run time vs ranks: 64, 256, 1024 ranks (8 GPUs per node, h100-ndr400 nodes), 200,000 tokens
#  - run time vs tokens: 50,000 / 100,000 / 200,000 tokens on 1024 ranks
#  - acceptance 4: 200,000 tokens on 1024 ranks in <= 30 s
# Placements are contiguous (moe-place fit --method contiguous): the run time does not depend on
# where the experts are. Usage: sh bench/bench_costmodel.sh [BIN_DIR]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/cmd}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mt=$bin/moe-trace
mp=$bin/moe-place
mc=$bin/moe-costmodel
# Time the programs themselves, not libtool's wrapper scripts around uninstalled binaries.
if [ -x "$bin/.libs/moe-costmodel" ] && [ -d "$bin/../lib/.libs" ]; then
    mt=$bin/.libs/moe-trace
    mp=$bin/.libs/moe-place
    mc=$bin/.libs/moe-costmodel
    LD_LIBRARY_PATH=$(cd "$bin/../lib/.libs" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
fi
now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

"$mt" gen --no-PG -L 58 -E 256 -k 8 -n 200000 -s 2000 -r 64 -@ 1 --hidden 7168 \
    --elem-bytes 2 -o "$tmp/v3.mft"
"$mt" head --no-PG -n 50000 -o "$tmp/v3-50k.mft" "$tmp/v3.mft"
"$mt" head --no-PG -n 100000 -o "$tmp/v3-100k.mft" "$tmp/v3.mft"
for G in 64 256 1024; do
    "$mp" fit --no-PG --method contiguous --ranks $G --gpus-per-node 8 -o "$tmp/p$G.moep" \
        "$tmp/v3.mft"
    sed "s/^nodes 1\$/nodes $((G / 8))/" "$here/share/topologies/h100-ndr400.topo" \
        >"$tmp/h$G.topo"
done

# one TRACE G: simulate, eval and stats times, peak memory of simulate; prints a row
one() {
    t0=$(now)
    "$mt" stats -@ 1 "$1" >/dev/null
    t1=$(now)
    "$mp" eval -@ 1 --no-layers "$tmp/p$2.moep" "$1" >/dev/null
    t2=$(now)
    /usr/bin/time -f '%M' -o "$tmp/rss" "$mc" simulate -@ 1 --topology "$tmp/h$2.topo" \
        --ffn 2048 --best -o "$tmp/sim$2.txt" "$1" "$tmp/p$2.moep"
    t3=$(now)
    sim=$(secs "$t2" "$t3")
    printf '%-8s %6s %9s %9s %9s %10s %10s %8s\n' "$(basename "$1" .mft)" "$2" "$sim" \
        "$(secs "$t1" "$t2")" "$(secs "$t0" "$t1")" "$(ratio "$sim" "$(secs "$t1" "$t2")")" \
        "$(ratio "$sim" "$(secs "$t0" "$t1")")" "$(awk '{ printf "%.0f", $1 / 1024 }' "$tmp/rss")"
    last=$sim
}
header() { printf '%-8s %6s %9s %9s %9s %10s %10s %8s\n' trace ranks sim_s eval_s stats_s \
    sim/eval sim/stats peak_MB; }

echo "# moe-costmodel simulate run time vs ranks (200,000 tokens, 58 x 256, top-8; -@ 1)"
header
for G in 64 256 1024; do one "$tmp/v3.mft" $G; done
echo
echo "# run time vs tokens (1024 ranks)"
header
for f in v3-50k v3-100k v3; do one "$tmp/$f.mft" 1024; done
echo
echo "# acceptance 4: 200,000 tokens on 1024 ranks"
ok=$(awk -v a="$last" 'BEGIN { print a <= 30 ? "ok" : "MISSED" }')
echo "simulate ${last} s (target <= 30 s): $ok"
echo "# the predicted schemes of that run:"
grep '^BEST\|^# best' "$tmp/sim1024.txt"
