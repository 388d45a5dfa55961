#!/bin/sh
# bench/bench_house.sh -- issue 44 acceptance 5: the tools' main workloads timed in paired runs
# of two builds, BEFORE and AFTER, and each workload's ratio AFTER / BEFORE (median, min, max
# over the pairs). Issue 44 reorganised the code without changing behaviour, so the ratios
# should sit within the noise of 1.
#
# Usage: sh bench/bench_house.sh [-n PAIRS] BEFORE AFTER
#   BEFORE, AFTER: a build tree (a directory holding cmd/moe-trace), or a commit of this
#   repository, which is then checked out with `git worktree add` under $MOE_BENCH_TREES
#   [${TMPDIR:-/tmp}/moeflow-bench] and built there (autoreconf, ../configure
#   $MOE_BENCH_CONFIGURE, make -j$MOE_BENCH_JOBS [2]); a tree already built is reused.
#   Issue 44's BEFORE is 8fa04a8, the parent of its first commit (5cf2ed8): e.g.
#     sh bench/bench_house.sh 8fa04a8 _build
#   -n PAIRS: rounds [$MOE_BENCH_REPS or 7]; each round runs both builds, the order swapped
#   every round (A B, B A, ...) so that a drift of the machine's speed hits both alike.
#
# Workloads, on ../shared/traces/deepseek-v2-lite-chat (94,165 tokens, 26 layers, top-6 of 64),
# all at -@ $MOE_BENCH_THREADS [0] (no additional threads) where the tool takes it:
#   import    moe-trace import of tokens.txt.gz (text groups) into a binary trace
#   stats     moe-trace stats of that trace
#   affinity  moe-affinity of that trace (the default table)
#   fit       moe-place fit --ranks 8 (default method, affinity) of its first 3,000 tokens,
#             --cv 0 --starts 2 (the default 4-fold check and 8 starts take minutes a run)
#   eval      moe-place eval of that placement on the whole trace
#   simulate  moe-costmodel simulate on h100-ndr400 (8 GPUs), hidden 2048 (the model's, bf16
#             by default), the same placement: no replicas, so issue 45's faster replica
#             choice does not enter; but AFTER also holds issue 45's other simulate changes
#             (0a32a23, each cell routed once), so this ratio is not issue 44's alone
#   run       mpirun -np 2 moe-run --mode vanilla, 2 layers of 8 experts top-2, hidden 256,
#             ffn 512, 1024 tokens a rank, 3 iterations after 1 warm-up
# The inputs are made once, with BEFORE's tools, so both builds read the same bytes. A column
# says whether the two builds' standard output (with times and version lines removed) is the
# same: not a verdict, since AFTER may hold other issues' changes.
# Time: 3 rounds took 2 min 54 s on a 2-core machine under a load of 7 to 15 (other builds);
# each further round adds about 30 s there.
# Needs bash for a cheap clock (bench_time.sh); mpirun for the run workload (else skipped).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/bench/bench_time.sh"
bench_use_bash "$0" "$@"

reps=${MOE_BENCH_REPS:-7}
if [ "${1:-}" = "-n" ]; then
    reps=${2:?-n takes a number}
    shift 2
fi
[ $# -eq 2 ] || { echo "usage: bench_house.sh [-n PAIRS] BEFORE AFTER" >&2; exit 2; }
case $reps in '' | *[!0-9]* | 0) echo "bench: -n takes a whole number above 0" >&2; exit 2 ;; esac
thr=${MOE_BENCH_THREADS:-0}
shared=${MOE_SHARED:-$here/../shared}
src=$shared/traces/deepseek-v2-lite-chat
[ -f "$src/tokens.txt.gz" ] || { echo "bench: $src/tokens.txt.gz not found" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# build_tree COMMIT: the build tree of COMMIT, checked out and built once; prints its path.
build_tree() {
    _c=$(git -C "$here" rev-parse --short "$1^{commit}") ||
        { echo "bench: $1 is neither a build tree nor a commit" >&2; return 2; }
    _w=${MOE_BENCH_TREES:-${TMPDIR:-/tmp}/moeflow-bench}/$_c
    if [ ! -x "$_w/_build/cmd/moe-trace" ]; then
        [ -d "$_w" ] || git -C "$here" worktree add -q --detach "$_w" "$_c" >&2
        echo "bench: building $_c in $_w/_build" >&2
        (cd "$_w" && autoreconf -fi >/dev/null 2>&1 && mkdir -p _build && cd _build &&
            # shellcheck disable=SC2086
            ../configure ${MOE_BENCH_CONFIGURE:-} >/dev/null &&
            make -j"${MOE_BENCH_JOBS:-2}" >/dev/null) >&2 ||
            { echo "bench: cannot build $_c in $_w" >&2; return 1; }
    fi
    echo "$_w/_build"
}

# tree ARG: the build tree ARG names (absolute).
tree() {
    if [ -x "$1/cmd/moe-trace" ]; then (cd "$1" && pwd); else build_tree "$1"; fi
}
tb=$(tree "$1")
ta=$(tree "$2")

# env_of TREE: the environment that runs TREE's programs themselves, not libtool's wrappers.
env_of() {
    echo "LD_LIBRARY_PATH='$1/lib/.libs'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
# prog TREE NAME: TREE's program NAME.
prog() {
    if [ -x "$1/cmd/.libs/$2" ]; then echo "$1/cmd/.libs/$2"; else echo "$1/cmd/$2"; fi
}
# run_in TREE NAME ARGS...: run TREE's NAME with TREE's libraries.
run_in() {
    _t=$1
    _n=$2
    shift 2
    LD_LIBRARY_PATH=$_t/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$(prog "$_t" "$_n")" "$@"
}

topo=$here/share/topologies/h100-ndr400.topo
echo "bench: making the inputs with $tb" >&2
run_in "$tb" moe-trace import --no-PG -o "$tmp/ds.moet" "$src/tokens.txt.gz"
run_in "$tb" moe-trace head -n 3000 -o "$tmp/ds3k.moet" "$tmp/ds.moet"
run_in "$tb" moe-place fit --no-PG --ranks 8 --cv 0 --starts 2 -o "$tmp/fit.moep" \
    "$tmp/ds3k.moet" 2>/dev/null

# cmd_of WORKLOAD TREE TAG: the shell command of WORKLOAD with TREE's programs (outputs that
# are files go to names with TAG, so the two builds never share one).
cmd_of() {
    _e=$(env_of "$2")
    case $1 in
    import) echo "$_e '$(prog "$2" moe-trace)' import --no-PG -o '$tmp/imp.$3.moet' \
'$src/tokens.txt.gz'" ;;
    stats) echo "$_e '$(prog "$2" moe-trace)' stats -@ $thr '$tmp/ds.moet'" ;;
    affinity) echo "$_e '$(prog "$2" moe-affinity)' -@ $thr '$tmp/ds.moet'" ;;
    fit) echo "$_e '$(prog "$2" moe-place)' fit --no-PG --ranks 8 --cv 0 --starts 2 -@ $thr \
-o '$tmp/fit.$3.moep' '$tmp/ds3k.moet' 2>/dev/null" ;;
    eval) echo "$_e '$(prog "$2" moe-place)' eval -@ $thr '$tmp/fit.moep' '$tmp/ds.moet'" ;;
    simulate) echo "$_e '$(prog "$2" moe-costmodel)' simulate -@ $thr --no-layers \
--hidden 2048 --topology '$topo' '$tmp/ds.moet' '$tmp/fit.moep'" ;;
    run) echo "mpirun -np 2 -x LD_LIBRARY_PATH=\"$2/lib/.libs\" '$(prog "$2" moe-run)' \
--mode vanilla --layers 2 --experts 8 --topk 2 --hidden 256 --ffn 512 \
--tokens-per-rank 1024 --iters 3 --warmup 1" ;;
    esac
}

# same_out WORKLOAD: "same" when both builds print the same (files written compared too),
# leaving out lines that hold times or versions.
same_out() {
    eval "$(cmd_of "$1" "$tb" b)" >"$tmp/out.b" 2>/dev/null || echo "exit $?" >>"$tmp/out.b"
    eval "$(cmd_of "$1" "$ta" a)" >"$tmp/out.a" 2>/dev/null || echo "exit $?" >>"$tmp/out.a"
    _ok=same
    _filt='/ms\b|[0-9] s\b|seconds|time|version|moeflow [0-9]|GFLOP|rate|@PG/d'
    sed -E "$_filt" "$tmp/out.b" >"$tmp/cmp.b"
    sed -E "$_filt" "$tmp/out.a" >"$tmp/cmp.a"
    cmp -s "$tmp/cmp.b" "$tmp/cmp.a" || _ok=differs
    case $1 in
    import) cmp -s "$tmp/imp.b.moet" "$tmp/imp.a.moet" || _ok=differs ;;
    fit) cmp -s "$tmp/fit.b.moep" "$tmp/fit.a.moep" || _ok=differs ;;
    run) _ok=- ;; # measured times only
    esac
    echo "$_ok"
}

# median3: the median of the numbers on standard input, one a line, with three decimals.
median3() {
    LC_ALL=C sort -g | awk '{ v[NR] = $1 } END {
        printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

loads=$(awk '{ print $1 }' /proc/loadavg 2>/dev/null || echo "?")
echo "# moeflow bench_house: AFTER / BEFORE, $reps paired rounds a workload (order swapped"
echo "# each round)"
# commit_of TREE: the commit TREE was configured from (its source tree's HEAD, + if modified).
commit_of() {
    _s=$(sed -n 's/^abs_top_srcdir = //p' "$1/Makefile" 2>/dev/null)
    _h=$(git -C "${_s:-.}" log -1 --format='%h %s' 2>/dev/null | cut -c1-60) || _h="?"
    git -C "${_s:-.}" diff --quiet HEAD 2>/dev/null || _h="$_h (+ changes)"
    echo "$_h"
}
echo "# BEFORE: $tb, $(commit_of "$tb")"
echo "# AFTER:  $ta, $(commit_of "$ta")"
echo "# machine: $(nproc) cores, $(uname -m), load $loads at the start; -@ $thr"
echo "# timing: $(bench_clock); seconds are medians of wall time, ratios per pair"
printf '%-9s %10s %10s %8s %8s %8s %8s\n' "# work" before_s after_s ratio min max output
for w in import stats affinity fit eval simulate run; do
    if [ "$w" = run ] && ! command -v mpirun >/dev/null 2>&1; then
        echo "run       skipped: no mpirun"
        continue
    fi
    cb=$(cmd_of "$w" "$tb" b)
    ca=$(cmd_of "$w" "$ta" a)
    out=$(same_out "$w")
    : >"$tmp/pairs"
    i=0
    while [ "$i" -lt "$reps" ]; do
        if [ $((i % 2)) -eq 0 ]; then
            time_cmd "$cb"
            nb=$ns
            time_cmd "$ca"
            na=$ns
        else
            time_cmd "$ca"
            na=$ns
            time_cmd "$cb"
            nb=$ns
        fi
        echo "$nb $na" >>"$tmp/pairs"
        i=$((i + 1))
    done
    mb=$(awk '{ print $1 / 1e9 }' "$tmp/pairs" | median3)
    ma=$(awk '{ print $2 / 1e9 }' "$tmp/pairs" | median3)
    mr=$(awk '{ print $2 / $1 }' "$tmp/pairs" | median3)
    lo=$(awk '{ print $2 / $1 }' "$tmp/pairs" | LC_ALL=C sort -g | head -n 1)
    hi=$(awk '{ print $2 / $1 }' "$tmp/pairs" | LC_ALL=C sort -g | tail -n 1)
    printf '%-9s %10s %10s %8s %8.3f %8.3f %8s\n' "$w" "$mb" "$ma" "$mr" "$lo" "$hi" "$out"
done
