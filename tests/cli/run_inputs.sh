#!/bin/sh
# tests/cli/run_inputs.sh -- moe-run's messages about a bad input file: one line that names the
# file exactly once ("'f': truncated file", never "'f': 'f': truncated file"; issue 17, item
# 10), exit 1, on a single rank.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"

"$MOE_BIN/moe-trace" gen -n 400 -s 5 -L 2 -E 4 -k 2 -r 4 -S 3 --no-PG -o "$T/p4.moet" || exit 99
small="--hidden 16 --ffn 16 --iters 1 --warmup 0"
# LeakSanitizer (slow under MPI, run_lib.sh) checks the first error path and the run that goes
# through; the other error cases run without it.

# named_once FILE SUBSTRING: exactly one 'moe-run: ' line on stderr, holding SUBSTRING, with
# 'FILE' quoted in it once.
named_once() {
    _n=$(grep -c '^moe-run: ' "$T/err")
    expect_eq "$_n" 1 "moe-run messages on stderr"
    grep -q -F "$2" "$T/err" || fail "no message with '$2'"
    _k=$(grep '^moe-run: ' "$T/err" | grep -o -F "'$1'" | wc -l | tr -d ' ')
    expect_eq "$_k" 1 "times the message names '$1'"
}

begin "truncated binary trace (the block reader names the file)"
head -c 300 "$T/p4.moet" >"$T/cut.moet"
expect_exit 1 mpi 1 $small --trace "$T/cut.moet"
named_once "$T/cut.moet" "truncated"
end

begin "a trace cut inside its header"
head -c 20 "$T/p4.moet" >"$T/cut20.moet"
expect_exit 1 mpi_noleak 1 $small --trace "$T/cut20.moet"
named_once "$T/cut20.moet" "truncated"
end

begin "a bad record in a text trace (the record reader does not name the file)"
"$MOE_BIN/moe-trace" view --no-PG "$T/p4.moet" |
    awk 'NR == 4 { $6 = "0,9" } { print }' OFS='\t' >"$T/bad.mft"
expect_exit 1 mpi_noleak 1 $small --trace "$T/bad.mft"
named_once "$T/bad.mft" "expert id 9 out of range"
end

begin "a trace that is not a trace"
printf 'hello\n' >"$T/hello.moet"
expect_exit 1 mpi_noleak 1 $small --trace "$T/hello.moet"
named_once "$T/hello.moet" "hello.moet"
end

begin "a missing trace"
expect_exit 1 mpi_noleak 1 $small --trace "$T/none.moet"
named_once "$T/none.moet" "cannot open"
end

begin "--topology takes a preset name, as moe-place and moe-costmodel do"
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
"$MOE_BIN/moe-place" fit --ranks 4 --method contiguous --no-PG -o "$T/p4.moep" "$T/p4.moet" ||
    exit 99
expect_exit 0 mpi 4 $small --trace "$T/p4.moet" --placement "$T/p4.moep" --topology exflow-a100
expect_exit 1 mpi_noleak 1 $small --trace "$T/p4.moet" --topology no-such-preset
grep -q '^moe-run: .*no-such-preset' "$T/err" || fail "the unknown preset is not named"
end

begin "--nodes gives a topology of one node more nodes (issue 45 item 4)"
printf 'topology pair\nnodes 1\ngpus-per-node 2\nlink intra bandwidth 300 GB/s\nlink inter bandwidth 50 GB/s\n' \
    >"$T/pair.topo"
expect_exit 0 mpi_noleak 4 $small --trace "$T/p4.moet" --topology "$T/pair.topo" --nodes 2
grep -q '^# ranks 4 (2 nodes x 2)' "$T/out" || fail "the run is not 2 nodes x 2"
expect_exit 1 mpi_noleak 4 $small --trace "$T/p4.moet" --topology "$T/pair.topo"
grep -q "^moe-run: '$T/pair.topo' describes 2 ranks (1 nodes x 2), the run has 4: give --nodes" \
    "$T/err" || fail "no --nodes hint"
expect_exit 2 "$MOE_BIN/moe-run" --nodes 2
expect_tool_usage moe-run "" "--nodes needs --topology"
end

begin "--comm and --expert: the cpu backend moves data by MPI only; unknown names"
expect_exit 2 "$MOE_BIN/moe-run" --comm nccl
expect_tool_usage moe-run "" "--comm nccl: the cpu backend moves data by MPI"
expect_exit 2 "$MOE_BIN/moe-run" --comm ib
expect_tool_usage moe-run "" "unknown transport 'ib'"
expect_exit 2 "$MOE_BIN/moe-run" --expert gelu
expect_tool_usage moe-run "" "unknown expert 'gelu'"
expect_exit 0 "$MOE_BIN/moe-run" --comm mpi --expert silu --layers 2 --experts 4 \
    --tokens-per-rank 8 --iters 1 --warmup 0 --check
grep -q 'hidden 64, ffn 128 (silu)' "$T/out" || fail "the header does not name the experts"
end

begin "--chunks outside the chunked modes is refused (moe_run_cfg_conflict)"
expect_exit 2 "$MOE_BIN/moe-run" --mode vanilla --chunks 2
expect_tool_usage moe-run "" "--chunks applies to pipelined and hierarchical mode"
expect_exit 2 "$MOE_BIN/moe-run" --mode datacentric --chunks auto
expect_tool_usage moe-run "" "--chunks applies to pipelined and hierarchical mode"
end

begin "--backend cuda without its module: every rank ends, one line names the module"
if "$MOE_BIN/moe-run" --version | grep -q '^backends:.* cuda'; then
    # a file that is not a module, found first on the search path
    mkdir -p "$T/badmod"
    printf 'not a shared object\n' >"$T/badmod/moerun-cuda.so"
    keep=$MOE_RUN_MODULE_PATH
    MOE_RUN_MODULE_PATH=$T/badmod
    export MOE_RUN_MODULE_PATH
    expect_exit 1 mpi_noleak 2 $small --backend cuda
    MOE_RUN_MODULE_PATH=$keep
    named_once "$T/badmod/moerun-cuda.so" "cannot load"
else
    skip_case "moe-run built without the CUDA backend"
fi
end

finish
