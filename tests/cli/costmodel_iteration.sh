#!/bin/sh
# tests/cli/costmodel_iteration.sh -- moe-costmodel iteration: every scheme's time against
# values computed by hand from the formulas of moe-costmodel(1), ITERATION; the host path of
# janus; simulate's all-to-all time taken from a trace; bad input and bad usage.

. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"

# A toy model: h 100, F 400, s 10, one sequence per GPU, top-1, 2 machines x 2 GPUs, 1 GFLOP/s,
# 1 MB/s per GPU, 1-byte elements. Per token, a dense layer costs 8h^2 + 4sh + 4hF = 80000 +
# 4000 + 160000 = 244000 FLOPs, the MoE layer 84000 + 160000 + 2h X (X = 4 experts) = 244800:
# over 10 tokens 2.44 ms and 2.448 ms, of which the experts' GEMMs 1.6 ms. Two layers, one MoE
# block: it is layer 0 (blocks close one layer early). Janus: T = 10 tokens; Comm_EC = 2 m H T
# (n-1)/n = 2000 bytes over m x 1 MB/s = 1 ms per pass; Comm_DC = 2 H F E m (n-1) = 160000
# bytes, rdma = 80 ms; R = T/(n F E) = 0.0125, so Janus stays expert-centric.
TOY="--layers=2 --blocks=1 --hidden=100 --ffn=400 --seq=10 --batch=1 --nodes=2
     --gpus-per-node=2 --flops=1G --bw-inter=1M --elem-bytes=1"

begin "iteration: training, hand-computed times of every scheme"
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY
expect_no_stderr
# expert-centric: forward 2.448 + 1 + 2.44, backward 2 x 2.44 + 2 x 2.448 + 1: 16.664 ms, of
# which compute 3 x 4.888 = 14.664; comm 2 ms = 12.0%; 40 tokens / 16.664 ms = 2400.38/s;
# MFU 14.664 / 16.664 = 0.880
has_line '^expert-centric +16\.664 +14\.664 +2\.000 +12\.0 +2400\.38 +0\.880 +1\.000$'
# pipelined (4 chunks, dispatch = combine = 0.5 ms): forward 0.848 + (1 + 1.6)/4 + 3/4 x 1.6
# = 2.698, backward 1.696 + (1 + 3.2)/4 + 3/4 x 3.2 = 5.146; + 2.44 + 4.88 = 15.164 ms
has_line '^pipelined +15\.164 +14\.664 +0\.500 '
# data-centric: pull 80 ms, then 2.448 + 2.44; backward 4.88 + 4.896 = 94.664, then the
# gradients 80 ms more: 174.664 ms
has_line '^data-centric +174\.664 +14\.664 +160\.000 '
has_line '^janus +16\.664 +14\.664 +2\.000 +12\.0 '
end

begin "iteration: inference, the host path and its switch-aware form"
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY --bw-host=1M --inference
# host path: pcie = 2 GPUs per switch x 160000 / 1 MB/s = 320 ms; E m (n-1) = 2 external
# experts: 320 + 80/2 = 360 ms, + 4.888 of compute. dc-prefetch sends each expert through the
# uplink once: 160 + 80/2 = 200 ms, + 4.888
has_line '^expert-centric +5\.888 +4\.888 +1\.000 '
has_line '^data-centric +364\.888 +4\.888 +360\.000 '
has_line '^dc-prefetch +204\.888 +4\.888 +200\.000 '
end

begin "iteration: prefetch hides a pull behind the blocks before it; Janus's threshold"
# Four layers, one MoE block: layer 2. With 100 MB/s the pull is 0.8 ms; plain, it waits:
# 4.88 + 0.8 + 2.448 + 2.44 = 10.568 ms; prefetched it is done before layer 2: 9.768 ms, the
# compute alone. Expert-centric: 9.768 + 2000/(2 x 100 MB/s) = 9.778 ms. With threshold 0.01
# Janus takes the data-centric side (R = 0.0125).
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY --layers=4 --bw-inter=100M --inference --threshold=0.01
has_line '^expert-centric +9\.778 +9\.768 +0\.010 '
has_line '^data-centric +10\.568 +9\.768 +0\.800 '
has_line '^dc-prefetch +9\.768 +9\.768 +0\.000 '
has_line '^janus +9\.768 +9\.768 +0\.000 '
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY --layers=4 --bw-inter=100M --inference --json
has_line '"name": "data-centric", "time": 0\.010568, "compute": 0\.009768'
end

begin "iteration: fewer experts than GPUs is said"
# 8 experts over 2 x 2 GPUs: two a GPU, silent; 2 experts: half an expert a GPU, a warning
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY --experts=8
expect_no_stderr
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY --experts=2
expect_tool_err_line moe-costmodel "warning: --experts 2 over 4 GPUs: 0.5 experts a GPU"
end

begin "janus: the host path and the skew in its times"
expect_exit 0 cm janus --batch=1 --seq=10 --hidden=100 --ffn=400 --nodes=2 --gpus-per-node=2 \
    --bw-inter=1M --elem-bytes=1 --bw-host=1M --skew=1.5
# E.C. 1.5 x 1 ms; D.C. 320 + 40 ms as above
has_line '^ +0 +1 +0\.0125 .* expert-centric +1\.5000 +360\.0000$'
expect_exit 0 cm janus --batch=1 --seq=10 --hidden=100 --ffn=400 --nodes=2 --gpus-per-node=2 \
    --bw-inter=1M --elem-bytes=1 --bw-host=1M --gpus-per-switch=1 --json
has_line '"time_ec": 0\.001, "time_dc": 0\.2\}'
# the paper's MoE-GPT on its cluster: rdma 4.447 ms, pcie 2 x 0.4219 GiB / 32 GB/s = 28.31 ms,
# over 24 external experts: 28.31 + 4.447/24 = 28.50 ms; the all-to-alls take 23.71 ms, so by
# predicted time the block stays expert-centric (R = 5.33 > 1 took it data-centric before)
expect_exit 0 cm janus --batch=256 --seq=64 --topk=4 --hidden=768 --experts=32 \
    --topology=janus-a100 --nodes=4
has_line '^ +0 +1 +5\.333 .* expert-centric +23\.7087 +28\.4968$'
end

begin "iteration: the all-to-alls priced by simulate on a trace"
toy_sim_inputs || fail "cannot make the test inputs"
expect_exit 0 cm simulate --json --scheme vanilla --no-layers --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
sim=$(sed -n 's/.*"vanilla": {[^}]*"comm": \([0-9.e+-]*\),.*/\1/p' "$T/out")
[ -n "$sim" ] || fail "no vanilla comm in simulate's report"
# 8 GPUs x 375 tokens = the trace's 3000: no scaling; every layer is an MoE block, two passes
expect_exit 0 cm iteration --topology="$T/c.topo" --layers=4 --hidden=64 --seq=375 --batch=1 \
    --topk=2 --experts=16 --trace="$T/t.moet" --placement="$T/a.moep" --json
got=$(grep '"name": "expert-centric"' "$T/out" | sed 's/.*"comm": \([^,]*\),.*/\1/')
awk -v s="$sim" -v g="$got" 'BEGIN { d = g - 2 * s; exit !(s > 0 && d < 1e-9 && d > -1e-9) }' ||
    fail "expert-centric comm $got is not twice simulate's $sim"
# ExFlow's row, inference: simulate's coherent communication, its all-gather included
expect_exit 0 cm simulate --json --scheme coherent --no-layers --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
sim=$(sed -n 's/.*"coherent": {[^}]*"comm": \([0-9.e+-]*\),.*/\1/p' "$T/out")
expect_exit 0 cm iteration --topology="$T/c.topo" --layers=4 --hidden=64 --seq=375 --batch=1 \
    --topk=2 --experts=16 --trace="$T/t.moet" --placement="$T/a.moep" --json --inference
got=$(grep '"name": "exflow"' "$T/out" | sed 's/.*"comm": \([^,]*\),.*/\1/')
awk -v s="$sim" -v g="$got" 'BEGIN { d = g - s; exit !(s > 0 && d < 1e-9 && d > -1e-9) }' ||
    fail "exflow comm $got is not simulate's coherent $sim"
# shellcheck disable=SC2086
expect_exit 0 cm iteration $TOY
if grep -q '^exflow' "$T/out"; then fail "an exflow row without a trace"; fi
end

begin "iteration: bad input and usage"
expect_exit 2 cm iteration --layers=2 --hidden=100
expect_tool_usage moe-costmodel iteration
expect_no_stdout
# shellcheck disable=SC2086
expect_exit 2 cm iteration $TOY --blocks=3
expect_tool_usage moe-costmodel iteration
# shellcheck disable=SC2086
expect_exit 2 cm iteration $TOY --heads=3
expect_tool_usage moe-costmodel iteration
# shellcheck disable=SC2086
expect_exit 2 cm iteration $TOY --topk=5
expect_tool_usage moe-costmodel iteration
# shellcheck disable=SC2086
expect_exit 2 cm iteration $TOY --compute-eff=1.5
expect_tool_usage moe-costmodel iteration
expect_exit 1 cm iteration --layers=2 --hidden=100 --seq=10 --batch=1 --nodes=2
expect_tool_err_line moe-costmodel "compute rate is unknown"
expect_no_stdout
expect_exit 1 cm iteration --layers=2 --hidden=100 --seq=10 --batch=1 --nodes=2 --flops=1G
expect_tool_err_line moe-costmodel "inter-node bandwidth is unknown"
expect_exit 1 cm iteration --layers=2 --hidden=100 --seq=10 --batch=1 --topology="$T/none.topo"
expect_tool_err_line moe-costmodel "none.topo"
# shellcheck disable=SC2086
expect_exit 1 cm iteration $TOY --trace="$T/none.moet" --placement="$T/a.moep"
expect_tool_err_line moe-costmodel "none.moet"
end

finish
