# tests/cli/run_lib.sh -- sourced by the moe-run tests after lib.sh: mpirun as root, the
# DeepSeek trace cut to a few hundred tokens, a moe-place placement for 8 ranks in 2 nodes.
# Skips (77) without mpirun, without an MPI build of moe-run, or without ../shared.

MPIRUN=$(command -v mpirun 2>/dev/null) || { echo "skip: mpirun not found"; exit 77; }
"$MOE_BIN/moe-run" --version | grep -q '(MPI)' || { echo "skip: moe-run without MPI"; exit 77; }
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
# Under LeakSanitizer: Open MPI's own allocations are suppressed by frame (tests/lsan.supp); keep
# its plugins loaded and unwind without frame pointers so that those frames are known.
OMPI_MCA_mca_base_component_disable_dlclose=1
# The slow unwinder runs on every allocation of every rank: it made the sanitizer build's large
# MPI cases (eight ranks replaying a trace, killed ranks) most of the suite's time. Those run
# through mpi_noleak (ASan still checks every access); the other cases, every mode included,
# check for leaks.
NOLEAK_ENV="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 LSAN_OPTIONS=$LSAN_OPTIONS"
LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0
export OMPI_MCA_mca_base_component_disable_dlclose LSAN_OPTIONS

# moe-run warns when OpenBLAS picked kernels older than the CPU's and names the
# OPENBLAS_CORETYPE that fixes it (moe-run(1)); take the fix, so that stderr holds only what a
# case checks (a core set by the caller stays, and silences the warning).
if [ -z "${OPENBLAS_CORETYPE+x}" ]; then
    _ct=$("$MOE_BIN/moe-run" --layers 1 --experts 2 --topk 1 --tokens-per-rank 2 --hidden 8 \
        --ffn 8 --iters 1 --warmup 0 2>&1 >/dev/null |
        sed -n 's/.*set OPENBLAS_CORETYPE=\([A-Za-z0-9]*\).*/\1/p')
    if [ -n "$_ct" ]; then
        OPENBLAS_CORETYPE=$_ct
        export OPENBLAS_CORETYPE
    fi
fi

# mpi NP ARGS...: moe-run on NP ranks (a hung job is killed after 120 s). Not under
# MOE_VALGRIND: Open MPI's shared-memory transport is not memcheck-clean; the ASan build
# checks moe-run's memory instead.
mpi() {
    _np=$1
    shift
    timeout -k 5 120 "$MPIRUN" --oversubscribe -np "$_np" "$MOE_BIN/moe-run" "$@"
}
# mpi_noleak NP ARGS...: the same without LeakSanitizer (a no-op in other builds).
mpi_noleak() {
    _np=$1
    shift
    # shellcheck disable=SC2086
    env $NOLEAK_ENV timeout -k 5 120 "$MPIRUN" --oversubscribe -np "$_np" "$MOE_BIN/moe-run" "$@"
}

# run_data N: $T/ds.mft = the first N tokens of the DeepSeek trace, $T/p8.moep = an affinity
# placement for 8 ranks (2 nodes x 4) fitted on them.
run_data() {
    _ds=${MOE_SHARED:-$top_srcdir/../shared}/traces/deepseek-v2-lite-chat
    [ -f "$_ds/tokens.txt.gz" ] || { echo "skip: $_ds not found"; exit 77; }
    "$MOE_BIN/moe-trace" import --no-PG -q --meta "$_ds/tokens.meta.txt.gz" -o "$T/all.mft" \
        "$_ds/tokens.txt.gz" || exit 99
    "$MOE_BIN/moe-trace" head --no-PG -n "$1" -o "$T/ds.mft" "$T/all.mft" || exit 99
    "$MOE_BIN/moe-place" fit --no-PG --ranks 8 --gpus-per-node 4 --method affinity \
        -o "$T/p8.moep" "$T/ds.mft" || exit 99
}

# json_list FILE KEY: the numbers of every "KEY": N in a JSON file, one a line.
json_list() {
    tr ',{}' '\n\n\n' <"$1" | sed -n "s/^ *\"$2\": \([-0-9.e+]*\) *\$/\1/p"
}
