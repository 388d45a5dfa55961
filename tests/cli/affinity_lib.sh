# tests/cli/affinity_lib.sh -- sourced by the moe-affinity CLI tests after lib.sh: the tool
# wrapper and the checks of its error conventions. POSIX sh.

if [ ! -x "$MOE_BIN/moe-affinity" ]; then
    echo "MOE_BIN must hold moe-affinity (got '$MOE_BIN')" >&2
    exit 99
fi
AFF_DATA=$top_srcdir/tests/data/affinity

# aff ARGS...: run moe-affinity (through $MOE_VALGRIND when set).
aff() { moe_tool moe-affinity "$@"; }

# expect_aff_err_line [SUBSTRING]: stderr of the last run is exactly one line starting with
# 'moe-affinity: ' (and containing SUBSTRING).
expect_aff_err_line() { expect_tool_err_line moe-affinity "$@"; }

# expect_aff_usage_error [SUBCOMMAND]: a 'moe-affinity: ' line plus the --help hint.
expect_aff_usage_error() { expect_tool_usage moe-affinity "${1:-}"; }

# summary_of FILE KEY [COLUMN]: a value of `moe-affinity --summary` (2: real, 3: shuffled).
summary_of() {
    aff --summary "$1" | awk -v k="$2" -v c="${3:-2}" '$1 == k { print $c }'
}

# A python3 that can run the PNG/SVG checks, or empty.
PY=
if command -v python3 >/dev/null 2>&1 && python3 -c 'import zlib, xml.etree.ElementTree' \
    >/dev/null 2>&1; then
    PY=python3
fi
