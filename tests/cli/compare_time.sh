#!/bin/sh
# tests/cli/compare_time.sh -- moe-place compare's predicted MoE layer times (issue 45 items 4
# and 5): both sides priced by moe-costmodel simulate's model (lib/cost) on the topology,
# experts as grouped GEMMs, hand-computed on the 12 ranks (3 nodes x 4) of deepep_lib.sh.
. "${top_srcdir:-.}/tests/cli/lib.sh"

mp() { moe_tool moe-place "$@"; }

. "$top_srcdir/tests/cli/deepep_lib.sh"
deepep_fixtures 7168
printf 'nodes 3\ngpus-per-node 4\nlink intra bandwidth 100 GB/s\nlink inter bandwidth 10 GB/s\n%s\n' \
    'flops 1 TFLOP/s' >"$T/t.topo"

compare_of() { awk -F '\t' -v m="$1" '$1 == "COMPARE" && $2 == m { print $3, $4, $5 }' "$T/out"; }

begin "compare --topology: the busiest rank's experts, both sides, with the ratio"
# An expert-token pair is 2 x 3 x 7168 x 1024 = 44,040,192 FLOP (SwiGLU, --ffn 1024). p's
# busiest rank (5) serves 3 pairs: 0.1321 ms at 1 TFLOP/s; q's rank 4 serves 5 (its experts 4
# and 5): 0.2202 ms.
expect_exit 0 mp compare --topology "$T/t.topo" --ffn 1024 --baseline "$T/p.moep" "$T/q.moep" \
    "$T/abc.txt"
expect_eq "$(compare_of experts_ms)" "0.2202 0.1321 1.6667" "experts"
grep -q '^# predicted mean MoE layer, ms, on .*t.topo, hierarchical, DeepEP.s normal kernels' \
    "$T/out" || fail "the time header does not say what it prices"
# the layer is its communication plus its experts (no overlap in DeepEP's normal kernels)
awk -F '\t' '$2 == "comm_ms" { c = $3; cb = $4 } $2 == "experts_ms" { x = $3; xb = $4 }
    $2 == "layer_ms" { l = $3; lb = $4 }
    END { d = l - c - x; db = lb - cb - xb; exit !(c > 0 && d * d < 1e-8 && db * db < 1e-8) }' \
    "$T/out" || fail "layer_ms is not comm_ms + experts_ms: $(grep _ms "$T/out")"
end

begin "a grouped-GEMM curve: efficiency by tokens per expert, not the load alone"
# 1:0.5 4:1, linear in log tokens: 0.75 at 2 tokens, 0.8962 at 3. p: rank 5's 3 tokens take
# 3 x 44,040,192 / (1e12 x 0.8962) = 0.1474 ms, above ranks 4 and 9 (2 tokens: 0.1174) and
# 0 (1: 0.0881); q's rank 4: 0.1174 + 0.1474 = 0.2649 ms.
cp "$T/t.topo" "$T/g.topo"
echo 'efficiency grouped-gemm 1:0.5 4:1' >>"$T/g.topo"
expect_exit 0 mp compare --topology "$T/g.topo" --ffn 1024 --baseline "$T/p.moep" "$T/q.moep" \
    "$T/abc.txt"
expect_eq "$(compare_of experts_ms)" "0.2649 0.1474 1.7967" "grouped experts"
end

begin "--nodes gives a one-node topology the placement's nodes"
expect_exit 0 mp compare --topology "$T/g.topo" --ffn 1024 --baseline "$T/p.moep" "$T/q.moep" \
    "$T/abc.txt"
cp "$T/out" "$T/three"
sed 's/^nodes 3$/nodes 1/' "$T/g.topo" >"$T/one.topo"
expect_exit 0 mp compare --topology "$T/one.topo" --nodes 3 --ffn 1024 --baseline "$T/p.moep" \
    "$T/q.moep" "$T/abc.txt"
expect_eq "$(grep -v '^#' "$T/out")" "$(grep -v '^#' "$T/three")" "the same figures"
expect_exit 1 mp compare --topology "$T/one.topo" --ffn 1024 --baseline "$T/p.moep" \
    "$T/q.moep" "$T/abc.txt"
grep -q "has 4 ranks (1 nodes x 4), not 12" "$T/err" || fail "$(cat "$T/err")"
run mp compare --nodes 3 --baseline "$T/p.moep" "$T/q.moep" "$T/abc.txt"
expect_tool_usage moe-place compare
end

begin "no times without a topology, nor by default on nodes of other than 8 GPUs"
expect_exit 0 mp compare --hidden 7168 --baseline "$T/p.moep" "$T/q.moep" "$T/abc.txt"
grep -q '_ms' "$T/out" && fail "times without a topology on 4-GPU nodes"
expect_eq "$(awk -F '\t' '$1 == "COMPARE"' "$T/out" | wc -l | tr -d ' ')" 5 "five measures"
end

finish
