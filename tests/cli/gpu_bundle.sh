#!/bin/sh
# tests/cli/gpu_bundle.sh -- the GPU bundle (build-aux/gpu-bundle.sh and its run.sh) without a
# GPU. (1) run.sh over this build tree runs the CPU step through mpirun, also with no ssh or rsh
# on the PATH (where plain mpirun fails: OMPI_MCA_plm_rsh_agent), then stops at the first GPU step with "no GPU found" and
# exit 77, its report one line a step. CUDA_VISIBLE_DEVICES= hides any GPU, so a GPU machine
# stops there too. (2) run.sh over a stand-in build tree whose programs are scripts that act a
# GPU machine's outcomes: the steps come in their order of value, one report line per mode
# group of the single mpirun per rank count (training SKIP with its reason where the backend
# does not train), a test that is
# not built fails its step but the benchmarks and sanitizers still run, a run_modes that dies
# fails its missing groups, PyTorch sees the machine's LD_LIBRARY_PATH, not the prefix's.
# (3) the budget: a step it cuts short, and the steps it leaves no time for, are SKIP, not
# FAIL. Fast pieces only: the bundle is made without packages (--no-debs) from a stand-in
# tarball; the full bundle in a Debian 12 chroot: gpu-bundle.sh --check-chroot (doc/gpu-bundle).
# Skips (77) without mpirun, an MPI build of moe-run or the CUDA kernels' tests.
. "${top_srcdir:-.}/tests/cli/lib.sh"

B=${top_builddir:-.}
command -v mpirun >/dev/null || { echo "skip: mpirun not found"; exit 77; }
"$MOE_BIN/moe-run" --version | grep -q '(MPI)' || { echo "skip: moe-run without MPI"; exit 77; }
[ -x "$B/tests/gpu/test_kernels" ] || { echo "skip: a build without the CUDA kernels"; exit 77; }
[ -x "$B/tests/gpu/run_modes" ] || { echo "skip: tests/gpu/run_modes not built"; exit 77; }
bundle=$top_srcdir/build-aux/gpu-bundle.sh
# (leak checks of Open MPI's runs belong to the run_*.sh tests: off here in a sanitizer build)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS

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

begin "run.sh: the CPU step passes, the first GPU step says no GPU found, exit 77"
expect_exit 77 env CUDA_VISIBLE_DEVICES='' OUT="$T/rep" \
    MOE_GPU_RUN_ARGS='--hidden 16 --ffn 16 --tokens-per-rank 16' \
    sh "$T/b/run.sh" --workdir "$T/w" --builddir "$B"
grep -q '^run.sh: no GPU found' "$T/out" || fail "no 'no GPU found' line on stdout"
rep=$T/rep/report.txt
[ -s "$T/rep/steps.log" ] || fail "no steps.log beside the report"
for s in prefix configure build cpu-2rank-fwd-fp32 test_kernels; do
    grep -q "^$s  *\(PASS\|SKIP\)  *[0-9][0-9.]*  " "$rep" || fail "no PASS/SKIP line for $s"
done
# one line for the five modes of the one mpirun, each checked against the reference
grep -q '^cpu-2rank-fwd-fp32  *PASS .*vanilla PASS err [^;]*; coherent PASS .*; pipelined .*'\
'; hierarchical .*; datacentric PASS' "$rep" || fail "cpu-2rank: $(grep cpu-2rank "$rep")"
grep -q '^test_kernels  *SKIP .*no GPU found' "$rep" || fail "test_kernels is not the GPU stop"
grep -q -e '^gpu-' -e '^memcheck' -e '^bench' "$rep" && fail "a GPU step ran without a GPU"
grep -q '^# nvidia-smi: ' "$rep" || fail "no device line in the report's header"
grep -q '^# total .* stopped: no GPU' "$rep" || fail "no closing line"
end

begin "no ssh or rsh on the PATH: plain mpirun fails at once, run.sh's CPU step passes"
# every program of the PATH's folders but ssh, rsh and slogin, as on a GPU machine without them
mkdir -p "$T/nossh"
for d in /usr/local/bin /usr/bin /bin; do
    [ -d "$d" ] || continue
    for p in "$d"/*; do
        case ${p##*/} in ssh | rsh | slogin) continue ;; esac
        [ -e "$T/nossh/${p##*/}" ] || ln -s "$p" "$T/nossh/${p##*/}"
    done
done
run env -u OMPI_MCA_plm_rsh_agent PATH="$T/nossh" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 1 true
[ "$rc" != 0 ] || fail "mpirun found an ssh or rsh: the case proves nothing"
grep -q 'plm_rsh_agent' "$T/out" "$T/err" || fail "mpirun failed otherwise: $(cat "$T/err")"
expect_exit 77 env PATH="$T/nossh" CUDA_VISIBLE_DEVICES='' OUT="$T/nrep" \
    MOE_GPU_RUN_ARGS='--hidden 16 --ffn 16 --tokens-per-rank 16' \
    sh "$T/b/run.sh" --workdir "$T/nw" --builddir "$B"
grep -q '^cpu-2rank-fwd-fp32  *PASS ' "$T/nrep/report.txt" ||
    fail "cpu-2rank without ssh: $(grep cpu-2rank "$T/nrep/report.txt")"
end

# A stand-in build tree at $1: scripts acting a GPU machine. run_modes prints (rank 0 only)
# every mode's line (training without the host's figures, and with FAKE_NOTRAIN SKIP as a
# backend without the training operations says it); with --comm mpi it dies after the first
# mode. FAKE_SLOW makes test_kernels hang.
fake_tree() {
    f=$1
    mkdir -p "$f/cmd" "$f/tests/gpu" "$f/lib/.libs" "$f/kernels/.libs" "$T/fsrc/bench" \
        "$T/fbin"
    printf 'abs_top_srcdir = %s\nbench-gpu:\n\t@echo "# dtype bf16, tokens 8"\n' "$T/fsrc" \
        >"$f/Makefile"
    printf '\t@echo "grouped FFN (grouped GEMM)  1.0  700.0 TF/s  0.950"\n' >>"$f/Makefile"
    cat >"$f/cmd/moe-run" <<'EOF'
#!/bin/sh
echo "moe-run (moeflow) 0"; echo "features: mpi cuda nccl"
EOF
    cat >"$f/tests/gpu/run_modes" <<'EOF'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0
kinds=fwd dts="fp32 bf16" mpi=no
case " $* " in *" --train "*) kinds="fwd train" ;; esac
case " $* " in *" --dtypes fp32 "*) dts=fp32 ;; esac
case " $* " in *" --comm mpi "*) mpi=yes ;; esac
for k in $kinds; do for d in $dts; do
    for m in vanilla coherent pipelined hierarchical datacentric; do
        if [ $k = train ] && [ -n "${FAKE_NOTRAIN:-}" ]; then
            echo "run_modes: $k $d $m SKIP the backend does not train"
        elif [ $k = train ]; then
            echo "run_modes: $k $d $m PASS err=3e-07 tol=1e-04 ms=9 kern=- waits=- allocs=-"
        else
            echo "run_modes: $k $d $m PASS err=1e-07 tol=1e-04 ms=2 kern=1 waits=0.5 allocs=0"
        fi
        [ $mpi = no ] || { echo "rank 1: MPI error: boom" >&2; exit 3; }
    done
done; done
EOF
    cat >"$f/tests/gpu/test_kernels" <<'EOF'
#!/bin/sh
echo "test_kernels: device 0: Stand-in GPU"
[ -z "${FAKE_SLOW:-}" ] || sleep 60
echo "test_kernels: 10 checks, 0 failed"
EOF
    cp "$f/tests/gpu/test_kernels" "$f/tests/gpu/test_run_cuda"
    chmod +x "$f/cmd/moe-run" "$f/tests/gpu/"*
    printf '#!/bin/sh\nshift\nexec "$@"\n' >"$f/libtool" # --mode=execute PROG...
    printf '#!/bin/sh\necho "========= ERROR SUMMARY: 0 errors"\n' >"$T/fbin/compute-sanitizer"
    chmod +x "$f/libtool" "$T/fbin/compute-sanitizer"
    : >"$T/fsrc/bench/bench_torch.py"
    printf '#!/bin/sh\necho "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >"%s"\necho torch ok\n' \
        "$T/torch_env" >"$T/fbin/python3"
    chmod +x "$T/fbin/python3"
}

begin "run.sh on a stand-in GPU machine: order, groups, failures that do not stop the run"
fake_tree "$T/fb"
rm "$T/fb/tests/gpu/test_run_cuda" # not built: its step fails, the rest goes on
expect_exit 1 env PATH="$T/fbin:$PATH" LD_LIBRARY_PATH=/machine/driver OUT="$T/frep" \
    sh "$T/b/run.sh" --workdir "$T/fw" --builddir "$T/fb"
rep=$T/frep/report.txt
order=$(grep -v '^#' "$rep" | awk '{ printf "%s %s\n", $1, $2 }')
want="prefix PASS
configure SKIP
build SKIP
cpu-2rank-fwd-fp32 PASS
test_kernels PASS
test_run_cuda FAIL
gpu-1rank-fwd-fp32 PASS
gpu-1rank-fwd-bf16 PASS
gpu-1rank-train-fp32 PASS
gpu-1rank-train-bf16 PASS
gpu-2rank-fwd-fp32 FAIL
gpu-2rank-fwd-bf16 FAIL
gpu-2rank-train-fp32 FAIL
gpu-2rank-train-bf16 FAIL
bench-gpu PASS
bench-torch PASS
memcheck-test_kernels PASS
memcheck-test_run_cuda FAIL
racecheck-test_kernels PASS
racecheck-test_run_cuda FAIL"
[ "$order" = "$want" ] || fail "steps and verdicts: $(echo "$order" | paste -sd ' ')"
grep -q '^test_run_cuda  *FAIL .*not built' "$rep" || fail "test_run_cuda: not 'not built'"
grep -q '^gpu-1rank-train-bf16 .*PASS .*vanilla PASS err 3e-07 9 ms; coherent' "$rep" ||
    fail "training's key figures: $(grep gpu-1rank-train-bf16 "$rep")"
grep -q '^gpu-1rank-fwd-fp32 .*vanilla PASS err 1e-07 2 ms x2.00 waits/a2a 0.5' "$rep" ||
    fail "no key figures: $(grep gpu-1rank-fwd-fp32 "$rep")"
grep -q '^gpu-2rank-fwd-fp32 .*FAIL .*vanilla PASS' "$rep" || fail "the dead run's first mode"
grep -q '^gpu-2rank-train-fp32 .*FAIL .*no result: run_modes ended with exit 3' "$rep" ||
    fail "the dead run's missing group: $(grep gpu-2rank-train-fp32 "$rep")"
expect_eq "$(cat "$T/torch_env")" "LD_LIBRARY_PATH=/machine/driver" "PyTorch's library path"
grep -q '^memcheck-test_kernels  *PASS .*ERROR SUMMARY: 0 errors' "$rep" || fail "memcheck key"
grep -q '^# total [0-9.]* s, 11 passed, 7 failed, 2 skipped$' "$rep" ||
    fail "closing line: $(tail -1 "$rep")"
end

begin "a backend without the training operations: its training groups SKIP with the reason"
fake_tree "$T/fn"
expect_exit 1 env PATH="$T/fbin:$PATH" FAKE_NOTRAIN=1 OUT="$T/nrep2" \
    sh "$T/b/run.sh" --workdir "$T/fnw" --builddir "$T/fn"
grep -q '^gpu-1rank-train-bf16  *SKIP .*the backend does not train$' "$T/nrep2/report.txt" ||
    fail "training's SKIP: $(grep gpu-1rank-train-bf16 "$T/nrep2/report.txt")"
grep -q '^gpu-1rank-fwd-bf16  *PASS' "$T/nrep2/report.txt" || fail "the forward did not pass"
end

begin "the budget: a step it cuts short, and the ones it leaves no time for, are SKIP"
fake_tree "$T/fs"
expect_exit 0 env PATH="$T/fbin:$PATH" FAKE_SLOW=1 OUT="$T/srep" \
    sh "$T/b/run.sh" --workdir "$T/sw" --builddir "$T/fs" --budget 20
rep=$T/srep/report.txt
grep -q '^test_kernels  *SKIP .*cut short by the budget of 20 s' "$rep" ||
    fail "test_kernels: $(grep test_kernels "$rep")"
grep -q '^racecheck-test_run_cuda  *SKIP .*not run: the budget of 20 s was spent' "$rep" ||
    fail "the last step: $(grep racecheck-test_run_cuda "$rep")"
grep -q '^[a-z].* FAIL ' "$rep" && fail "a step stopped by the budget is FAIL"
grep -q '^bench-gpu  *SKIP' "$rep" || fail "bench-gpu ran without budget"
end

finish
