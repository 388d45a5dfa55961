#!/bin/sh
# tests/cli/help_man_affinity.sh -- moe-affinity's --help texts against its parser and its man
# page, mode by mode: every option a --help lists is accepted by that mode, every option the
# man page's section of a mode names is in that mode's --help (and the other way round for
# the table mode's OPTIONS section); --help/--version/bad-option conventions of each mode.
# (tests/cli/help_man.sh checks the union of all options of every tool.)
set -u
: "${MOE_BIN:?}" "${top_srcdir:?}"
bin=$MOE_BIN/moe-affinity
man=$top_srcdir/man/moe-affinity.1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# A valid argument for each option that takes one.
arg_of() {
    case $1 in
    --hops | --levels) echo 2 ;;
    --seed | --threads | --level | --layer | --pair) echo 1 ;;
    --window) echo 64 ;;
    --by-step) echo 1 ;;
    --png) echo "$tmp/x.png" ;;
    --svg) echo "$tmp/x.svg" ;;
    --plot) echo grid ;;
    --kernel) echo auto ;;
    --output) echo "$tmp/out" ;;
    --output-fmt) echo t ;;
    *) echo "" ;;
    esac
}

# Long options of a --help text, with "=" when the text shows them taking an argument (an
# option also named in prose without its argument is listed once, with the "=").
help_opts() {
    grep -o -- '--[a-z][-a-zA-Z0-9]*=\{0,1\}' "$1" | sort -u >"$tmp/opts"
    grep '=$' "$tmp/opts" | sed 's/=$//' >"$tmp/witharg"
    grep -v '=$' "$tmp/opts" | grep -vxF -f "$tmp/witharg"
    grep '=$' "$tmp/opts"
}

# Long options named in the man page between two patterns (roff \-\- escapes).
man_opts() {
    sed -n "/$1/,/$2/p" "$man" | grep -o '\\-\\-[a-zA-Z][-a-zA-Z0-9]*' | sed 's/\\-\\-/--/' |
        sort -u
}

for mode in "" converge compare; do
    label="moe-affinity${mode:+ $mode}"
    # shellcheck disable=SC2086
    "$bin" $mode --help >"$tmp/help" 2>"$tmp/err" || fail "$label --help: status $?"
    [ -s "$tmp/err" ] && fail "$label --help wrote to stderr"
    head -n 1 "$tmp/help" | grep -q "^Usage: moe-affinity${mode:+ $mode} " ||
        fail "$label --help: first line $(head -n 1 "$tmp/help")"
    # shellcheck disable=SC2086
    "$bin" $mode --version >"$tmp/ver" || fail "$label --version: status"
    head -n 1 "$tmp/ver" | grep -Eq '^moe-affinity \(moeflow\) [0-9]+\.[0-9]+\.[0-9]+$' ||
        fail "$label --version: $(head -n 1 "$tmp/ver")"
    # shellcheck disable=SC2086
    "$bin" $mode --no-such-option >/dev/null 2>"$tmp/err"
    [ $? -eq 2 ] || fail "$label --no-such-option: status is not 2"
    [ "$(tail -n 1 "$tmp/err")" = "Try '$label --help' for more information." ] ||
        fail "$label: no hint after a bad option"

    # every listed option parses in this mode (given before --help, it is parsed first)
    help_opts "$tmp/help" | while read -r o; do
        name=${o%=}
        [ "$name" = --help ] || [ "$name" = --version ] && continue
        if [ "$name" != "$o" ]; then
            # shellcheck disable=SC2086
            "$bin" $mode "$name=$(arg_of "$name")" --help >/dev/null 2>"$tmp/err" ||
                echo "$name"
        else
            # shellcheck disable=SC2086
            "$bin" $mode "$name" --help >/dev/null 2>"$tmp/err" || echo "$name"
        fi
    done >"$tmp/rejected"
    [ -s "$tmp/rejected" ] && fail "$label rejects options its --help lists: $(cat "$tmp/rejected" | tr '\n' ' ')"
    help_opts "$tmp/help" | sed 's/=$//' | sort -u >"$tmp/help.$mode"
done

# The man page's sections of the modes name only options of those modes.
man_opts '^\.SS "converge' '^\.SS "compare' >"$tmp/man.converge"
man_opts '^\.SS "compare' '^\.SH OUTPUT' >"$tmp/man.compare"
man_opts '^\.SH OPTIONS' '^\.SH COMMANDS' >"$tmp/man.table"
for mode in converge compare; do
    # the sections say that --no-PG does not apply to them
    extra=$(comm -23 "$tmp/man.$mode" "$tmp/help.$mode" | grep -v -x -e --no-PG)
    [ -z "$extra" ] || fail "man page section '$mode' names options $mode does not take: $(echo $extra)"
done
missing=$(comm -13 "$tmp/man.table" "$tmp/help.")
[ -z "$missing" ] || fail "options of moe-affinity --help missing from OPTIONS: $(echo $missing)"
extra=$(comm -23 "$tmp/man.table" "$tmp/help.")
[ -z "$extra" ] || fail "OPTIONS names options moe-affinity --help lacks: $(echo $extra)"

[ "$status" -eq 0 ] && echo "help_man_affinity: --help, parser and man page agree for the table mode, converge and compare"
exit $status
