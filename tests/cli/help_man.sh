#!/bin/sh
# tests/cli/help_man.sh -- interface conventions of every moeflow tool: --help on stdout with
# status 0, a bad option gives one line plus the "Try ... --help" hint with status 2, --version
# has the agreed form, and the long options of the --help texts are exactly those the tool's man
# page documents. Tools with subcommands ("Commands:" in --help) are checked per subcommand.
set -u
: "${MOE_BIN:?}" "${top_srcdir:?}"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

check_tool() {
    tool=$1
    bin=$MOE_BIN/$tool
    man=$top_srcdir/man/$tool.1
    [ -f "$man" ] || { fail "$tool: no man page man/$tool.1"; return; }
    subs=$("$bin" --help | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on=0}')
    : >"$tmp/help"
    for s in "" $subs; do
        label="$tool${s:+ $s}"
        # shellcheck disable=SC2086
        "$bin" $s --help >"$tmp/out" 2>"$tmp/err" || fail "$label --help: status $?"
        [ -s "$tmp/out" ] || fail "$label --help: nothing on stdout"
        [ -s "$tmp/err" ] && fail "$label --help: wrote to stderr"
        grep -o -- '--[a-zA-Z][-a-zA-Z]*' "$tmp/out" >>"$tmp/help"
        # shellcheck disable=SC2086
        "$bin" $s --no-such-option >/dev/null 2>"$tmp/err"
        rc=$?
        [ "$rc" -eq 2 ] || fail "$label --no-such-option: status $rc, expected 2"
        [ "$(wc -l <"$tmp/err")" -eq 2 ] || fail "$label --no-such-option: not two lines"
        head -n 1 "$tmp/err" | grep -q "^$tool: " || fail "$label: message lacks '$tool: '"
        hint="Try '$label --help' for more information."
        [ "$(tail -n 1 "$tmp/err")" = "$hint" ] || fail "$label: missing hint '$hint'"
    done
    sort -u "$tmp/help" >"$tmp/help.sorted"
    grep -o '\\-\\-[a-zA-Z][-a-zA-Z]*' "$man" | sed 's/\\-\\-/--/' | sort -u >"$tmp/man.sorted"
    missing=$(comm -23 "$tmp/help.sorted" "$tmp/man.sorted")
    [ -z "$missing" ] || fail "$tool: in --help but not in $tool.1: $(echo $missing)"
    extra=$(comm -13 "$tmp/help.sorted" "$tmp/man.sorted")
    [ -z "$extra" ] || fail "$tool: in $tool.1 but in no --help: $(echo $extra)"
    "$bin" --version >"$tmp/out" || fail "$tool --version: status"
    head -n 1 "$tmp/out" | grep -Eq "^$tool \\(moeflow\\) [0-9]+\\.[0-9]+\\.[0-9]+\$" ||
        fail "$tool --version first line: $(head -n 1 "$tmp/out")"
    grep -q '^features: .*zlib' "$tmp/out" || fail "$tool --version lacks the features line"
    echo "help_man: $tool: $(wc -l <"$tmp/help.sorted") long options agree with $tool.1"
}

n=0
for t in "$MOE_BIN"/moe-*; do
    name=$(basename "$t")
    case $name in *.*) continue ;; esac # objects, sources
    [ -f "$t" ] && [ -x "$t" ] || continue
    check_tool "$name"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "no tools found in $MOE_BIN"
exit $status
