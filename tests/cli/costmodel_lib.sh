# tests/cli/costmodel_lib.sh -- what the moe-costmodel tests share, sourced after lib.sh: the
# tool wrappers, the presets' directory, has_line, and the small 2 x 4 simulation inputs.

if [ ! -x "$MOE_BIN/moe-costmodel" ]; then
    echo "MOE_BIN must hold moe-costmodel (got '$MOE_BIN')" >&2
    exit 99
fi

cm() { moe_tool moe-costmodel "$@"; }
mt() { moe_tool moe-trace "$@"; }
mp() { moe_tool moe-place "$@"; }
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES

# has_line PATTERN: a line of $T/out matches the extended regular expression.
has_line() {
    grep -Eq -- "$1" "$T/out" || fail "no line matching '$1' in the output"
}

# toy_sim_inputs: $T/c.topo (2 nodes x 4 GPUs, 100 GB/s and 2 us within a node, 10 GB/s and
# 5 us between, 100 TFLOP/s), $T/t.moet (seeded: 4 layers, 16 experts, top-2, 3000 tokens in 60
# sequences from 8 ranks, weights, hidden 64, bf16) and $T/a.moep (moe-place fit on it, 8
# ranks). Returns non-zero when one cannot be made.
toy_sim_inputs() {
    cat >"$T/c.topo" <<'TOPO'
topology test-2x4
nodes 2
gpus-per-node 4
link intra bandwidth 100 GB/s latency 2 us
link inter bandwidth 10 GB/s latency 5 us
flops 100 TFLOP/s
TOPO
    mt gen --no-PG -L 4 -E 16 -k 2 -n 3000 -s 60 -r 8 -w --hidden 64 --elem-bytes 2 -S 7 \
        -o "$T/t.moet" &&
        mp fit --no-PG --ranks 8 --gpus-per-node 4 -o "$T/a.moep" "$T/t.moet"
}
