#!/bin/sh
# tests/cli/costmodel_exflow_bytes.sh -- ExFlow's pricing (issue 20): bytes beside Table I's
# transfers, the all-gather priced per item (--gather-bytes: a 4-byte token id by default,
# hidden vectors on request), the inter-node parts of p and p* (given or the uniform split)
# converted to time on a topology, and simulate's coherent all-gather at the same price. Every
# expected value is worked out by hand in the comments. Fails on the code before issue 20:
# the options and the JSON keys did not exist.

. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"

# near KEY WANT: the first "KEY": value of $T/out is WANT within 1e-9 relative.
near() {
    got=$(tr ',{}' '\n\n\n' <"$T/out" | sed -n "s/^ *\"$1\": \\([-0-9.e+]*\\) *\$/\\1/p" |
        head -n 1)
    awk -v g="$got" -v w="$2" 'BEGIN { d = g - w; if (d < 0) d = -d; s = w < 0 ? -w : w
        exit !(g != "" && d <= 1e-9 * s + 1e-15) }' || fail "$1: got '$got', want $2"
}
# within OBJECT KEY WANT: the same for a key inside the JSON object OBJECT ("bytes", "time").
within() {
    got=$(sed -n "s/.*\"$1\": {\\([^}]*\\)}.*/\\1/p" "$T/out" | tr ',' '\n' |
        sed -n "s/^ *\"$2\": \\([-0-9.e+]*\\) *\$/\\1/p")
    awk -v g="$got" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; s = w < 0 ? -w : w
        exit !(g != "" && d <= 1e-9 * s + 1e-15) }' || fail "$1.$2: got '$got', want $3"
}

X="--ranks=8 --tokens-per-rank=1024 --layers=24 --p=0.875 --p-star=0.6 --hidden=1024
   --elem-bytes=2"

begin "bytes: all-to-alls in hidden vectors, the all-gather in 4-byte token ids"
# V = 1024 x 2 = 2048 bytes. DeepSpeed-MoE 2GNLp = 2*8*1024*24*0.875 = 344064 transfers,
# x 2048 = 704643072 bytes; ExFlow's all-to-all GNLp* = 8*1024*24*0.6 = 117964.8, x 2048 =
# 241591910.4; all-gather GNG = 8*1024*8 = 65536 items x 4 = 262144; ExFlow 241854054.4.
# All-to-all saved: 1 - 0.6 / (2 * 0.875) = 0.657142857142857.
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X --json
expect_no_stderr
near deepspeed 344064
near allgather 65536
near gather_bytes 4
near alltoall_reduction 0.657142857142857
within bytes deepspeed 704643072
within bytes exflow_alltoall 241591910.4
within bytes allgather 262144
within bytes exflow 241854054.4
grep -q '"time"' "$T/out" && fail "times without a topology"
end

begin "--gather-bytes: hidden vectors on request, or any item size"
# hidden: 65536 x 2048 = 134217728; ExFlow 241591910.4 + 134217728 = 375809638.4.
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X --gather-bytes=hidden --json
within bytes allgather 134217728
within bytes exflow 375809638.4
near gather_bytes 2048
# 16 bytes an item (a token id and its position, say): 65536 x 16 = 1048576
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X --gather-bytes=16 --json
within bytes allgather 1048576
# Table I's transfer counts do not depend on the pricing
near allgather 65536
end

begin "the table prints the bytes and the pricing"
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X
grep -Eq '^  all-gather part +GNG +65536 +262144$' "$T/out" || fail "all-gather row"
grep -Eq '^all-to-all traffic saved: 65\.71%; all-gather priced at 4 bytes an item$' \
    "$T/out" || fail "pricing line"
end

TOPO="--nodes=2 --gpus-per-node=4 --bw-intra=300G --bw-inter=12.5G"

begin "time: uniform inter-node split, the longer class of each all-to-all"
# G 8 in 2 nodes of g 4 (no latency, no curve: bytes / bandwidth). Uniform split:
# p_inter = 0.875 * (8 - 4) / (8 - 1) = 0.5, p*_inter = 0.6 * 4 / 7 = 0.342857142857143.
# DeepSpeed-MoE, one all-to-all per rank: intra 1024*2048*0.375 = 786432 B / 300e9 =
# 2.62144e-6 s, inter 1024*2048*0.5 = 1048576 B / 12.5e9 = 8.388608e-5 s; the longer, x 2L =
# 48: 4.02653184e-3 s. ExFlow's all-to-all: inter 2097152 * 0.342857142857143 =
# 719023.5429 B / 12.5e9 = 5.75218834e-5 s (intra 2097152 * 0.257142857 / 300e9 = 1.8e-6
# shorter), x L = 24: 1.38052520e-3 s. All-gather: a rank receives 1024 ids from 3 node peers
# (12288 B / 300e9 = 4.096e-8 s) and from 4 others (16384 B / 12.5e9 = 1.31072e-6 s):
# 1.31072e-6 s. ExFlow 1.38183592e-3 s; speedup 4.02653184e-3 / 1.38183592e-3 = 2.91390...
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X $TOPO --json
expect_no_stderr
near p_inter 0.5
near p_star_inter 0.342857142857143
within time deepspeed 0.00402653184
within time exflow_alltoall 0.0013805252022857143
within time allgather 0.00000131072
within time exflow 0.0013818359222857143
near speedup 2.913900105693921
end

begin "time: --p-inter and --p-star-inter given"
# p_inter 0.25: inter 2097152*0.25 = 524288 B / 12.5e9 = 4.194304e-5 s against intra
# 2097152*0.625 / 300e9 = 4.369067e-6 s; x 48 = 2.01326592e-3 s. p*_inter 0: intra only,
# 2097152*0.6 = 1258291.2 B / 300e9 = 4.194304e-6 s, x 24 = 1.00663296e-4 s.
# shellcheck disable=SC2086
expect_exit 0 cm exflow $X $TOPO --p-inter=0.25 --p-star-inter=0 --json
within time deepspeed 0.00201326592
within time exflow_alltoall 0.000100663296
end

begin "bad pricing inputs"
# shellcheck disable=SC2086
expect_exit 2 cm exflow $X --gather-bytes=token
expect_tool_usage moe-costmodel exflow "invalid gather size 'token' (bytes or hidden)"
# shellcheck disable=SC2086
expect_exit 2 cm exflow $X --gather-bytes=0
# shellcheck disable=SC2086
expect_exit 2 cm exflow $X --nodes=2 --gpus-per-node=2
expect_tool_usage moe-costmodel exflow "8 ranks, the topology has 4"
# an inter-node part above its whole
# shellcheck disable=SC2086
expect_exit 1 cm exflow $X $TOPO --p-inter=0.9
expect_tool_err_line moe-costmodel "invalid ExFlow inputs"
end

begin "simulate: coherent's all-gather at --gather-bytes a token"
# 400 tokens on 4 ranks in 2 nodes of 2: every rank sends each of its tokens to its 1 node
# peer and its 2 others; all ranks together 400 x 1 intra and 400 x 2 inter items. Token ids
# (4 B): 1600 and 3200 bytes; hidden (16 x 2 B = 32 B): 12800 and 25600.
moe gen -L 2 -E 8 -k 2 -n 400 -s 20 -r 4 -S 5 --hidden 16 --elem-bytes 2 --no-PG \
    -o "$T/g.moet" || fail "moe-trace gen"
moe_tool moe-place fit --ranks 4 --gpus-per-node 2 --method round-robin --no-PG \
    -o "$T/p.moep" "$T/g.moet" || fail "moe-place fit"
printf 'nodes 2\ngpus-per-node 2\nlink intra bandwidth 100 GB/s\nlink inter bandwidth 10 GB/s\n' \
    >"$T/t.topo"
for gb in 4:1600:3200 hidden:12800:25600; do
    expect_exit 0 cm simulate --topology "$T/t.topo" --no-layers --gather-bytes="${gb%%:*}" \
        "$T/g.moet" "$T/p.moep"
    want=${gb#*:}
    got=$(awk -F '\t' '$1 == "ITER" { print $6 ":" $7 }' "$T/out")
    expect_eq "$got" "$want" "all-gather bytes intra:inter (--gather-bytes=${gb%%:*})"
done
grep -q '; all-gathered item: 32 bytes$' "$T/out" || fail "header names the item's size"
expect_exit 2 cm simulate --topology "$T/t.topo" --gather-bytes=-1 "$T/g.moet" "$T/p.moep"
expect_tool_usage moe-costmodel simulate "invalid gather size '-1' (bytes or hidden)"
end

begin "exflow: the inter-node parts measured on a trace are moe-place eval's"
# eval's per-(token, layer) inter-node transfers: vanilla's dispatch and combine are equal, so
# p_inter = (vanilla inter / 2) / k; coherent's dispatch plus combine: p*_inter = inter / k
run moe_tool moe-place eval --json "$T/p.moep" "$T/g.moet"
vi=$(grep '"vanilla"' "$T/out" | sed 's/.*"inter": \([0-9.]*\),.*/\1/')
ci=$(grep '"coherent"' "$T/out" | sed 's/.*"inter": \([0-9.]*\),.*/\1/')
expect_exit 0 cm exflow --trace="$T/g.moet" --placement="$T/p.moep" --nodes=2 \
    --gpus-per-node=2 --bw-intra=100G --bw-inter=10G --json
near p_inter "$(awk -v v="$vi" 'BEGIN { print v / 2 / 2 }')"
near p_star_inter "$(awk -v v="$ci" 'BEGIN { print v / 2 }')"
expect_exit 2 cm exflow --trace="$T/g.moet" --placement="$T/p.moep" --p-inter=0.1
expect_tool_usage moe-costmodel exflow "--p-inter and --p-star-inter go with --p and --p-star"
expect_exit 1 cm exflow --trace="$T/g.moet" --placement="$T/p.moep" --nodes=1 --gpus-per-node=4
expect_tool_err_line moe-costmodel "the placement has 2 GPUs per node, the topology 4"
end

begin "D2: the report names Table I's transfer ratio and gives the bytes' ratio beside a speedup"
# many ranks, few layers: the all-gather's G N G token ids outnumber the all-to-all's transfers,
# so Table I's transfer ratio falls below 1 while the bytes (and time) favour ExFlow. G 64, N
# 1024, L 2, p 63/64, p* 0.5: DeepSpeed-MoE 2 x 64 x 1024 x 2 x 63/64 = 258048 transfers;
# ExFlow 64 x 1024 x (2 x 0.5 + 64) = 4259840; ratio 0.060577. Bytes: 258048 x 2048 =
# 528482304 against 65536 x 2048 + 4194304 x 4 = 150994944: ratio 3.5.
expect_exit 0 cm exflow --ranks=64 --tokens-per-rank=1024 --layers=2 --p=0.984375 \
    --p-star=0.5 --hidden=1024 --elem-bytes=2
has_line '^Table I transfer ratio DeepSpeed-MoE / ExFlow: 0\.06058 \(an all-gathered item counted as one transfer\)$'
has_line '^bytes DeepSpeed-MoE / ExFlow: 3\.5$'
grep -q '^reduction' "$T/out" && fail "an unlabelled 'reduction' line is still printed"
expect_exit 0 cm exflow --ranks=64 --tokens-per-rank=1024 --layers=2 --p=0.984375 \
    --p-star=0.5 --hidden=1024 --elem-bytes=2 --json
near bytes_reduction 3.5
end

finish
