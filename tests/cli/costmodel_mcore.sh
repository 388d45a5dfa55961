#!/bin/sh
# tests/cli/costmodel_mcore.sh -- moe-costmodel iteration --model: the command line of issue 41
# on the config.json copies of tests/data/hf, its JSON fields, the same figures as the table,
# the hand-checked FLOPs of tests/unit/test_mcore.c seen from the tool, and bad input and usage.

. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"
HF=$top_srcdir/tests/data/hf

begin "iteration --model: Mixtral-8x7B, EP 8 in a node, DP over 4 nodes"
expect_exit 0 cm iteration --model "$HF/mixtral-8x7b.json" --parallel tp=1,ep=8,pp=1,dp=32 \
    --topology dgx-h100 --nodes 4 --seq 4096 --micro-batch 1 --global-batch 256 \
    --distributed-optimizer --json
expect_no_stderr
for k in flops_per_token mfu iteration_s memory_per_gpu_bytes; do
    has_line "\"$k\": [0-9]"
done
# 3 x the forward FLOPs a token (moe-costmodel(1), ITERATION): 79712698368
has_line '"flops_per_token": 7\.971274752e\+10,'
has_line '"memory_per_gpu_bytes": 9\.573469389e\+10,'
has_line '"edp": 4, "micro_batch": 1, "global_batch": 256, "seq": 4096, "micro_batches": 8'
mfu=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"mfu"$/ { print $2 }')
awk -v m="$mfu" 'BEGIN { exit !(m > 0.2 && m < 0.9) }' || fail "MFU $mfu not an output in (0.2, 0.9)"
cp "$T/out" "$T/mix.json"
expect_exit 0 cm iteration --model "$HF/mixtral-8x7b.json" --parallel tp=1,ep=8,pp=1,dp=32 \
    --topology dgx-h100 --nodes 4 --seq 4096 --micro-batch 1 --global-batch 256 \
    --distributed-optimizer
has_line '^flops_per_token	7\.97127e\+10$'
has_line '^# assumptions: BF16 GEMMs'
has_line '^memory_GB	weights 14\.486	gradients 28\.971	optimizer 17\.514	activations 33\.844'
end

begin "iteration --model: the fine-grained shape of the unit test, through the tool"
expect_exit 0 cm iteration --model "$HF/deepseek-v2-lite.json" --parallel tp=1,ep=8 \
    --topology dgx-h100 --seq 4096 --micro-batch 1 --global-batch 64 --json
has_line '"flops_per_token": 1\.640662733e\+10,'
# config files too (KEY = VALUE), and gzipped config.json
gzip -c "$HF/deepseek-v2-lite.json" >"$T/c.json.gz"
cat >"$T/it.conf" <<CONF
model = $T/c.json.gz
parallel = tp=1,ep=8
topology = dgx-h100
seq = 4096
micro-batch = 1
global-batch = 64
json
CONF
expect_exit 0 cm iteration --config "$T/it.conf"
has_line '"flops_per_token": 1\.640662733e\+10,'
end

begin "iteration --model: DeepSeek-V3, FP8, DualPipe, DeepEP over 8 nodes"
expect_exit 0 cm iteration --model "$HF/deepseek-v3.json" \
    --parallel pp=16,ep=64,schedule=dualpipe,dispatcher=deepep,comm-sms=20 \
    --topology dgx-h800 --nodes 256 --seq 4096 --micro-batch 1 --global-batch 15360 \
    --distributed-optimizer --dtype fp8 --json
has_line '"schedule": "dualpipe", "dispatcher": "deepep"'
# 61 layers and the MTP module on 16 stages: 4 on the slowest; DualPipe's first rank runs
# 1.5 x 16 - 1 = 23 of its 120 chunks alone, their all-to-alls exposed
has_line '"stage_layers": 4, "a2a_unpaired": 0\.1916666667}'
# FP8: quantization passes and the attention kernels' curves priced
q=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"compute_fp8_quantization"$/ { sub(/}/, "", $2); print $2 }')
awk -v q="$q" 'BEGIN { exit !(q > 0) }' || fail "no FP8 quantization time ($q)"
has_line '^ "time": {"compute": [0-9]'
# node-limited routing: a token reaches at most 4 nodes, some of them its own
n=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /remote_nodes_per_token"$/ { print $2 + 0 }')
awk -v n="$n" 'BEGIN { exit !(n > 3 && n < 4) }' || fail "remote nodes per token $n"
end

begin "iteration --model: the all-to-alls and the load from a trace"
toy_sim_inputs || fail "cannot make the test inputs"
# a toy Mixtral-shaped model of the trace's shape: h 64, expert FFN 128, 16 experts, top-2,
# 4 MoE layers; 8 GPUs = the placement's 8 ranks = the EP group; 375 tokens a rank, the
# trace's 3000 over 8: simulate's vanilla communication as it is, forward and backward
cat >"$T/toy.json" <<'JSON'
{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
 "num_local_experts": 16, "num_experts_per_tok": 2}
JSON
expect_exit 0 cm simulate --json --scheme vanilla --no-layers --topology "$T/c.topo" \
    --hidden 64 --ffn 128 "$T/t.moet" "$T/a.moep"
sim=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"comm"$/ { print $2; exit }')
imb=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"imbalance"$/ { print $2; exit }')
expect_exit 0 cm iteration --model "$T/toy.json" --parallel tp=1,ep=8 --topology "$T/c.topo" \
    --seq 375 --micro-batch 1 --global-batch 8 --trace "$T/t.moet" --placement "$T/a.moep" --json
expect_no_stderr
has_line '"a2a_from": "trace"'
got=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"ep_before_overlap"$/ { print $2 }')
awk -v s="$sim" -v g="$got" 'BEGIN { d = g / (2 * s) - 1; exit !(s > 0 && d < 1e-5 && d > -1e-5) }' ||
    fail "all-to-alls $got are not twice simulate's $sim"
got=$(tr ',' '\n' <"$T/out" | awk -F': ' '$1 ~ /"imbalance"$/ { sub(/}/, "", $2); print $2 }')
[ "$got" = "$imb" ] || fail "imbalance $got, simulate's $imb"
awk -v i="$imb" 'BEGIN { exit !(i > 1) }' || fail "the toy trace is balanced ($imb)"
# the most loaded rank's experts take longer than the balanced model's
cp "$T/out" "$T/traced.json"
expect_exit 0 cm iteration --model "$T/toy.json" --parallel tp=1,ep=8 --topology "$T/c.topo" \
    --seq 375 --micro-batch 1 --global-batch 8 --json
has_line '"a2a_from": "model", "imbalance": 1}'
c0=$(sed -n 's/.*"time": {"compute": \([^,]*\),.*/\1/p' "$T/out")
c1=$(sed -n 's/.*"time": {"compute": \([^,]*\),.*/\1/p' "$T/traced.json")
awk -v a="$c0" -v b="$c1" 'BEGIN { exit !(b > a) }' || fail "compute $c1 not above balanced $c0"
# the placement must be over the EP group's ranks
expect_exit 2 cm iteration --model "$T/toy.json" --parallel tp=1,ep=4 --topology "$T/c.topo" \
    --seq 375 --micro-batch 1 --global-batch 8 --trace "$T/t.moet" --placement "$T/a.moep"
expect_tool_usage moe-costmodel iteration "places experts on 8 ranks, the EP group has 4"
expect_exit 2 cm iteration --model "$T/toy.json" --parallel tp=1,ep=8 --topology "$T/c.topo" \
    --seq 375 --micro-batch 1 --global-batch 8 --trace "$T/t.moet"
expect_tool_usage moe-costmodel iteration "--trace and --placement go together"
end

begin "iteration --model: bad input and usage"
expect_exit 2 cm iteration --model "$HF/mixtral-8x7b.json" --layers 4 --seq 4096
expect_tool_usage moe-costmodel iteration "does not go with --model"
expect_exit 2 cm iteration --parallel tp=2 --layers 4 --hidden 64 --seq 8 --batch 1
expect_tool_usage moe-costmodel iteration "--parallel needs --model"
expect_exit 2 cm iteration --model "$HF/mixtral-8x7b.json" --parallel tp=x --seq 4096 \
    --topology dgx-h100 --micro-batch 1 --global-batch 8
expect_tool_usage moe-costmodel iteration "tp"
expect_exit 2 cm iteration --model "$HF/mixtral-8x7b.json" --topology dgx-h100 \
    --micro-batch 1 --global-batch 8
expect_tool_usage moe-costmodel iteration "--seq (a whole number of tokens) is required with --model"
expect_exit 1 cm iteration --model "$HF/mixtral-8x7b.json" --parallel ep=16 --seq 4096 \
    --topology dgx-h100 --nodes 4 --micro-batch 1 --global-batch 256
expect_tool_err_line moe-costmodel "8 experts do not split over ep = 16 GPUs"
expect_exit 1 cm iteration --model "$T/none.json" --seq 4096 --topology dgx-h100 \
    --micro-batch 1 --global-batch 8
expect_tool_err_line moe-costmodel "none.json"
printf '{"hidden_size": 8' >"$T/bad.json"
expect_exit 1 cm iteration --model "$T/bad.json" --seq 4096 --topology dgx-h100 \
    --micro-batch 1 --global-batch 8
expect_tool_err_line moe-costmodel "not a config.json"
expect_exit 2 cm iteration --model "$HF/mixtral-8x7b.json" --dtype fp4 --seq 4096
expect_tool_usage moe-costmodel iteration "unknown dtype 'fp4'"
end

finish
