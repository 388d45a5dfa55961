#!/bin/sh
# build-aux/gpu-run.sh -- run.sh of the GPU bundle (build-aux/gpu-bundle.sh): on a GPU machine
# with CUDA, NCCL, gcc and python3 but none of the build's other dependencies, unpack the
# bundle's Debian packages into a prefix (dpkg -x, no root), build the dist tarball with CUDA and
# run every GPU step, each under a time limit inside one budget, writing one report line per
# step (step, PASS/FAIL/SKIP, seconds, key figures) to report.txt and the steps' logs beside it,
# under $OUT when set. Without a GPU it builds everything, runs the CPU steps and stops at the
# first GPU step with "no GPU found" and exit 77. How to run it: doc/gpu-bundle.
#
# usage: run.sh [--workdir DIR] [--builddir DIR] [--budget SECONDS]
set -u

me=run.sh
here=$(cd "$(dirname "$0")" && pwd)
usage() {
    cat <<EOF
Usage: sh gpu-bundle/run.sh [OPTION]...
Build moeflow from this bundle and run its GPU checks, writing report.txt (one line a step:
step, PASS/FAIL/SKIP, seconds, key figures) and the steps' logs to \$OUT [WORKDIR/out].

      --workdir=DIR    where the prefix, sources and build go [\${TMPDIR:-/tmp}/moeflow-gpu]
      --builddir=DIR   use this configured and built tree instead of building the tarball
      --budget=S       end every step by S seconds after the start [570]
      --help           display this help and exit

Environment: MOE_GPU_RUN_ARGS, the moe-run size options of the --check runs [$run_args_default].
Exit status: 0 every step passed or was skipped, 1 a step failed, 77 no GPU found, 2 usage.
EOF
}
run_args_default="--layers 4 --experts 16 --topk 2 --hidden 256 --ffn 512 --tokens-per-rank 256"

# ----------------------------------------------------------------- steps run in a child shell
# (under timeout, which runs programs, not shell functions: run.sh --step NAME)
M=x86_64-linux-gnu
# unpack DEB: dpkg -x, or ar + tar where dpkg is missing
unpack() {
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$1" "$P"
    else
        _m=$(ar t "$1" | grep '^data\.tar')
        ar p "$1" "$_m" | tar -x -a -f - -C "$P" 2>/dev/null ||
            ar p "$1" "$_m" | { case $_m in
                *.xz) xz -dc ;; *.zst) zstd -dc ;; *.gz) gzip -dc ;; *) cat ;; esac; } |
            tar -x -f - -C "$P"
    fi
}
# relink: a development link (libz.so) whose library is left to the base system points at
# this machine's copy of it (same soname), so the linker does not fall back on the .a.
relink() {
    for _f in "$P/usr/lib/$M"/*.so "$P/usr/lib"/*.so; do
        [ -L "$_f" ] && [ ! -e "$_f" ] || continue
        _so=$(basename "$(readlink "$_f")" | sed 's/\(\.so\.[0-9]*\).*/\1/')
        _p=$(ldconfig -p 2>/dev/null | awk -v s="$_so" '$1 == s && /x86-64/ { print $NF; exit }')
        [ -z "$_p" ] || ln -sf "$_p" "$_f"
    done
}
prefix_step() {
    rm -rf "$P" && mkdir -p "$P" || return 1
    for _d in "$here"/debs/*.deb; do
        [ -f "$_d" ] || continue
        echo "unpack $(basename "$_d")"
        unpack "$_d" || { echo "$me: cannot unpack '$_d'"; return 1; }
    done
    relink
    [ -x "$P/usr/bin/orterun" ] || return 0
    echo "ldd of the MPI programs and libraries:"
    ldd "$P/usr/bin/orterun" "$P/usr/bin/orted" "$P/usr/bin/opal_wrapper" "$OMPI/lib/libmpi.so.40" |
        tee "$L/ldd.txt" | grep 'not found' && return 1
    return 0
}

configure_step() {
    rm -rf "$SRC" "$B" && mkdir -p "$SRC" "$B" || return 1
    tar -xzf "$tarball" -C "$SRC" --strip-components=1 || return 1
    cd "$B" || return 1
    "$SRC/configure" --with-cuda="$CUDA_HOME" ${nccl:+--with-nccl="${nccl%% *}"} --with-mpi \
        --with-lpsolve="$P/usr" CPPFLAGS="-I$P/usr/include" PKG_CONFIG=false \
        LDFLAGS="-L$P/usr/lib/$M -L$P/lib/$M"
}
# the GPU tests are check programs, built by name after the rest (one make at a time: two
# goals of one parallel make would build libmoecore twice at once)
build_step() {
    _j=$(nproc 2>/dev/null || echo 4)
    make -C "$B" -j "$_j" && make -C "$B" -j "$_j" tests/gpu/test_kernels tests/gpu/test_run_cuda
}
if [ "${1:-}" = --step ]; then
    "$2"
    exit $?
fi

W=${MOE_GPU_WORKDIR:-${TMPDIR:-/tmp}/moeflow-gpu} B='' budget=570
self=$here/$(basename "$0")
while [ $# -gt 0 ]; do
    case $1 in
    --workdir=*) W=${1#*=} ;;
    --builddir=*) B=${1#*=} ;;
    --budget=*) budget=${1#*=} ;;
    --workdir | --builddir | --budget)
        [ $# -ge 2 ] || { echo "$me: option '$1' needs a value" >&2; exit 2; }
        case $1 in
        --workdir) W=$2 ;;
        --builddir) B=$2 ;;
        --budget) budget=$2 ;;
        esac
        shift
        ;;
    --help) usage; exit 0 ;;
    *)
        echo "$me: unknown argument '$1'" >&2
        echo "Try '$me --help' for more information." >&2
        exit 2
        ;;
    esac
    shift
done
case $budget in '' | *[!0-9]*) echo "$me: --budget needs whole seconds" >&2; exit 2 ;; esac
command -v timeout >/dev/null || { echo "$me: timeout (coreutils) not found" >&2; exit 1; }

start=$(date +%s)
deadline=$((start + budget))
mkdir -p "$W" || exit 1
W=$(cd "$W" && pwd)
R=${OUT:-$W/out}
L=$W/logs
mkdir -p "$R" "$L" "$W/bin" || exit 1
: >"$R/report.txt"
: >"$R/steps.log"
failed=0 secs=0.0 rc=0

now() { date +%s.%N; }
# step NAME LIMIT CMD...: run CMD, its output in $L/NAME.log, with a time limit cut to what the
# budget has left; sets $rc and $secs, and appends the log's tail to steps.log.
step() {
    _n=$1 _lim=$2
    shift 2
    _left=$((deadline - $(date +%s) - 5))
    if [ "$_left" -lt 10 ]; then
        rc=124 secs=0.0
        echo "$me: not run: the budget of $budget s is spent" >"$L/$_n.log"
        return
    fi
    [ "$_lim" -le "$_left" ] || _lim=$_left
    _t0=$(now)
    timeout -k 10 "$_lim" "$@" >"$L/$_n.log" 2>&1
    rc=$?
    secs=$(awk -v a="$_t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
    124 | 137) echo "$me: $_n: stopped after its limit of $_lim s" >>"$L/$_n.log" ;;
    esac
    { echo "===== $_n: exit $rc, $secs s: $*"; tail -n 80 "$L/$_n.log"; } >>"$R/steps.log"
}
# record NAME STATUS KEY: one report line (also on stdout).
record() {
    printf '%-28s %-4s %7s  %s\n' "$1" "$2" "$secs" "$3" | tee -a "$R/report.txt"
    [ "$2" != FAIL ] || failed=$((failed + 1))
}
# verdict NAME KEY: PASS on exit 0, else FAIL with the log's last line.
verdict() {
    if [ "$rc" = 0 ]; then
        record "$1" PASS "$2"
    else
        record "$1" FAIL "exit $rc: $(grep -v '^ *$' "$L/$1.log" | tail -n 1 | cut -c1-160)"
    fi
}
skip() {
    secs=0.0
    record "$1" SKIP "$2"
}
header() { echo "# $*" | tee -a "$R/report.txt"; }

header "moeflow GPU run, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(uname -n), budget $budget s"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    head -1)
header "nvidia-smi: ${gpu:-none (no driver, or nvidia-smi not installed)}"
header "bundle: $(sed -n 's/^# //p' "$here/MANIFEST" 2>/dev/null | head -1)"
header "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')" \
    "(the packages need $(sed -n 's/^glibc //p' "$here/MANIFEST" 2>/dev/null))"

# ----------------------------------------------------------------- the prefix
P=$W/prefix
OMPI=$P/usr/lib/$M/openmpi
export W L P OMPI
LD_LIBRARY_PATH=$OMPI/lib:$P/usr/lib/$M:$P/lib/$M${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PATH=$W/bin:$PATH:$P/usr/bin
export LD_LIBRARY_PATH PATH
# One machine: shared memory between ranks, root allowed, more ranks than cores allowed.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader

n=$(ls "$here"/debs/*.deb 2>/dev/null | wc -l | tr -d ' ')
step prefix 120 sh "$self" --step prefix_step
# Open MPI unpacked outside /usr finds its components, help files and PMIx through these
# (only when the bundle brings it: they would mislead an Open MPI of the machine's own).
if [ -x "$P/usr/bin/orterun" ]; then
    export OPAL_PREFIX="$P/usr" OPAL_SYSCONFDIR="$P/etc/openmpi"
    export PMIX_INSTALL_PREFIX="$P/usr/lib/$M/pmix2"
fi
for t in mpicc mpirun mpiexec; do
    [ -e "$P/usr/bin/$t.openmpi" ] && ln -sf "$P/usr/bin/$t.openmpi" "$W/bin/$t"
done
command -v make >/dev/null || ln -sf "$P/usr/bin/make" "$W/bin/make"
need=$(sed -n 's/^glibc //p' "$here/MANIFEST" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')
if [ "$rc" = 0 ] && [ -n "$need" ] && [ -n "$have" ] &&
    [ "$(printf '%s\n%s\n' "$need" "$have" | sort -t. -k1,1n -k2,2n | head -1)" != "$need" ]; then
    rc=1
    echo "$me: the packages need glibc $need, this machine has $have" >>"$L/prefix.log"
fi
verdict prefix "$n packages in $P; $(mpirun --version 2>/dev/null | head -1 || echo 'no mpirun')"

# ----------------------------------------------------------------- CUDA, NCCL
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
# NCCL: the CUDA prefix, the system, or the pip wheel beside torch (nvidia-nccl-cu13, which has
# no libnccl.so link); one folder of links to what is found, for configure's --with-nccl.
find_nccl() {
    _py=$(env -u LD_LIBRARY_PATH python3 -c 'import nvidia.nccl as n; print(n.__path__[0])' \
        2>/dev/null)
    for _d in "$CUDA_HOME" /usr "$_py"; do
        [ -n "$_d" ] && [ -f "$_d/include/nccl.h" ] || continue
        for _l in "$_d"/lib64/libnccl.so* "$_d"/lib/libnccl.so* "$_d/lib/$M"/libnccl.so*; do
            [ -e "$_l" ] || continue
            mkdir -p "$W/nccl/include" "$W/nccl/lib64"
            ln -sf "$_d/include/nccl.h" "$W/nccl/include/nccl.h"
            ln -sf "$(readlink -f "$_l")" "$W/nccl/lib64/libnccl.so"
            ln -sf "$(readlink -f "$_l")" "$W/nccl/lib64/libnccl.so.2"
            echo "$W/nccl (from $_d)"
            return 0
        done
    done
    return 1
}
nccl=$(find_nccl) || nccl=
cuda_v=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([^,]*\).*/\1/p')
header "CUDA: $CUDA_HOME (nvcc ${cuda_v:-not found}); NCCL: ${nccl:-not found}"

# ----------------------------------------------------------------- configure and build
if [ -n "$B" ]; then
    B=$(cd "$B" && pwd)
    SRC=$(sed -n 's/^abs_top_srcdir = //p' "$B/Makefile")
    skip configure "using the build in $B"
    skip build "using the build in $B"
else
    SRC=$W/src B=$W/build
    tarball=$(ls "$here"/moeflow-*.tar.gz 2>/dev/null | head -1)
    export SRC B tarball CUDA_HOME nccl
    step configure 240 sh "$self" --step configure_step
    cp "$B/config.log" "$R/config.log" 2>/dev/null
    verdict configure "$(sed -n 's/^ *features: *//p' "$L/configure.log" | tail -1)"
    step build 420 sh "$self" --step build_step
    verdict build "make -j$(nproc 2>/dev/null)"
fi
[ -n "$nccl" ] && LD_LIBRARY_PATH=${nccl%% *}/lib64:$LD_LIBRARY_PATH
LD_LIBRARY_PATH=$B/lib/.libs:$LD_LIBRARY_PATH
export MOE_RUN_MODULE_PATH="$B/kernels/.libs"
moe_run=$B/cmd/.libs/moe-run
[ -x "$moe_run" ] || moe_run=$B/cmd/moe-run
if ! "$moe_run" --version >/dev/null 2>&1; then
    echo "$me: no working moe-run in $B: the other steps did not run (report: $R/report.txt)"
    header "total $(($(date +%s) - start)) s, $failed failed; stopped: no moe-run"
    exit 1
fi
header "moe-run: $("$moe_run" --version 2>/dev/null | sed -n 's/^features: //p')"

# ----------------------------------------------------------------- CPU steps
modes="vanilla coherent pipelined hierarchical datacentric"
run_args=${MOE_GPU_RUN_ARGS:-$run_args_default}
# join: the input's lines as one, separated by "; "
join() { paste -sd '|' - | sed 's/|/; /g'; }
# key_run LOG: moe-run's time per iteration, the iteration over its kernels' time (on one rank:
# the runtime's overhead, issue 21 item 7's fourth ratio, goal <= 1.15) and its check verdict.
key_run() {
    sed -n -e 's/^# per iteration: \([^,]*\), \([^,]*\),.*/\1, \2/p' \
        -e 's/^# kernels and copies: .* the iteration takes \([0-9.]*x\) that.*/iteration \/ kernels \1/p' \
        -e 's/^# check against the serial vanilla reference: /check: /p' "$1" | join
}
for m in $modes; do
    # shellcheck disable=SC2086
    step "cpu-2rank-$m" 60 mpirun -np 2 "$moe_run" --backend cpu --mode "$m" --check $run_args \
        --iters 1 --warmup 0
    verdict "cpu-2rank-$m" "$(key_run "$L/cpu-2rank-$m.log")"
done

# ----------------------------------------------------------------- the GPU tests
gpu_test() {
    if [ ! -x "$B/tests/gpu/$1" ]; then
        record "$1" FAIL "not built: $B/tests/gpu/$1 (no CUDA kernels in this build?)"
        echo "$me: no GPU tests in $B: the GPU steps did not run (report: $R/report.txt)"
        exit 1
    fi
    step "$1" 240 "$B/tests/gpu/$1"
    if [ "$rc" = 77 ]; then
        record "$1" SKIP "no GPU found: $(head -1 "$L/$1.log")"
        echo "$me: no GPU found: the GPU steps did not run (report: $R/report.txt)"
        exit 77
    fi
    verdict "$1" "$(grep -e 'device 0' -e 'checks,' "$L/$1.log" | join)"
}
gpu_test test_kernels
gpu_test test_run_cuda

# ----------------------------------------------------------------- moe-run --check on the GPU
comm_mpi=no
"$moe_run" --help 2>/dev/null | grep -q -e '--comm' && comm_mpi=yes
for np in 1 2 4; do
    for m in $modes; do
        for dt in fp32 bf16; do
            s=gpu-${np}rank-$m-$dt
            if [ "$np" != 1 ] && [ "$comm_mpi" = no ]; then
                skip "$s" "not available: moe-run has no --comm mpi (NCCL allows one rank a GPU)"
                continue
            fi
            comm=
            [ "$np" = 1 ] || comm="--comm mpi"
            # shellcheck disable=SC2086
            step "$s" 120 mpirun -np "$np" "$moe_run" --backend cuda $comm --mode "$m" \
                --dtype "$dt" --check $run_args
            verdict "$s" "$(key_run "$L/$s.log")"
        done
    done
done

# ----------------------------------------------------------------- benchmarks
step bench-gpu 240 make -C "$B" bench-gpu
cp "$L/bench-gpu.log" "$R/bench.txt"
# key: each dtype's fractions of the baselines (expert FFN vs dense GEMM, permute and combine vs
# the device copy)
verdict bench-gpu "$(awk '/^# dtype/ { dt = $3; sub(",", "", dt) }
    /^[a-z]/ && NF >= 4 && $NF ~ /^[0-9.]+$/ && $0 !~ /baseline/ {
        printf "%s%s %s=%s", sep, dt, $1, $NF; sep = "; " }' "$L/bench-gpu.log")"
if [ -f "$SRC/bench/bench_torch.py" ]; then
    step bench-torch 240 env -u LD_LIBRARY_PATH python3 "$SRC/bench/bench_torch.py" \
        --moeflow "$L/bench-gpu.log"
    cat "$L/bench-torch.log" >>"$R/bench.txt"
    verdict bench-torch "$(grep -v '^ *$' "$L/bench-torch.log" | tail -1 | cut -c1-160)"
else
    skip bench-torch "not available: bench/bench_torch.py is not in this tree"
fi

# ----------------------------------------------------------------- compute-sanitizer
# last: racecheck can be slow, and the budget then cuts it, not the benchmarks
san=$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" \
    "$CUDA_HOME/compute-sanitizer/compute-sanitizer" 2>/dev/null | head -1)
for tool in memcheck racecheck; do
    for t in test_kernels test_run_cuda; do
        s=$tool-$t
        if [ -z "$san" ]; then
            skip "$s" "compute-sanitizer not found"
            continue
        fi
        step "$s" 180 "$B/libtool" --mode=execute "$san" --tool "$tool" --error-exitcode 86 \
            "$B/tests/gpu/$t"
        verdict "$s" "$(grep -o 'ERROR SUMMARY: .*' "$L/$s.log" | tail -1)"
    done
done

secs=$(awk -v a="$start" -v b="$(date +%s)" 'BEGIN { printf "%.1f", b - a }')
header "total $secs s, $failed failed"
[ "$failed" = 0 ] || exit 1
exit 0
