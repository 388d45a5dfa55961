# tests/cli/lib.sh -- sourced by the CLI tests: the tool wrapper, a scratch directory, assertions
# and golden files. POSIX sh.
#
# Environment (set by `make check`): MOE_BIN (directory of moe-trace), top_srcdir, top_builddir,
# LC_ALL=C; optional MOE_VALGRIND, a command prefix wrapped around every moe-trace run, and
# UPDATE=1 to rewrite the golden files instead of comparing with them.
#
# A test is a series of cases:  begin "what"; <commands and checks>; end
# Checks record failures and go on; `finish` prints the summary and exits 0, 1, or 77 (skip).

set -u
LC_ALL=C
export LC_ALL

if [ -z "${MOE_BIN:-}" ] || [ ! -x "$MOE_BIN/moe-trace" ]; then
    echo "MOE_BIN must name the directory holding moe-trace (got '${MOE_BIN:-}')" >&2
    exit 99
fi
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
MOE_VALGRIND=${MOE_VALGRIND:-}
GOLDEN_DIR=$top_srcdir/tests/cli/golden
DATA_DIR=$top_srcdir/tests/data

T=$(mktemp -d "${TMPDIR:-/tmp}/moe-cli.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT
trap 'exit 130' HUP INT TERM

failures=0
ncases=0
case_name=
case_failed=0
rc=0

# In a libtool build $MOE_BIN/moe-trace is a wrapper script; valgrind must run the real
# program, which `libtool --mode=execute` substitutes for the wrapper.
moe_libtool=
if [ -n "$MOE_VALGRIND" ] && [ -x "${top_builddir:-.}/libtool" ] &&
    grep -q 'wrapper script' "$MOE_BIN/moe-trace" 2>/dev/null; then
    moe_libtool=${top_builddir:-.}/libtool
fi

# moe_tool TOOL ARGS...: run $MOE_BIN/TOOL (through $MOE_VALGRIND when set).
moe_tool() {
    _tool=$1
    shift
    if [ -n "$moe_libtool" ]; then
        "$moe_libtool" --mode=execute $MOE_VALGRIND "$MOE_BIN/$_tool" "$@"
    else
        $MOE_VALGRIND "$MOE_BIN/$_tool" "$@"
    fi
}

# moe ARGS...: run moe-trace.
moe() { moe_tool moe-trace "$@"; }

# moe_within SECONDS ARGS...: moe-trace killed after SECONDS (status 124), for inputs that once
# made it run for hours: such a case fails instead of hanging the suite.
moe_within() {
    _secs=$1
    shift
    if [ -n "$moe_libtool" ]; then
        "$moe_libtool" --mode=execute timeout -k 2 "$_secs" $MOE_VALGRIND "$MOE_BIN/moe-trace" \
            "$@"
    else
        timeout -k 2 "$_secs" $MOE_VALGRIND "$MOE_BIN/moe-trace" "$@"
    fi
}

begin() {
    case_name=$1
    case_failed=0
    case_start=$(date +%s)
    ncases=$((ncases + 1))
}

# fail MESSAGE: record a failed check of the current case.
fail() {
    echo "  FAIL [$case_name]: $*"
    case_failed=1
    failures=$((failures + 1))
}

end() {
    # The seconds a case took, so that a slow case shows in the test's log.
    case_took="($(($(date +%s) - ${case_start:-$(date +%s)})) s)"
    if [ "$case_failed" = 0 ]; then
        echo "ok - $case_name $case_took"
    else
        echo "not ok - $case_name $case_took"
    fi
}

skip_case() {
    echo "skip - $case_name: $*"
}

# finish: summary line and exit status.
finish() {
    echo "$ncases cases, $failures failed checks"
    [ "$failures" = 0 ] || exit 1
    exit 0
}

# run CMD...: run a command with stdout in $T/out and stderr in $T/err; status in $rc.
run() {
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
}

# expect_exit CODE CMD...: run and check the exit status (stderr shown on a mismatch).
expect_exit() {
    _want=$1
    shift
    run "$@"
    if [ "$rc" != "$_want" ]; then
        fail "exit $rc, expected $_want: $*"
        sed 's/^/    stderr: /' "$T/err" | head -5
    fi
}

# tool_err: $errf names the stderr of the last run without valgrind's own report lines
# ('==PID== ...'; memory errors and definite leaks already show as exit status 99): $T/err
# itself, or a filtered copy $T/err.tool under valgrind.
tool_err() {
    if [ -n "$MOE_VALGRIND" ]; then
        grep -v '^==[0-9]*==' "$T/err" >"$T/err.tool"
        errf=$T/err.tool
    else
        errf=$T/err
    fi
}

# The checks below read stderr with shell built-ins only: the error tests run thousands of them,
# and a fork costs more than the tool run it checks.

# expect_tool_err_line TOOL [SUBSTRING]: stderr of the last run is exactly one line (ended by a
# newline) starting with 'TOOL: ' (and containing SUBSTRING).
expect_tool_err_line() {
    _xt=$1
    shift
    tool_err
    _x1= _x2=
    if ! { IFS= read -r _x1 && ! IFS= read -r _x2 && [ -z "$_x2" ]; } <"$errf"; then
        fail "expected one line on stderr, got $(wc -l <"$errf" | tr -d ' ') lines" \
            "($(wc -c <"$errf" | tr -d ' ') bytes)"
        sed 's/^/    stderr: /' "$T/err" | head -5
        return
    fi
    case $_x1 in
    "$_xt: "*) ;;
    *) fail "stderr does not start with '$_xt: ': $_x1" ;;
    esac
    if [ $# -gt 0 ]; then
        case $_x1 in
        *"$1"*) ;;
        *) fail "stderr lacks '$1': $_x1" ;;
        esac
    fi
}

# expect_tool_usage TOOL SUBCOMMAND [SUBSTRING]: stderr is a 'TOOL: ' line (containing
# SUBSTRING) and the hint "Try 'TOOL SUBCOMMAND --help' ...".
expect_tool_usage() {
    _xt=$1 _xh="Try '$1${2:+ $2} --help' for more information."
    tool_err
    _x1= _x2= _x3=
    if ! { IFS= read -r _x1 && IFS= read -r _x2 && ! IFS= read -r _x3 && [ -z "$_x3" ]; } \
        <"$errf" || [ "$_x2" != "$_xh" ]; then
        fail "expected a usage error and the hint \"$_xh\""
        sed 's/^/    stderr: /' "$T/err" | head -5
        return
    fi
    case $_x1 in
    "$_xt: "*) ;;
    *) fail "stderr does not start with '$_xt: ': $_x1" ;;
    esac
    if [ $# -gt 2 ]; then
        case $_x1 in
        *"$3"*) ;;
        *) fail "stderr lacks '$3': $_x1" ;;
        esac
    fi
}

# expect_err_line [SUBSTRING]: one 'moe-trace: ' line (containing SUBSTRING).
expect_err_line() { expect_tool_err_line moe-trace "$@"; }

# expect_usage_error SUBCOMMAND: a 'moe-trace: ' line plus the --help hint.
expect_usage_error() { expect_tool_usage moe-trace "${1:-}"; }

expect_no_stderr() {
    tool_err
    if [ -s "$errf" ]; then
        fail "unexpected stderr output"
        sed 's/^/    stderr: /' "$T/err" | head -5
    fi
}

expect_no_stdout() {
    if [ -s "$T/out" ]; then
        fail "unexpected stdout output ($(wc -c <"$T/out" | tr -d ' ') bytes)"
    fi
}

# expect_no_output PATH: neither PATH nor a temporary PATH.tmp* exists.
expect_no_output() {
    for _f in "$1" "$1".tmp*; do
        if [ -e "$_f" ]; then
            fail "output left behind: $_f"
        fi
    done
}

# same_file A B [WHAT]: byte-identical files.
same_file() {
    if ! cmp -s "$1" "$2"; then
        fail "${3:-files differ}: $1 vs $2"
        if grep -Iq . "$1" && grep -Iq . "$2"; then
            diff "$1" "$2" | head -6 | sed 's/^/    /'
        fi
    fi
}

differ_file() {
    if cmp -s "$1" "$2"; then
        fail "${3:-files should differ}: $1 vs $2"
    fi
}

# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
    if [ "$1" != "$2" ]; then
        fail "$3: got '$1', expected '$2'"
    fi
}

# golden NAME: stdout and exit status of the last run against tests/cli/golden/NAME.out
# (with UPDATE=1: rewrite that file).
golden() {
    { cat "$T/out"; echo "--- exit $rc"; } >"$T/golden.actual"
    if [ "${UPDATE:-0}" = 1 ]; then
        mkdir -p "$GOLDEN_DIR"
        cp "$T/golden.actual" "$GOLDEN_DIR/$1.out"
        echo "  updated $GOLDEN_DIR/$1.out"
    elif [ ! -f "$GOLDEN_DIR/$1.out" ]; then
        fail "missing golden file $GOLDEN_DIR/$1.out (run with UPDATE=1 to create it)"
    elif ! cmp -s "$T/golden.actual" "$GOLDEN_DIR/$1.out"; then
        fail "output differs from $GOLDEN_DIR/$1.out"
        diff "$GOLDEN_DIR/$1.out" "$T/golden.actual" | head -10 | sed 's/^/    /'
    fi
}

# tokens FILE: number of records of a trace (any format).
tokens() {
    moe view --no-header "$1" | wc -l | tr -d ' '
}

# stat_of FILE KEY: a value from `moe-trace stats` ("tokens", "sequences", ...).
stat_of() {
    moe stats "$1" | awk -v k="$2" '$1 == k { print $2 }'
}

have() {
    command -v "$1" >/dev/null 2>&1
}

file_size() {
    wc -c <"$1" | tr -d ' '
}
