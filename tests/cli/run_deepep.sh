#!/bin/sh
# tests/cli/run_deepep.sh -- moe-run's hierarchical mode sends as DeepEP's internode (normal)
# kernels: once per remote node over the rail of the source's local index, then forwarded
# over NVLink inside the node; its measured RDMA node-copies and NVLink forwards equal a hand
# count and `moe-place eval --accounting deepep` on the same trace and placement (issue 45,
# acceptance 1), and --check and --train --check pass on node groups split by node index.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"

# 3 nodes x 2 ranks, one layer, expert e on rank e alone, top-3; a token's source is its
# sequence id (mod 6). Per direction:
#   A from rank 0 (node 0, local 0) to experts 2, 3, 5: RDMA to rank 2 (node 1, local 0) and
#     rank 4 (node 2): 2 copies; rank 2 forwards to 3, rank 4 to 5: 2 forwards;
#   B from rank 1 (node 0, local 1) to 0, 3, 4: rank 1 forwards to 0 itself; RDMA to rank 3
#     (serves) and 5 (forwards to 4): 2 copies, 2 forwards;
#   C from rank 2 (node 1, local 0) to 2, 3, 1: 2 is itself, it forwards to 3; RDMA to rank 0,
#     which forwards to 1: 1 copy, 2 forwards.
# Total 5 RDMA copies and 6 NVLink forwards each way.
printf '2,3,5\n0,3,4\n2,3,1\n' >"$T/h.txt"
printf '0 0 0\n1 0 0\n2 0 0\n' >"$T/h.meta"
"$MOE_BIN/moe-trace" import --no-PG -q --format tokens --experts 6 --meta "$T/h.meta" \
    -o "$T/h.mft" "$T/h.txt" || fail "import"
printf '@PL\tVN:1.0\tlayers:1\texperts:6\tranks:6\tgpus_per_node:2\tcapacity:1\n' >"$T/h.moep"
printf '#layer\texpert\tranks\n' >>"$T/h.moep"
for e in 0 1 2 3 4 5; do printf '0\t%d\t%d\n' $e $e >>"$T/h.moep"; done

# deepep_of FILE: the measured counts of the JSON's top-level "deepep" object
deepep_of() {
    sed -n 's/^  "deepep": {"kernel": "normal", "rdma_dispatch": \([0-9]*\), "rdma_combine": \([0-9]*\), "nvl_dispatch": \([0-9]*\), "nvl_combine": \([0-9]*\),.*/\1 \2 \3 \4/p' "$1"
}

begin "3 nodes x 2: RDMA node-copies and NVLink forwards as counted by hand"
expect_exit 0 mpi 6 --mode hierarchical --trace "$T/h.mft" --placement "$T/h.moep" \
    --hidden 16 --ffn 8 --iters 1 --warmup 1 --check --json "$T/h.json"
grep -q ': ok$' "$T/out" || fail "no passing check line"
expect_eq "$(deepep_of "$T/h.json")" "5 5 6 6" "rdma dispatch, combine, nvl dispatch, combine"
grep -q '"accounting_equal": true},$' "$T/h.json" || fail "not equal to the accounting"
grep -q 'NVLink forwards 6 dispatch, 6 combine; vs the shared accounting (deepep): equal$' \
    "$T/out" || fail "no DeepEP line in the report"
# per rank, vectors sent (both directions) intra and inter, 64 bytes each (16 fp32):
# rank 0 sends A twice over RDMA, forwards C to 1, returns B's partial to 1 and C's to 2 ...
grep '"rank_vector_bytes"' "$T/h.json" >"$T/ranks.json"
paste -d ' ' "$(json_list "$T/ranks.json" intra >"$T/gi"; echo "$T/gi")" \
    "$(json_list "$T/ranks.json" inter >"$T/ge"; echo "$T/ge")" >"$T/got"
printf '%s\n' "128 192" "128 128" "128 128" "128 64" "128 64" "128 64" >"$T/want"
same_file "$T/want" "$T/got" "intra/inter-node bytes per rank"
end

begin "3 nodes x 2: moe-place eval --accounting deepep says the same"
"$MOE_BIN/moe-place" eval --accounting deepep "$T/h.moep" "$T/h.mft" >"$T/eval.txt" ||
    fail "moe-place eval failed"
# per present cell (3 cells): 5/3 RDMA copies, 6/3 NVLink forwards each way
expect_eq "$(awk -F '\t' '$1 == "DEEPEP" && $2 == "normal" { print $3, $4, $5, $6 }' \
    "$T/eval.txt")" "1.6667 1.6667 2.0000 2.0000" "eval's normal kernel per cell"
end

begin "3 nodes x 2: --train --check in hierarchical mode"
expect_exit 0 mpi 6 --mode hierarchical --train --trace "$T/h.mft" --placement "$T/h.moep" \
    --hidden 16 --ffn 8 --iters 2 --warmup 0 --check
grep -q 'training (loss and gradients) reference: .*: ok$' "$T/out" || fail "no passing check"
end

begin "DeepSeek-V2-Lite on 2 nodes x 4: the measured counts equal eval's per cell"
run_data 384
expect_exit 0 mpi_noleak 8 --mode hierarchical --trace "$T/ds.mft" --placement "$T/p8.moep" \
    --hidden 40 --ffn 16 --iters 1 --warmup 0 --json "$T/r.json"
grep -q '"accounting_equal": true},$' "$T/r.json" || fail "not equal to the accounting"
cells=$(sed -n 's/.*"cells": \([0-9]*\),.*/\1/p' "$T/r.json")
"$MOE_BIN/moe-place" eval --accounting deepep "$T/p8.moep" "$T/ds.mft" >"$T/eval.txt" ||
    fail "moe-place eval failed"
expect_eq "$(deepep_of "$T/r.json" | awk -v c="$cells" '{
    printf "%.4f %.4f %.4f %.4f\n", $1 / c, $2 / c, $3 / c, $4 / c }')" \
    "$(awk -F '\t' '$1 == "DEEPEP" && $2 == "normal" { print $3, $4, $5, $6 }' "$T/eval.txt")" \
    "measured per cell against eval's"
end

finish
