#!/bin/sh
# tests/cli/gpu_unusable.sh -- a GPU that is there but unusable is an error (exit 1, one line
# naming the cause), never a skip (issue 21, item 5). The CUDA toolkit's stub libcuda stands in
# for a broken driver: found first on LD_LIBRARY_PATH, it makes the CUDA runtime fail with
# "CUDA driver is a stub library" on any machine, with or without a GPU. Skips (77) in a build
# without the CUDA kernels or where the toolkit has no stub.
. "${top_srcdir:-.}/tests/cli/lib.sh"

B=${top_builddir:-.}
[ -x "$B/tests/gpu/test_kernels" ] || { echo "skip: a build without the CUDA kernels"; exit 77; }
cuda=$(sed -n 's/^CUDA_HOME = //p' "$B/Makefile")
stub=$cuda/lib64/stubs/libcuda.so
[ -n "$cuda" ] && [ -f "$stub" ] || { echo "skip: no stub libcuda under '$cuda'"; exit 77; }
mkdir -p "$T/stub"
ln -s "$stub" "$T/stub/libcuda.so.1"
LD_LIBRARY_PATH=$T/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

# unusable PROG: exit 1 and one 'PROG: CUDA device unusable: ...' line on stderr.
unusable() {
    expect_exit 1 "$B/tests/gpu/$1"
    expect_tool_err_line "$1" "CUDA device unusable: "
    grep -q 'skipped' "$T/out" && fail "$1 says it skipped"
}

begin "the kernel tests fail on a stub driver (they skipped before)"
unusable test_kernels
end

begin "the CUDA backend's tests fail on a stub driver"
unusable test_run_cuda
end

begin "moe-run --backend cuda names the cause"
if "$MOE_BIN/moe-run" --version | grep -q '^backends:.* cuda' && command -v mpirun >/dev/null
then
    LSAN_OPTIONS=${LSAN_OPTIONS:-}
    . "$top_srcdir/tests/cli/run_lib.sh"
    expect_exit 1 mpi_noleak 1 --hidden 16 --ffn 16 --iters 1 --warmup 0 --backend cuda
    grep -q '^moe-run: .*CUDA device unusable on rank 0: ' "$T/err" ||
        fail "no 'CUDA device unusable' line: $(head -3 "$T/err")"
else
    skip_case "moe-run without the CUDA backend or without mpirun"
fi
end

finish
