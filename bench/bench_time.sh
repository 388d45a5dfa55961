# bench/bench_time.sh -- wall-clock timing of one command for the bench scripts, with as little
# around it as the shell allows, and the median of ratios. Sourced; works under `set -eu`.
#
# The bench scripts compare commands that run for tens of milliseconds, so what surrounds a
# command counts: reading the clock with date(1) around `sh -c CMD` added three processes and
# about 11 ms to every run on the 2-core CI machine, a fixed cost that drew every ratio towards 1.
# Under bash 5 the clock is $EPOCHREALTIME (no process) and the command runs through eval in
# this shell, so one fork and exec of the tool itself is all that is timed beside it. Other
# shells fall back to date(1) and say so.

# bench_use_bash "$0" "$@": re-run the calling script under bash when it runs under another
# shell and bash is installed.
bench_use_bash() {
    if [ -z "${BASH_VERSION:-}" ] && command -v bash >/dev/null 2>&1; then
        exec bash "$@"
    fi
}

# bench_clock: the method, for the report's header.
bench_clock() {
    if [ -n "${EPOCHREALTIME:-}" ]; then
        echo "bash EPOCHREALTIME around eval"
    else
        echo "date(1) around sh -c (adds a fixed cost to every run)"
    fi
}

# time_cmd CMD: run the shell command CMD (stdout to /dev/null) and set $ns to its wall time in
# nanoseconds.
time_cmd() {
    if [ -n "${EPOCHREALTIME:-}" ]; then
        _t0=$EPOCHREALTIME
        eval "$1" >/dev/null
        _t1=$EPOCHREALTIME
        # seconds.microseconds (the locale's decimal point): bash's substitution, as this
        # branch only runs under bash
        ns=$(((${_t1/[.,]/} - ${_t0/[.,]/}) * 1000))
    else
        _t0=$(date +%s%N)
        sh -c "$1" >/dev/null
        _t1=$(date +%s%N)
        ns=$((_t1 - _t0))
    fi
}

# bench_median: the median of the numbers on standard input, one a line, with two decimals
# (sorted in the C locale, whatever the caller's).
bench_median() {
    LC_ALL=C sort -g | awk '{ v[NR] = $1 } END {
        printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
