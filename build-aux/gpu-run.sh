#!/bin/sh
# build-aux/gpu-run.sh -- run.sh of the GPU bundle (build-aux/gpu-bundle.sh): on a GPU machine
# with CUDA, NCCL, gcc and python3 but none of the build's other dependencies, unpack the
# bundle's Debian packages into a prefix (dpkg -x, no root), build the dist tarball with CUDA and
# run the GPU checks in the order of their value, each under a time limit cut to what is left
# of one hard budget, writing one report line per step (step, PASS/FAIL/SKIP, seconds, key
# figures) to report.txt and the steps' logs beside it, under $OUT when set. Without a GPU it
# builds everything, runs the CPU step and stops at the first GPU step with "no GPU found" and
# exit 77. How to run it: doc/gpu-bundle.
#
# usage: run.sh [--workdir DIR] [--builddir DIR] [--budget SECONDS]
set -u

me=run.sh
here=$(cd "$(dirname "$0")" && pwd)
run_args_default="--layers 4 --experts 16 --topk 2 --hidden 256 --ffn 512 --tokens-per-rank 256"
usage() {
    cat <<EOF
Usage: sh gpu-bundle/run.sh [OPTION]...
Build moeflow from this bundle and run its GPU checks, writing report.txt (one line a step:
step, PASS/FAIL/SKIP, seconds, key figures) and the steps' logs to \$OUT [WORKDIR/out].

      --workdir=DIR    where the prefix, sources and build go [\${TMPDIR:-/tmp}/moeflow-gpu]
      --builddir=DIR   use this configured and built tree instead of building the tarball
      --budget=S       end every step by S seconds after the start [540]
      --help           display this help and exit

Steps, in this order: prefix, configure, build, cpu-2rank, test_kernels, test_run_cuda,
gpu-1rank-{fwd,train}-{fp32,bf16} (one mpirun, NCCL), gpu-2rank-... (one mpirun, --comm mpi),
bench-gpu, bench-torch, memcheck-*, racecheck-*. A step the budget leaves no time for, or
cuts short, is SKIP; one that fails or runs past its own limit is FAIL.
Environment: MOE_GPU_RUN_ARGS, the model sizes of the --check runs [$run_args_default].
Exit status: 0 every step passed or was skipped, 1 a step failed, 77 no GPU found, 2 usage.
EOF
}

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
# the GPU tests and the check driver are check programs, built by name after the rest (one
# make at a time: two goals of one parallel make would build libmoecore twice at once)
build_step() {
    _j=$(nproc 2>/dev/null || echo 4)
    make -C "$B" -j "$_j" &&
        make -C "$B" -j "$_j" tests/gpu/run_modes tests/gpu/test_kernels tests/gpu/test_run_cuda
}
if [ "${1:-}" = --step ]; then
    "$2"
    exit $?
fi

W=${MOE_GPU_WORKDIR:-${TMPDIR:-/tmp}/moeflow-gpu} B='' budget=540
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
failed=0 passed=0 skipped=0 secs=0.0 rc=0 cut=0 notrun=0

now() { date +%s.%N; }
# step NAME LIMIT CMD...: run CMD, its output in $L/NAME.log, with a time limit cut to what the
# budget has left (10 s kept for the kill); sets $rc, $secs, $cut (the budget shortened the
# limit) and $notrun (no time was left), and appends the log's tail to steps.log.
step() {
    _n=$1 _lim=$2
    shift 2
    _left=$((deadline - $(date +%s) - 10))
    cut=0 notrun=0
    if [ "$_left" -lt 5 ]; then
        rc=124 secs=0.0 notrun=1
        echo "$me: not run: the budget of $budget s is spent" >"$L/$_n.log"
        return
    fi
    [ "$_lim" -le "$_left" ] || { _lim=$_left; cut=1; }
    _t0=$(now)
    timeout -k 5 "$_lim" "$@" >"$L/$_n.log" 2>&1
    rc=$?
    secs=$(awk -v a="$_t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
    124 | 137) echo "$me: $_n: stopped after its limit of $_lim s" >>"$L/$_n.log" ;;
    esac
    { echo "===== $_n: exit $rc, $secs s: $*"; tail -n 80 "$L/$_n.log"; } >>"$R/steps.log"
}
# timed_out: the last step ran past its limit
timed_out() { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }
# record NAME STATUS KEY: one report line (also on stdout).
record() {
    printf '%-28s %-4s %7s  %s\n' "$1" "$2" "$secs" "$3" | tee -a "$R/report.txt"
    case $2 in
    FAIL) failed=$((failed + 1)) ;;
    PASS) passed=$((passed + 1)) ;;
    *) skipped=$((skipped + 1)) ;;
    esac
}
# budget_skip NAME: SKIP when the budget left the last step no time or cut it short; returns
# 1 (nothing recorded) otherwise.
budget_skip() {
    if [ "$notrun" = 1 ]; then
        record "$1" SKIP "not run: the budget of $budget s was spent"
    elif [ "$cut" = 1 ] && timed_out; then
        record "$1" SKIP "cut short by the budget of $budget s"
    else
        return 1
    fi
}
# verdict NAME KEY: PASS on exit 0; SKIP when the budget stopped it; else FAIL with the log's
# last line.
verdict() {
    budget_skip "$1" && return
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
# join: the input's lines as one, separated by "; "
join() { paste -sd '|' - | sed 's/|/; /g'; }

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
# the machine's own library path, for the programs that must see only the machine's
# libraries (PyTorch: the prefix's would shadow the machine's, and unsetting the variable
# could hide the driver)
if [ -n "${LD_LIBRARY_PATH+set}" ]; then
    machine_ld=set machine_ld_path=$LD_LIBRARY_PATH
else
    machine_ld='' machine_ld_path=''
fi
LD_LIBRARY_PATH=$OMPI/lib:$P/usr/lib/$M:$P/lib/$M${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PATH=$W/bin:$PATH:$P/usr/bin
export LD_LIBRARY_PATH PATH
# One machine: shared memory between ranks, root allowed, more ranks than cores allowed. No
# ssh or rsh is needed to start ranks on this node, but Open MPI's rsh launcher refuses to
# load without one ("plm_rsh_agent: ssh : rsh" not found), and mpirun and a singleton MPI_Init
# fail at once: an agent that exists (and is never called) lets it load.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_plm_rsh_agent=false

n=$(ls "$here"/debs/*.deb 2>/dev/null | wc -l | tr -d ' ')
step prefix 90 sh "$self" --step prefix_step
# Open MPI unpacked outside /usr finds its components, help files and PMIx through these
# (only when the bundle brings it: they would mislead an Open MPI of the machine's own). PMIx
# reads its help files from PMIX_DATADIR and its plugins (the zlib compression of its
# start-up data) from its component path, not from PMIX_INSTALL_PREFIX: without them every
# mpirun warns that no compression library was found.
if [ -x "$P/usr/bin/orterun" ]; then
    export OPAL_PREFIX="$P/usr" OPAL_SYSCONFDIR="$P/etc/openmpi"
    export PMIX_INSTALL_PREFIX="$P/usr/lib/$M/pmix2" PMIX_DATADIR="$P/usr/lib/$M/pmix2/share"
    export PMIX_MCA_mca_base_component_path="$P/usr/lib/$M/pmix2/lib/pmix"
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
machine_env() {
    if [ -n "$machine_ld" ]; then
        env LD_LIBRARY_PATH="$machine_ld_path" "$@"
    else
        env -u LD_LIBRARY_PATH "$@"
    fi
}
find_nccl() {
    _py=$(machine_env python3 -c 'import nvidia.nccl as n; print(n.__path__[0])' 2>/dev/null)
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
    step configure 180 sh "$self" --step configure_step
    cp "$B/config.log" "$R/config.log" 2>/dev/null
    verdict configure "$(sed -n 's/^ *features: *//p' "$L/configure.log" | tail -1)"
    step build 360 sh "$self" --step build_step
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
# libtool's wrapper or the program itself
prog_of() {
    if [ -x "$B/$1" ]; then echo "$B/$1"; else echo ''; fi
}

# ----------------------------------------------------------------- the modes' checks
run_args=${MOE_GPU_RUN_ARGS:-$run_args_default}
modes="vanilla coherent pipelined hierarchical datacentric"
rmodes=$(prog_of tests/gpu/run_modes)
# modes_verdicts PREFIX LOG KINDS DTYPES: one report line per kind and dtype from run_modes'
# lines in LOG: PASS when every mode passed, SKIP when every mode was skipped (with the
# reason), FAIL otherwise; a mode without a line did not run (the process ended first: FAIL,
# or SKIP when the budget stopped it). Key figures per mode: the check's largest difference,
# ms per iteration, iteration / kernel time, host waits per all-to-all.
modes_verdicts() {
    _pre=$1 _log=$2 _kinds=$3 _dts=$4
    for _k in $_kinds; do
        for _dt in $_dts; do
            _name=$_pre-$_k-$_dt
            if [ "$notrun" = 1 ]; then
                record "$_name" SKIP "not run: the budget of $budget s was spent"
                continue
            fi
            _lines=$(grep "^run_modes: $_k $_dt " "$_log" 2>/dev/null)
            _st=$(echo "$_lines" | awk -v modes="$modes" -v cut="$cut" -v rc="$rc" '
                BEGIN { n = split(modes, m, " ") }
                NF >= 5 { st[$4] = $5; line[$4] = $0 }
                END {
                    pass = 0; skip = 0; fail = 0; miss = 0; why = ""
                    for (i = 1; i <= n; i++) {
                        s = st[m[i]]
                        if (s == "PASS") pass++
                        else if (s == "SKIP") { skip++; if (why == "") { why = line[m[i]]
                            sub(/^run_modes: [^ ]+ [^ ]+ [^ ]+ SKIP /, "", why) } }
                        else if (s == "FAIL") fail++
                        else miss++
                    }
                    if (fail || (miss && !(cut && (rc == 124 || rc == 137))))
                        print "FAIL"
                    else if (miss)
                        print "SKIP cut short by the budget"
                    else if (skip == n)
                        print "SKIP " why
                    else
                        print "PASS"
                }')
            _key=$(echo "$_lines" | awk '
                NF >= 5 {
                    k = $4 " " $5
                    for (i = 6; i <= NF; i++) {
                        split($i, kv, "=")
                        if (kv[1] == "err") k = k " err " kv[2]
                        if (kv[1] == "ms") { ms = kv[2]; k = k " " ms " ms" }
                        if (kv[1] == "kern" && kv[2] != "-" && kv[2] > 0)
                            k = k sprintf(" x%.2f", ms / kv[2])
                        if (kv[1] == "waits" && kv[2] != "-") k = k " waits/a2a " kv[2]
                    }
                    if ($5 == "SKIP") k = $4 " SKIP"
                    if ($5 == "FAIL" && $6 !~ /=/) { k = $0; sub(/^run_modes: /, "", k) }
                    print k
                }' | join)
            case $_st in # (the step's seconds on its first line only)
            PASS) record "$_name" PASS "$_key" ;;
            SKIP*) record "$_name" SKIP "${_st#SKIP }" ;;
            *)
                [ -n "$_key" ] || _key="no result: run_modes ended with exit $rc: $(grep -v \
                    '^ *$' "$_log" 2>/dev/null | tail -n 1 | cut -c1-120)"
                record "$_name" FAIL "$_key"
                ;;
            esac
            secs=0.0
        done
    done
}

# the bundled Open MPI works before any GPU time is spent: every mode on 2 CPU ranks
if [ -n "$rmodes" ]; then
    # shellcheck disable=SC2086
    step cpu-2rank 60 mpirun -np 2 "$rmodes" --backend cpu --dtypes fp32 $run_args \
        --iters 1 --warmup 0
    modes_verdicts cpu-2rank "$L/cpu-2rank.log" fwd fp32
else
    record cpu-2rank-fwd-fp32 FAIL "not built: $B/tests/gpu/run_modes"
fi

# ----------------------------------------------------------------- the GPU tests
gpu_seen=unknown
# gpu_test NAME LIMIT: a missing test fails its step and the run goes on; the first test that
# says "no CUDA device" (exit 77) ends the run: nothing after it can run without a GPU.
gpu_test() {
    if [ ! -x "$B/tests/gpu/$1" ]; then
        secs=0.0
        record "$1" FAIL "not built: $B/tests/gpu/$1 (no CUDA kernels in this build?)"
        return
    fi
    step "$1" "$2" "$B/tests/gpu/$1"
    if [ "$rc" = 77 ] && [ "$gpu_seen" = unknown ]; then
        record "$1" SKIP "no GPU found: $(head -1 "$L/$1.log")"
        echo "$me: no GPU found: the GPU steps did not run (report: $R/report.txt)"
        header "total $(($(date +%s) - start)) s, $passed passed, $failed failed," \
            "$skipped skipped; stopped: no GPU"
        exit 77
    fi
    [ "$rc" = 77 ] || gpu_seen=yes
    verdict "$1" "$(grep -e 'device 0' -e 'checks,' -e 'difference / bound' "$L/$1.log" |
        join | cut -c1-400)"
}
gpu_test test_kernels 150
gpu_test test_run_cuda 120

# ----------------------------------------------------------------- moe-run --check on the GPU
# one mpirun per rank count runs every mode, forward and training, fp32 and bf16: 1 rank on
# NCCL; 2 ranks sharing the GPU over --comm mpi (NCCL allows one rank a GPU). A training run
# takes one step, which --check replays on the serial reference on the host (SKIP with
# run_modes' reason for a backend without the training operations).
for np in 1 2; do
    comm=nccl
    [ "$np" = 1 ] || comm=mpi
    if [ -z "$rmodes" ]; then
        for k in fwd train; do
            for dt in fp32 bf16; do
                secs=0.0
                record "gpu-${np}rank-$k-$dt" FAIL "not built: $B/tests/gpu/run_modes"
            done
        done
        continue
    fi
    # shellcheck disable=SC2086
    step "gpu-${np}rank" 180 mpirun -np "$np" "$rmodes" --backend cuda --comm "$comm" --train \
        $run_args
    modes_verdicts "gpu-${np}rank" "$L/gpu-${np}rank.log" "fwd train" "fp32 bf16"
done

# ----------------------------------------------------------------- benchmarks
step bench-gpu 180 make -C "$B" bench-gpu
cp "$L/bench-gpu.log" "$R/bench.txt"
# key: each dtype's fractions of the baselines (expert FFN vs dense GEMM, permute and combine vs
# the device copy)
verdict bench-gpu "$(awk '/^# dtype/ { dt = $3; sub(",", "", dt) }
    /^[a-z]/ && NF >= 4 && $NF ~ /^[0-9.]+$/ && $0 !~ /baseline/ {
        printf "%s%s %s=%s", sep, dt, $1, $NF; sep = "; " }' "$L/bench-gpu.log")"
if [ -f "$SRC/bench/bench_torch.py" ]; then
    # (timeout runs programs: the machine's environment as env's arguments)
    if [ -n "$machine_ld" ]; then
        set -- env LD_LIBRARY_PATH="$machine_ld_path"
    else
        set -- env -u LD_LIBRARY_PATH
    fi
    step bench-torch 120 "$@" python3 "$SRC/bench/bench_torch.py" --moeflow "$L/bench-gpu.log"
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
        if [ ! -x "$B/tests/gpu/$t" ]; then
            secs=0.0
            record "$s" FAIL "not built: $B/tests/gpu/$t"
            continue
        fi
        step "$s" 150 "$B/libtool" --mode=execute "$san" --tool "$tool" --error-exitcode 86 \
            "$B/tests/gpu/$t"
        verdict "$s" "$(grep -o 'ERROR SUMMARY: .*' "$L/$s.log" | tail -1)"
    done
done

secs=$(awk -v a="$start" -v b="$(date +%s)" 'BEGIN { printf "%.1f", b - a }')
header "total $secs s, $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] || exit 1
exit 0
