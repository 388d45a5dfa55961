#!/bin/sh
# tests/cli/deepep_sim.sh -- DeepEP's rule in moe-costmodel simulate (issue 45 item 1): with
# --accounting deepep the hierarchical scheme's routes are DeepEP's normal kernels (moeflow(7),
# moe_acct_relay: one RDMA copy per remote node to the GPU of the source's local index, NVLink
# forwards from it), with deepep-ll its low-latency ones, counted from the same function as
# moe-place eval --accounting deepep; hand-computed on 12 ranks, 3 nodes x 4, expert e on rank e.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"

cat >"$T/c.topo" <<'TOPO'
topology test-3x4
nodes 3
gpus-per-node 4
link intra bandwidth 100 GB/s latency 2 us
link inter bandwidth 10 GB/s latency 5 us
flops 100 TFLOP/s
TOPO
. "$top_srcdir/tests/cli/deepep_lib.sh"
# hidden 64, bf16: a transfer is 128 bytes
deepep_fixtures 64

# hier FILE: "intra inter" bytes of the hierarchical SCHEME line of a simulate table
hier() { awk -F '\t' '$1 == "SCHEME" && $2 == "hierarchical" { print $6, $7 }' "$1"; }
# copies FILE KERNEL: eval's DEEPEP "rdma nvl" per cell and direction, times 128 bytes x 2
# directions x CELLS cells: the bytes simulate must move
copies() { awk -F '\t' -v k="$2" -v n="$3" '$1 == "DEEPEP" && $2 == k {
    printf "%.0f %.0f\n", $5 * 256 * n, $3 * 256 * n }' "$1"; }

begin "3 ranks of 2 remote nodes: 2 RDMA copies, 2 NVLink forwards each way"
# rank 0 -> 4, 5 (node 1), 9 (node 2): RDMA 0 -> 4 and 0 -> 8; NVLink 4 -> 5 and 8 -> 9
expect_exit 0 cm simulate --accounting deepep --no-layers --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
expect_eq "$(hier "$T/out")" "512 512" "deepep: intra inter bytes (2 x 128 x 2 each)"
has_line '^# trace: .*accounting: deepep \(hierarchical: DeepEP.s normal kernels\)$'
# moe-run's relays (since its hierarchical mode runs on rail and node communicators): the same
# RDMA copies 0 -> 4 and 0 -> 8 and forwards 4 -> 5, 8 -> 9, the same bytes; priced as
# moe-run's four hops, not DeepEP's one kernel
expect_exit 0 cm simulate --no-layers --scheme hierarchical --topology "$T/c.topo" \
    "$T/a.txt" "$T/p.moep"
expect_eq "$(hier "$T/out")" "512 512" "rank: intra inter bytes"
grep -q 'accounting' "$T/out" && fail "the default accounting is named"
# low-latency: one message per top-k entry, all three over RDMA
expect_exit 0 cm simulate --accounting deepep-ll --no-layers --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
expect_eq "$(hier "$T/out")" "0 768" "deepep-ll: intra inter bytes"
end

begin "simulate agrees with moe-place eval --accounting deepep on the same inputs"
for pl in p q; do
    for tr in a b ab; do
        n=$(grep -vc '^@' "$T/$tr.txt")
        expect_exit 0 mp eval --accounting deepep --no-layers "$T/$pl.moep" "$T/$tr.txt"
        cp "$T/out" "$T/eval"
        for k in deepep:normal deepep-ll:low-latency; do
            expect_exit 0 cm simulate --accounting "${k%%:*}" --no-layers \
                --scheme hierarchical --topology "$T/c.topo" "$T/$tr.txt" "$T/$pl.moep"
            expect_eq "$(hier "$T/out")" "$(copies "$T/eval" "${k#*:}" "$n")" "$pl $tr ${k%%:*}"
        done
    done
done
end

begin "JSON names the accounting; per-rank rows: the forwarder sends and receives"
expect_exit 0 cm simulate --json --ranks --accounting deepep --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
grep -q '"accounting": "deepep"' "$T/out" || fail "JSON accounting"
expect_exit 0 cm simulate --ranks --accounting deepep --no-layers --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
# rank 8 serves nothing, yet receives the RDMA copy and forwards it to 9 (and the reverse):
# sent intra, sent inter, received intra, received inter
expect_eq "$(awk -F '\t' '$1 == "RANK" && $3 == 8 { print $4, $5, $6, $7 }' "$T/out")" \
    "128 128 128 128" "forwarder 8"
expect_eq "$(awk -F '\t' '$1 == "RANK" && $3 == 9 { print $4, $5, $6, $7 }' "$T/out")" \
    "128 0 128 0" "rank 9, reached over NVLink"
end

begin "--for sglang and vllm set the accounting and the rule, and -v says"
expect_exit 0 cm simulate -v --for sglang --no-layers --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
expect_eq "$(hier "$T/out")" "512 512" "--for sglang: DeepEP's routes"
grep -q 'simulate --for sglang: .*accounting deepep, replica rule sglang-static' "$T/err" ||
    fail "-v does not say what --for set"
expect_exit 0 cm simulate --for vllm --accounting rank --no-layers --scheme hierarchical \
    --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
grep -q 'accounting' "$T/out" && fail "--accounting rank does not win over --for"
run cm simulate --accounting node --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
expect_tool_usage moe-costmodel simulate
run cm simulate --for trtllm --topology "$T/c.topo" "$T/a.txt" "$T/p.moep"
expect_tool_usage moe-costmodel simulate
end

finish
