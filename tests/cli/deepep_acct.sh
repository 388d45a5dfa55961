#!/bin/sh
# tests/cli/deepep_acct.sh -- DeepEP's rule of the accounting (moeflow(7), "DeepEP"; issue 45
# item 1) in moe-place eval, on hand-computed traces: 12 ranks, 3 nodes x 4, expert e on rank
# e. Normal kernels: one RDMA copy per remote node to the GPU of the source's local index,
# NVLink forwards from it to the node's other serving ranks; low-latency: one message per
# top-k entry straight to its rank. Counts are per direction (dispatch = combine).
. "${top_srcdir:-.}/tests/cli/lib.sh"

mp() { moe_tool moe-place "$@"; }

. "$top_srcdir/tests/cli/deepep_lib.sh"
deepep_fixtures 7168

# deepep_of FILE KERNEL: "rdma_dispatch rdma_combine nvl_dispatch nvl_combine" of eval's table
deepep_of() { awk -F '\t' -v k="$2" '$1 == "DEEPEP" && $2 == k { print $3, $4, $5, $6 }' "$1"; }

begin "3 ranks of 2 remote nodes: 2 RDMA copies, 2 NVLink forwards (normal); 3 RDMA (LL)"
# rank 0 -> experts on ranks 4, 5 (node 1) and 9 (node 2): RDMA to ranks 4 and 8 (local index
# 0), which forward 4 -> 5 and 8 -> 9
expect_exit 0 mp eval --accounting deepep --no-layers "$T/p.moep" "$T/a.txt"
expect_eq "$(deepep_of "$T/out" normal)" "2.0000 2.0000 2.0000 2.0000" "normal"
expect_eq "$(deepep_of "$T/out" low-latency)" "3.0000 3.0000 0.0000 0.0000" "low-latency"
# per-rank transfers for the same token: 3 inter-node each way
expect_eq "$(awk -F '\t' '$2 == "vanilla" { print $7 }' "$T/out")" 6.0000 "per-rank inter"
end

begin "the forwarder is the source's local index: rank 1 reaches node 1 through rank 5"
# rank 1 -> RDMA to 5 (forwards to 4; serves 5 itself) and to 9 (serves it): 1 forward
expect_exit 0 mp eval --accounting deepep --no-layers "$T/p.moep" "$T/b.txt"
expect_eq "$(deepep_of "$T/out" normal)" "2.0000 2.0000 1.0000 1.0000" "normal"
expect_eq "$(deepep_of "$T/out" low-latency)" "3.0000 3.0000 0.0000 0.0000" "low-latency"
end

begin "own node over NVLink from the source, one remote node"
# rank 4 -> node 0 by RDMA to rank 0 (serves 0, forwards to 1); rank 5 straight over NVLink
expect_exit 0 mp eval --accounting deepep --no-layers "$T/p.moep" "$T/c.txt"
expect_eq "$(deepep_of "$T/out" normal)" "1.0000 1.0000 2.0000 2.0000" "normal"
expect_eq "$(deepep_of "$T/out" low-latency)" "2.0000 2.0000 1.0000 1.0000" "low-latency"
end

begin "two experts on one remote rank: one node copy (normal), two messages (LL)"
expect_exit 0 mp eval --accounting deepep --no-layers "$T/q.moep" "$T/a.txt"
expect_eq "$(deepep_of "$T/out" normal)" "2.0000 2.0000 1.0000 1.0000" "normal"
expect_eq "$(deepep_of "$T/out" low-latency)" "3.0000 3.0000 0.0000 0.0000" "low-latency"
end

begin "three tokens: sums per cell, bytes FP8 + scales out and bf16 back, any thread count"
# normal 5 RDMA + 5 NVLink each way: 10 x (7168 + 56 x 4) + 10 x 14336 bytes over 3 tokens
expect_exit 0 mp eval --accounting deepep "$T/p.moep" "$T/abc.txt"
expect_eq "$(deepep_of "$T/out" normal)" "1.6667 1.6667 1.6667 1.6667" "normal"
expect_eq "$(awk -F '\t' '$1 == "DEEPEP" { print $7 }' "$T/out" | tr '\n' ' ')" \
    "72426.7 65232.0 " "bytes per token (LL: 8 + 1 messages, 16-byte header)"
grep -q '^DLAYER	0	normal	3	1.6667	1.6667$' "$T/out" || fail "no DLAYER line"
cp "$T/out" "$T/one"
expect_exit 0 mp eval --accounting deepep -@ 2 "$T/p.moep" "$T/abc.txt"
same_file "$T/out" "$T/one" "-@ 2"
expect_exit 0 mp eval --json --accounting deepep-ll "$T/p.moep" "$T/abc.txt"
grep -q '"normal": {"rdma_dispatch": 1.66667, "rdma_combine": 1.66667, "nvl_dispatch": 1.66667' \
    "$T/out" || fail "JSON normal"
grep -q '"low-latency": {"rdma_dispatch": 2.66667, .*"nvl_combine": 0.333333' "$T/out" ||
    fail "JSON low-latency"
end

begin "without --accounting the report is as before; --for sets it and says so"
expect_exit 0 mp eval "$T/p.moep" "$T/abc.txt"
grep -q DEEPEP "$T/out" && fail "DEEPEP lines by default"
expect_exit 0 mp eval -v --for sglang "$T/p.moep" "$T/abc.txt"
grep -q '^DEEPEP	normal	1.6667' "$T/out" || fail "--for sglang: no DEEPEP lines"
grep -q 'accounting deepep, replica rule sglang-static' "$T/err" || fail "-v does not say"
expect_exit 0 mp eval --for moe-run "$T/p.moep" "$T/abc.txt"
grep -q DEEPEP "$T/out" && fail "--for moe-run counts per rank"
run mp eval --for trtllm "$T/p.moep" "$T/abc.txt"
expect_tool_usage moe-place eval
run mp eval --accounting node "$T/p.moep" "$T/abc.txt"
expect_tool_usage moe-place eval
end

begin "--node-limit: nodes per cell and the share of cells over the limit"
# the three tokens span 2 nodes each; a fourth, 0 -> experts 0, 4, 8, spans 3
cp "$T/abc.txt" "$T/abcd.txt"
printf '3\t3\t0\t0\t0\t0,4,8\n' >>"$T/abcd.txt"
expect_exit 0 mp eval --node-limit 2 --no-layers "$T/p.moep" "$T/abcd.txt"
grep -q '^NODES	2.2500	2	0.2500$' "$T/out" || fail "NODES line: $(grep NODES "$T/out")"
grep -q '^DEEPEP' "$T/out" && fail "--node-limit alone printed DEEPEP lines"
expect_exit 0 mp eval --node-limit 1 --no-layers "$T/p.moep" "$T/abc.txt"
grep -q '^NODES	2.0000	1	1.0000$' "$T/out" || fail "limit 1"
expect_exit 0 mp eval --json --for sglang --node-limit 2 "$T/p.moep" "$T/abcd.txt"
grep -q '"nodes": {"nodes_per_token_layer": 2.25, "node_limit": 2, "over_limit": 0.25}' \
    "$T/out" || fail "JSON nodes"
run mp eval --node-limit 0 "$T/p.moep" "$T/abc.txt"
expect_tool_usage moe-place eval
end

# compare_of MEASURE: "placement baseline ratio" of compare's table
compare_of() { awk -F '\t' -v m="$1" '$1 == "COMPARE" && $2 == m { print $3, $4, $5 }' "$T/out"; }

begin "compare: the hand counts of both sides and their ratios"
# q (4 and 5 on rank 4) against p on the three tokens: normal RDMA 5 = 5 each way; NVLink
# forwards: q 1 + 1 + 1 (rank 4 -> node 0 forwards to 1; 4 serves 5 itself) against 5
expect_exit 0 mp compare --baseline "$T/p.moep" "$T/q.moep" "$T/abc.txt"
expect_eq "$(compare_of rdma_node_copies)" "3.3333 3.3333 1.0000" "RDMA node-copies"
expect_eq "$(compare_of nvlink_forwards)" "2.0000 3.3333 0.6000" "NVLink forwards"
# per-rank inter: q reaches ranks {4, 9}, {4, 9}, {0, 1}: 6 each way against 8
expect_eq "$(compare_of rank_inter)" "4.0000 5.3333 0.7500" "per-rank inter"
grep -q '^# moe-place compare: .*for sglang: scheme vanilla, replica rule sglang-static$' \
    "$T/out" || fail "the header does not say what it models"
expect_exit 0 mp compare --accounting deepep-ll --baseline "$T/p.moep" "$T/q.moep" "$T/abc.txt"
expect_eq "$(compare_of rdma_ll)" "5.3333 5.3333 1.0000" "LL RDMA"
end

begin "compare --baseline eplb: fitted with the same slots on --baseline-fit"
moe gen --no-PG -L 2 -E 16 -k 2 -n 800 -s 20 -r 8 -S 9 -o "$T/g.moet" || fail "gen"
mp fit --no-PG -v --ranks 8 --gpus-per-node 4 --memory 1.5 --cv 0 --starts 2 --for sglang \
    -o "$T/f.moep" "$T/g.moet" 2>"$T/fit.err" || fail "fit"
# the fit's DeepEP objective: 2 nodes x 4, inter-node weight 4: a node 4 (1 - 1/2), a rank
# 1 - 1/4; replicas under the even split for SGLang's static table
grep -q 'DeepEP objective: a set weighs 2.000 per node and 0.750 per rank it spans; .*x 4 .*x 1 fall, searched under the even rule' \
    "$T/fit.err" || fail "-v does not say what the fit's objective is: $(cat "$T/fit.err")"
expect_exit 0 mp compare --baseline-fit "$T/g.moet" "$T/f.moep" "$T/g.moet"
grep -q '^# slots per layer: 24 against 24;' "$T/out" || fail "not the same slots"
expect_eq "$(awk -F '\t' '$1 == "COMPARE"' "$T/out" | wc -l | tr -d ' ')" 5 "five measures"
run mp compare "$T/f.moep" "$T/g.moet"
expect_tool_usage moe-place compare
end

finish
