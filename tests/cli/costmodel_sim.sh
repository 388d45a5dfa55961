#!/bin/sh
# tests/cli/costmodel_sim.sh -- moe-costmodel simulate and fit: simulate's transfer counts equal
# moe-place eval's exactly (vanilla and coherent, every layer; top-k, source ranks, replicas,
# threads), the ranking and its sentence, scheme selection, the formulas' invariants seen from
# the command line (one chunk is vanilla; bytes scale with the hidden size), plots, presets,
# and fit on the synthetic nccl-tests tables of tests/data/nccl.

. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"
NCCL=$top_srcdir/tests/data/nccl

toy_sim_inputs &&
    mp fit --no-PG --ranks 8 --gpus-per-node 4 --method balanced --replicas 3 \
        -o "$T/r.moep" "$T/t.moet" ||
    { echo "cannot make the test inputs"; exit 1; }

# counts FILE: the per-layer cells and transfers, and per_token_layer, of a JSON report
counts() { grep -o '"cells": [0-9]*, "transfers": [0-9]*\|"per_token_layer": [0-9.e+-]*' "$1"; }

# same_counts PLACEMENT [OPTIONS...]: eval and simulate agree on the trace
same_counts() {
    _p=$1
    shift
    expect_exit 0 mp eval --json "$@" "$_p" "$T/t.moet"
    counts "$T/out" >"$T/eval.counts"
    expect_exit 0 cm simulate --json --topology "$T/c.topo" "$@" "$T/t.moet" "$_p"
    counts "$T/out" >"$T/sim.counts"
    [ "$(wc -l <"$T/eval.counts")" -eq 10 ] || fail "eval report: $(wc -l <"$T/eval.counts") counts"
    same_file "$T/sim.counts" "$T/eval.counts" "simulate's counts differ from eval's ($*)"
}

begin "simulate's transfer counts equal moe-place eval's"
same_counts "$T/a.moep"
same_counts "$T/a.moep" --topk 1
same_counts "$T/a.moep" --source token
same_counts "$T/r.moep"
same_counts "$T/r.moep" --topk 1 --source sequence
end

begin "threads do not change the report"
expect_exit 0 cm simulate --no-layers --topology "$T/c.topo" "$T/t.moet" "$T/a.moep"
cp "$T/out" "$T/one"
expect_exit 0 cm simulate --no-layers -@ 3 --topology "$T/c.topo" "$T/t.moet" "$T/a.moep"
same_file "$T/out" "$T/one" "-@ 3"
end

begin "--best ranks by time and explains the first"
expect_exit 0 cm simulate --best --no-layers --topology "$T/c.topo" -o "$T/b.txt" \
    "$T/t.moet" "$T/a.moep"
expect_no_stderr
n=$(grep -c '^BEST' "$T/b.txt")
expect_eq "$n" 5 "ranked schemes"
awk -F '\t' '$1 == "BEST" { if (NR > 1 && $4 + 0 < last) bad = 1; last = $4 + 0 }
    END { exit bad }' "$T/b.txt" || fail "BEST lines not in increasing time"
first=$(awk -F '\t' '$1 == "BEST" && $2 == 1 { print $3 }' "$T/b.txt")
grep -q "^# best: $first is fastest at" "$T/b.txt" || fail "sentence does not name $first"
t1=$(awk -F '\t' -v s="$first" '$1 == "SCHEME" && $2 == s { print $3 }' "$T/b.txt")
t2=$(awk -F '\t' '$1 == "BEST" && $2 == 1 { print $4 }' "$T/b.txt")
expect_eq "$t2" "$t1" "best time vs its SCHEME line"
end

begin "--scheme selects; one chunk is vanilla"
expect_exit 0 cm simulate --scheme vanilla,pipelined --chunks 1 --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
expect_eq "$(grep -c '^SCHEME' "$T/out")" 2 "SCHEME lines"
v=$(awk -F '\t' '$1 == "SCHEME" && $2 == "vanilla" { print $3 }' "$T/out")
p=$(awk -F '\t' '$1 == "SCHEME" && $2 == "pipelined" { print $3 }' "$T/out")
expect_eq "$p" "$v" "pipelined with one chunk vs vanilla"
expect_eq "$(grep -c '^LAYER' "$T/out")" 8 "LAYER lines (2 schemes x 4 layers)"
expect_eq "$(grep -c '^XFER' "$T/out")" 4 "XFER lines (vanilla x 4 layers)"
end

begin "bytes scale with the hidden size and the dtype"
expect_exit 0 cm simulate --json --no-layers --scheme vanilla --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
b1=$(grep -o '"inter": [0-9.e+]*' "$T/out" | head -1 | cut -d' ' -f2)
expect_exit 0 cm simulate --json --no-layers --scheme vanilla --hidden 128 --dtype fp32 \
    --topology "$T/c.topo" "$T/t.moet" "$T/a.moep"
b4=$(grep -o '"inter": [0-9.e+]*' "$T/out" | head -1 | cut -d' ' -f2)
expect_eq "$(awk -v a="$b1" -v b="$b4" 'BEGIN { print b / a }')" 4 "bytes ratio"
end

begin "per-rank loads"
expect_exit 0 cm simulate --loads --scheme vanilla --topology "$T/c.topo" "$T/t.moet" \
    "$T/a.moep"
expect_eq "$(grep -c '^LOAD' "$T/out")" 8 "LOAD lines (2 accounting schemes x 4 layers)"
expect_eq "$(awk -F '\t' '$1 == "LOAD" { print NF; exit }' "$T/out")" 11 "fields of a LOAD line"
end

begin "plots: PNG and SVG"
expect_exit 0 cm simulate --plot "$T/p.png" -o "$T/x.txt" --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
expect_eq "$(head -c 4 "$T/p.png" | od -An -c | tr -d ' ')" '211PNG' "PNG magic"
expect_exit 0 cm simulate --plot "$T/p.svg" -o "$T/x.txt" --topology "$T/c.topo" \
    "$T/t.moet" "$T/a.moep"
grep -q '<svg' "$T/p.svg" || fail "not an SVG"
grep -q 'pipelined' "$T/p.svg" || fail "SVG lacks the scheme names"
end

begin "a topology preset by name"
mp fit --no-PG --ranks 8 -o "$T/p8.moep" "$T/t.moet" || fail "fit"
expect_exit 0 cm simulate --no-layers --best --topology h100-ndr400 "$T/t.moet" "$T/p8.moep"
grep -q '^# topology: h100-ndr400' "$T/out" || fail "preset not named"
end

begin "fit: nccl-tests alltoall into the inter class of a preset"
expect_exit 0 cm fit --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter --topology h100-ndr400 \
    -o "$T/f.topo"
expect_no_stderr
grep -q '^efficiency inter 1024:' "$T/f.topo" || fail "no inter curve"
grep -q '^link inter bandwidth 50000000000 latency 0' "$T/f.topo" || fail "inter link"
grep -q '^link intra bandwidth 450000000000' "$T/f.topo" || fail "the preset's intra link kept"
np=$(awk '$1 == "efficiency" { print NF - 2 }' "$T/f.topo")
[ "$np" -ge 3 ] && [ "$np" -le 16 ] || fail "$np curve points"
# the fitted curve slows the inter-node all-to-alls down against the bare preset
sed -e 's/^nodes 1/nodes 2/' -e 's/^gpus-per-node 8/gpus-per-node 4/' "$T/f.topo" >"$T/f2.topo"
grep -v '^efficiency' "$T/f2.topo" >"$T/bare.topo"
expect_exit 0 cm simulate --no-layers --scheme vanilla --topology "$T/f2.topo" "$T/t.moet" \
    "$T/a.moep"
slow=$(awk -F '\t' '$1 == "SCHEME" { print $4 }' "$T/out")
expect_exit 0 cm simulate --no-layers --scheme vanilla --topology "$T/bare.topo" "$T/t.moet" \
    "$T/a.moep"
fast=$(awk -F '\t' '$1 == "SCHEME" { print $4 }' "$T/out")
awk -v a="$slow" -v b="$fast" 'BEGIN { exit !(a > 2 * b) }' ||
    fail "communication with the fitted curve ($slow ms) not well above the bare link's ($fast)"
end

begin "--nodes: a one-node preset as N nodes, for simulate and fit"
# c.topo's 2 x 4 as a file of one node: --nodes 2 restores it, byte for byte
sed 's/^nodes 2$/nodes 1/' "$T/c.topo" >"$T/c1.topo"
expect_exit 0 cm simulate --no-layers --topology "$T/c.topo" "$T/t.moet" "$T/a.moep"
cp "$T/out" "$T/two"
expect_exit 0 cm simulate --no-layers --topology "$T/c1.topo" --nodes 2 "$T/t.moet" "$T/a.moep"
sed 's|c1\.topo|c.topo|' "$T/out" >"$T/two1"
same_file "$T/two1" "$T/two" "--nodes 2 of the one-node file"
expect_exit 1 cm simulate --no-layers --topology "$T/c1.topo" "$T/t.moet" "$T/a.moep"
expect_exit 2 cm simulate --topology "$T/c1.topo" --nodes 0 "$T/t.moet" "$T/a.moep"
expect_exit 0 cm fit --nccl-tests "$NCCL/all_gather_8.txt" --class intra --points 3 --nodes 2
grep -q '^nodes 2$' "$T/out" && grep -q '^gpus-per-node 4$' "$T/out" ||
    fail "fit --nodes 2 without a topology: 2 nodes of 4"
expect_exit 1 cm fit --nccl-tests "$NCCL/all_gather_8.txt" --class intra --nodes 3
end

begin "imbalance costs time: contiguous at load 1.50 is slower than EPLB's layout at 1.08"
# 100 top-1 tokens of one layer on experts 0..3: 50, 25, 21, 4. Two ranks of one node.
# Contiguous {0,1} {2,3}: loads 75 and 25 (max/mean 1.50); EPLB-like {0,3} {1,2}: 54 and 46
# (1.08). Expert FLOPs per token 2 x 3 x 1024 x 4096 = 25,165,824 at 100 TFLOP/s: 0.25165824 us,
# so the busiest rank computes 75 x that = 0.0188744 ms against 54 x = 0.0135895 ms, and the
# whole layer is slower for contiguous although EPLB's layout moves more bytes (188416 > 102400).
awk 'BEGIN { for (i = 0; i < 100; i++) print (i < 50 ? 0 : i < 75 ? 1 : i < 96 ? 2 : 3) }' \
    >"$T/imb.txt"
expect_exit 0 mt import --no-PG --format tokens --experts 4 -o "$T/imb.moet" "$T/imb.txt"
hdr='@PL\tVN:1.0\tlayers:1\texperts:4\tranks:2\tgpus_per_node:2\tcapacity:2\n#layer\texpert\tranks\n'
printf "$hdr"'0\t0\t0\n0\t1\t0\n0\t2\t1\n0\t3\t1\n' >"$T/cont.moep"
printf "$hdr"'0\t0\t0\n0\t1\t1\n0\t2\t1\n0\t3\t0\n' >"$T/eplb.moep"
printf 'topology t\nnodes 1\ngpus-per-node 2\nlink intra bandwidth 100 GB/s latency 2 us\n%s\n' \
    'flops 100 TFLOP/s' >"$T/imb.topo"
for pl in cont eplb; do
    expect_exit 0 cm simulate --no-layers --scheme vanilla --hidden 1024 --ffn 4096 \
        --topology "$T/imb.topo" "$T/imb.moet" "$T/$pl.moep"
    awk -F'\t' '$1 == "SCHEME" { print $3, $5, $10, $11, $6 }' "$T/out" >"$T/$pl.row"
done
read -r tc xc lc ic bc <"$T/cont.row"
read -r te xe le ie be <"$T/eplb.row"
expect_eq "$lc $ic $le $ie" "75 1.5 54 1.08" "busiest rank's load and imbalance"
expect_eq "$xc $xe" "0.0188744 0.0135895" "busiest rank's compute (ms)"
awk -v a="$be" -v b="$bc" 'BEGIN { exit !(a > b) }' || fail "EPLB's layout should move more bytes"
awk -v c="$tc" -v e="$te" 'BEGIN { exit !(c > e) }' ||
    fail "contiguous at 1.50 ($tc ms) not slower than EPLB at 1.08 ($te ms)"
end

begin "grouped GEMMs: each expert at the curve's efficiency for its tokens (topology 1.3)"
# The same layouts with 'efficiency grouped-gemm 4:0.1 64:0.5', linear in log tokens: 50
# tokens at 0.4644, 25 at 0.3644, 21 at 0.3392, 4 at 0.1. Contiguous: rank 0's experts 0 and 1,
# 25,165,824 x (50 / 0.4644 + 25 / 0.3644) / 1e14 s = 0.0443618 ms; EPLB-like: rank 0's 0 and
# 3, (50 / 0.4644 + 4 / 0.1): 0.0371622 ms (rank 1: 25 and 21, less).
{ cat "$T/imb.topo"; echo 'efficiency grouped-gemm 4:0.1 64:0.5'; } >"$T/gg.topo"
for pl in cont eplb; do
    expect_exit 0 cm simulate --no-layers --scheme vanilla --hidden 1024 --ffn 4096 \
        --topology "$T/gg.topo" "$T/imb.moet" "$T/$pl.moep"
    awk -F'\t' '$1 == "SCHEME" { print $5 }' "$T/out" >"$T/$pl.gg"
done
expect_eq "$(cat "$T/cont.gg") $(cat "$T/eplb.gg")" "0.0443618 0.0371622" "grouped experts (ms)"
end

begin "--flops overrides the topology's compute rate"
sed 's|^flops 100 TFLOP/s$|flops 25 TFLOP/s|' "$T/c.topo" >"$T/c25.topo"
grep -q '^flops 25 TFLOP/s$' "$T/c25.topo" || fail "no flops line to change"
expect_exit 0 cm simulate --no-layers --topology "$T/c25.topo" "$T/t.moet" "$T/a.moep"
sed 's|c25\.topo|c.topo|' "$T/out" >"$T/f25"
expect_exit 0 cm simulate --no-layers --topology "$T/c.topo" --flops 25T "$T/t.moet" "$T/a.moep"
same_file "$T/out" "$T/f25" "--flops 25T against a topology of 25 TFLOP/s"
expect_exit 0 cm simulate --no-layers --topology "$T/c.topo" "$T/t.moet" "$T/a.moep"
cmp -s "$T/out" "$T/f25" && fail "--flops changed nothing"
expect_exit 2 cm simulate --topology "$T/c.topo" --flops 0 "$T/t.moet" "$T/a.moep"
expect_exit 2 cm simulate --topology "$T/c.topo" --flops fast "$T/t.moet" "$T/a.moep"
end

begin "fit: all_gather, no base topology, fewer points"
expect_exit 0 cm fit --nccl-tests "$NCCL/all_gather_8.txt" --class intra --points 3
grep -q '^gpus-per-node 8' "$T/out" || fail "ranks from the table's header"
expect_eq "$(awk '$1 == "efficiency" { print NF - 2 }' "$T/out")" 3 "points"
gzip -c "$NCCL/all_gather_8.txt" >"$T/ag.txt.gz"
expect_exit 0 cm fit --nccl-tests - --class intra --points 3 <"$T/ag.txt.gz"
cp "$T/out" "$T/gz.topo"
expect_exit 0 cm fit --nccl-tests "$T/ag.txt.gz" --class intra --points 3
grep -v '^# fitted' "$T/out" >"$T/a1"
grep -v '^# fitted' "$T/gz.topo" >"$T/a2"
same_file "$T/a1" "$T/a2" "gzipped standard input"
end

finish
