#!/bin/sh
# bench/bench_sim.sh -- moe-costmodel simulate with replicas at scale (issue 45): a
# DeepSeek-V3-shaped trace (58 MoE layers, 256 experts, top-8, hidden 7168, bf16; moe-trace gen
# with its default skew) on 1024 ranks (128 x 8, dgx-h100 --nodes 128) with a balanced
# placement of 4 copies of each expert (moe-place fit --method balanced --ep-size 256: one copy
# in each of 4 expert-parallel groups), against the one-copy case on 256 ranks (32 x 8), the
# same routing work per token. Both at -@ 1 (2 cores), timed as wall and CPU seconds.
#  - goal: the full size (1M tokens) replicated <= 30 s wall
#  - target: replicated per token within 1.5x of one copy
# BENCH_SIM_TOKENS sets the tokens [20000, sized for the 2-core machine; 1000000 for the
# goal]. Usage: sh bench/bench_sim.sh [BIN_DIR]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/cmd}
tokens=${BENCH_SIM_TOKENS:-20000}
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
MOEFLOW_TOPOLOGIES=$here/share/topologies
export MOEFLOW_TOPOLOGIES

"$mt" gen --no-PG -L 58 -E 256 -k 8 -n "$tokens" -s $((tokens / 100 + 1)) -r 1024 -@ 1 \
    --hidden 7168 --elem-bytes 2 -o "$tmp/v3.mft"
"$mp" fit --no-PG --method balanced --ranks 1024 --gpus-per-node 8 --ep-size 256 \
    -o "$tmp/r4.moep" "$tmp/v3.mft"
"$mp" fit --no-PG --method balanced --ranks 256 --gpus-per-node 8 -o "$tmp/r1.moep" \
    "$tmp/v3.mft"

# run NAME NODES PLACEMENT: wall and CPU seconds of one simulate, into $tmp/NAME.t
run() {
    /usr/bin/time -f '%e %U %S' -o "$tmp/$1.t" "$mc" simulate -@ 1 --no-layers \
        --topology dgx-h100 --nodes "$2" -o "$tmp/$1.out" "$tmp/v3.mft" "$3"
}
run one 32 "$tmp/r1.moep"
run rep 128 "$tmp/r4.moep"
read -r w1 u1 s1 <"$tmp/one.t"
read -r w4 u4 s4 <"$tmp/rep.t"
awk -v n="$tokens" -v w1="$w1" -v c1="$(echo "$u1 $s1" | awk '{print $1 + $2}')" \
    -v w4="$w4" -v c4="$(echo "$u4 $s4" | awk '{print $1 + $2}')" 'BEGIN {
    printf "simulate -@ 1, %d tokens, 58 x 256 top-8, dgx-h100 nodes\n", n
    printf "  one copy,  256 ranks:   wall %7.2f s  cpu %7.2f s  cpu/token %.2f us\n",
        w1, c1, 1e6 * c1 / n
    printf "  4 copies, 1024 ranks:   wall %7.2f s  cpu %7.2f s  cpu/token %.2f us\n",
        w4, c4, 1e6 * c4 / n
    r = c1 > 0 ? c4 / c1 : 0
    printf "  replicated / one copy (cpu): %.2f  (target <= 1.5: %s)\n", r,
        r <= 1.5 ? "met" : "MISSED"
    if (n >= 1000000)
        printf "  1M tokens replicated, wall %.1f s (goal <= 30 s: %s)\n", w4,
            w4 <= 30 ? "met" : "MISSED"
}'
