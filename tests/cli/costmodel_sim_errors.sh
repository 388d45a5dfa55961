#!/bin/sh
# tests/cli/costmodel_sim_errors.sh -- moe-costmodel simulate and fit on bad input and bad usage:
# exit status 1 (2 for usage errors, with the "Try ... --help" hint), exactly one
# 'moe-costmodel: ' line on stderr, nothing on stdout, no output file or plot left behind.

. "$(dirname "$0")/lib.sh"

cm() { moe_tool moe-costmodel "$@"; }
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
NCCL=$top_srcdir/tests/data/nccl
OUT=$T/out.txt
PLOT=$T/p.png

# bad STATUS SUBSTRING SUBCOMMAND ARGS...: fails with STATUS and one line (plus the hint for a
# usage error) containing SUBSTRING, leaving nothing behind.
bad() {
    _st=$1 _msg=$2
    shift 2
    rm -f "$OUT" "$PLOT"
    expect_exit "$_st" cm "$@"
    if [ "$_st" = 2 ]; then
        expect_tool_usage moe-costmodel "$1" "$_msg"
    else
        expect_tool_err_line moe-costmodel "$_msg"
    fi
    expect_no_stdout
    expect_no_output "$OUT"
    expect_no_output "$PLOT"
}

cat >"$T/c.topo" <<'TOPO'
nodes 2
gpus-per-node 2
link intra bandwidth 100 GB/s
link inter bandwidth 10 GB/s
flops 100 TFLOP/s
TOPO
grep -v flops "$T/c.topo" >"$T/noflops.topo"
sed 's/^nodes 2/nodes 4/' "$T/c.topo" >"$T/big.topo"
moe gen --no-PG -L 3 -E 8 -k 2 -n 500 -s 20 --hidden 32 --elem-bytes 2 -S 2 -o "$T/t.moet" &&
    moe gen --no-PG -L 3 -E 8 -k 2 -n 500 -s 20 -S 2 -o "$T/novec.moet" &&
    moe gen --no-PG -L 2 -E 8 -k 2 -n 50 -s 5 --hidden 32 -S 3 -o "$T/l2.moet" &&
    moe gen --no-PG -L 3 -E 8 -k 2 -n 500 -s 20 -r 16 --hidden 32 -S 2 -o "$T/r16.moet" ||
    { echo "cannot make the test inputs"; exit 1; }
"$MOE_BIN/moe-place" fit --no-PG --ranks 4 --gpus-per-node 2 -o "$T/p.moep" "$T/t.moet" ||
    { echo "cannot make the placement"; exit 1; }
head -c 300 "$T/t.moet" >"$T/trunc.moet"
P="$T/p.moep"

begin "the inputs are good"
expect_exit 0 cm simulate --best --plot "$PLOT" -o "$OUT" --topology "$T/c.topo" "$T/t.moet" "$P"
expect_no_stderr
end

begin "simulate's two files swapped: each named by its kind, the order said"
bad 1 "'$T/t.moet' is a routing trace and '$P' a placement: moe-costmodel simulate takes TRACE PLACEMENT" \
    simulate -o "$OUT" --topology "$T/c.topo" "$P" "$T/t.moet"
bad 1 "'$P' is a placement, not a moeflow trace: moe-costmodel simulate takes TRACE PLACEMENT" \
    simulate -o "$OUT" --topology "$T/c.topo" "$P" "$P"
end

begin "simulate: usage errors"
bad 2 "--topology is required" simulate "$T/t.moet" "$P"
bad 2 "expected a trace and a placement" simulate --topology "$T/c.topo" "$T/t.moet"
bad 2 "cannot both be standard input" simulate --topology "$T/c.topo" - -
bad 2 "unknown scheme" simulate --scheme vanilla,janus --topology "$T/c.topo" "$T/t.moet" "$P"
bad 2 "unknown dtype" simulate --dtype int8 --topology "$T/c.topo" "$T/t.moet" "$P"
bad 2 "chunk count" simulate --chunks 0 --topology "$T/c.topo" "$T/t.moet" "$P"
bad 2 "credit count" simulate --credits 0 --topology "$T/c.topo" "$T/t.moet" "$P"
bad 2 "unknown source" simulate --source any --topology "$T/c.topo" "$T/t.moet" "$P"
bad 2 "" simulate --no-such-option --topology "$T/c.topo" "$T/t.moet" "$P"
end

begin "simulate: bad inputs"
bad 1 "cannot open '$T/none.moet'" simulate -o "$OUT" --topology "$T/c.topo" "$T/none.moet" "$P"
bad 1 "none.moep" simulate -o "$OUT" --topology "$T/c.topo" "$T/t.moet" "$T/none.moep"
bad 1 "no-such-preset" simulate -o "$OUT" --topology no-such-preset "$T/t.moet" "$P"
bad 1 "placement has 4 ranks, the topology 8" simulate -o "$OUT" --topology "$T/big.topo" \
    "$T/t.moet" "$P"
bad 1 "placement is for 3 layers" simulate -o "$OUT" --topology "$T/c.topo" "$T/l2.moet" "$P"
bad 1 "give --hidden" simulate -o "$OUT" --topology "$T/c.topo" "$T/novec.moet" "$P"
bad 1 "truncated" simulate -o "$OUT" --plot "$PLOT" --topology "$T/c.topo" "$T/trunc.moet" "$P"
bad 1 "out of range" simulate -o "$OUT" --source recorded --topology "$T/c.topo" \
    "$T/r16.moet" "$P"
bad 1 "top-k 3 exceeds" simulate -o "$OUT" --topk 3 --topology "$T/c.topo" "$T/t.moet" "$P"
bad 1 "no compute rate (flops)" simulate --best -o "$OUT" --plot "$PLOT" \
    --topology "$T/noflops.topo" "$T/t.moet" "$P"
bad 1 "" simulate -o /dev/full --topology "$T/c.topo" "$T/t.moet" "$P"
bad 1 "" simulate -o "$T/nodir/x" --plot "$PLOT" --topology "$T/c.topo" "$T/t.moet" "$P"
bad 1 "" simulate -o "$OUT" --plot "$T/nodir/p.png" --topology "$T/c.topo" "$T/t.moet" "$P"
end

# broken nccl-tests tables
awk 'NR == 30 { $9 = 2 } { print }' "$NCCL/alltoall_2x8.txt" >"$T/wrong.txt"
awk 'NR == 30 { print $1, $2, $3; next } { print }' "$NCCL/alltoall_2x8.txt" >"$T/short.txt"
grep -v '^#  *size' "$NCCL/alltoall_2x8.txt" >"$T/nohead.txt"
grep '^#' "$NCCL/alltoall_2x8.txt" >"$T/norows.txt"
awk 'NR == 30 { $8 = "x" } { print }' "$NCCL/alltoall_2x8.txt" >"$T/nan.txt"
: >"$T/empty.txt"

begin "fit: usage errors"
bad 2 "--nccl-tests and --class are required" fit --class inter
bad 2 "--nccl-tests and --class are required" fit --nccl-tests "$NCCL/alltoall_2x8.txt"
bad 2 "unknown class" fit --nccl-tests "$NCCL/alltoall_2x8.txt" --class nvlink
bad 2 "point count" fit --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter --points 1
bad 2 "tolerance" fit --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter --tolerance -1
bad 2 "unexpected argument" fit --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter extra
end

begin "fit: bad tables"
bad 1 "cannot open" fit -o "$OUT" --nccl-tests "$T/none.txt" --class inter
bad 1 "wrong results" fit -o "$OUT" --nccl-tests "$T/wrong.txt" --class inter
bad 1 "line 30: expected 13 fields, found 3" fit -o "$OUT" --nccl-tests "$T/short.txt" \
    --class inter
bad 1 "result row before the column header" fit -o "$OUT" --nccl-tests "$T/nohead.txt" \
    --class inter
bad 1 "no nccl-tests result rows" fit -o "$OUT" --nccl-tests "$T/norows.txt" --class inter
bad 1 "no nccl-tests result rows" fit -o "$OUT" --nccl-tests "$T/empty.txt" --class inter
bad 1 "not a non-negative number" fit -o "$OUT" --nccl-tests "$T/nan.txt" --class inter
bad 1 "no nccl-tests result rows" fit -o "$OUT" --nccl-tests "$T/t.moet" --class inter
bad 1 "no-such-preset" fit -o "$OUT" --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter \
    --topology no-such-preset
bad 1 "" fit -o /dev/full --nccl-tests "$NCCL/alltoall_2x8.txt" --class inter
end

finish
