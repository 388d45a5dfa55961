#!/bin/sh
# tests/cli/gpu_bundle.sh -- the GPU bundle (build-aux/gpu-bundle.sh and its run.sh) up to the
# point that needs a GPU (issue 21, acceptance 1): run.sh over this build tree runs the CPU
# steps through mpirun, then stops at the first GPU step with "no GPU found" and exit 77, its
# report one line a step. CUDA_VISIBLE_DEVICES= hides any GPU, so a GPU machine stops there
# too. Fast pieces only: the bundle is made without packages (--no-debs) from a stand-in
# tarball, and run.sh uses the built tree (--builddir) instead of building the tarball; the
# full bundle (make dist, apt-get download, dpkg -x, configure and build in the prefix with
# the host's Open MPI and development files hidden) was checked by hand: doc/gpu-bundle.
# Skips (77) without mpirun, an MPI build of moe-run or the CUDA kernels' tests.
. "${top_srcdir:-.}/tests/cli/lib.sh"

B=${top_builddir:-.}
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
"$MOE_BIN/moe-run" --version | grep -q '(MPI)' || { echo "skip: moe-run without MPI"; exit 77; }
[ -x "$B/tests/gpu/test_kernels" ] || { echo "skip: a build without the CUDA kernels"; exit 77; }
bundle=$top_srcdir/build-aux/gpu-bundle.sh

begin "usage errors exit 2"
expect_exit 2 sh "$bundle" --no-such-option
expect_exit 2 sh "$top_srcdir/build-aux/gpu-run.sh" --no-such-option
expect_exit 2 sh "$top_srcdir/build-aux/gpu-run.sh" --budget soon
end

begin "the bundle: tarball, run.sh, MANIFEST, and its size said"
mkdir -p "$T/moeflow-0"
tar -czf "$T/moeflow-0.tar.gz" -C "$T" moeflow-0
expect_exit 0 sh "$bundle" --no-debs --tarball "$T/moeflow-0.tar.gz" "$T/b"
grep -q "^gpu-bundle.sh: $T/b: moeflow-0.tar.gz, 0 packages, run.sh; [0-9.]* MiB" "$T/out" ||
    fail "no size line: $(cat "$T/out")"
for f in moeflow-0.tar.gz run.sh MANIFEST; do
    [ -f "$T/b/$f" ] || fail "$f missing from the bundle"
done
[ -x "$T/b/run.sh" ] || fail "run.sh is not executable"
end

begin "a missing tarball is one clear line, exit 1"
expect_exit 1 sh "$bundle" --no-debs --tarball "$T/none.tar.gz" "$T/b2"
expect_tool_err_line gpu-bundle.sh "'$T/none.tar.gz'"
end

begin "run.sh: the CPU steps pass, the first GPU step says no GPU found, exit 77"
# (leak checks of Open MPI's runs belong to the run_*.sh tests: off here in a sanitizer build)
expect_exit 77 env CUDA_VISIBLE_DEVICES='' OUT="$T/rep" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    MOE_GPU_RUN_ARGS='--hidden 16 --ffn 16 --tokens-per-rank 16' \
    sh "$T/b/run.sh" --workdir "$T/w" --builddir "$B"
grep -q '^run.sh: no GPU found' "$T/out" || fail "no 'no GPU found' line on stdout"
rep=$T/rep/report.txt
[ -s "$T/rep/steps.log" ] || fail "no steps.log beside the report"
for s in prefix configure build cpu-2rank-vanilla cpu-2rank-coherent cpu-2rank-pipelined \
    cpu-2rank-hierarchical cpu-2rank-datacentric test_kernels; do
    grep -q "^$s  *\(PASS\|SKIP\)  *[0-9][0-9.]*  " "$rep" || fail "no PASS/SKIP line for $s"
done
n=$(grep -c '^cpu-2rank-[a-z]*  *PASS .*check: max relative difference [^ ]*: ok' "$rep")
expect_eq "$n" 5 "CPU modes whose check passed"
grep -q '^test_kernels  *SKIP .*no GPU found' "$rep" || fail "test_kernels is not the GPU stop"
grep -q -e '^gpu-' -e '^memcheck' -e '^bench' "$rep" && fail "a GPU step ran without a GPU"
grep -q '^# nvidia-smi: ' "$rep" || fail "no device line in the report's header"
end

finish
