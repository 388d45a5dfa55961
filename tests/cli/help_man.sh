#!/bin/sh
# tests/cli/help_man.sh -- every long option in the --help texts is documented in the man page,
# and every option the man page documents exists; --help/--version/bad-option conventions.
set -u
bin=${MOE_BIN:?}/moe-trace
man=${top_srcdir:?}/man/moe-trace.1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

subs=$("$bin" --help | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on=0}')
[ -n "$subs" ] || fail "no subcommands listed by moe-trace --help"

# --help goes to stdout with status 0; collect the long options of every help text.
: >"$tmp/help"
for s in "" $subs; do
    # shellcheck disable=SC2086
    if ! "$bin" $s --help >"$tmp/out" 2>"$tmp/err"; then fail "moe-trace $s --help: status"; fi
    [ -s "$tmp/out" ] || fail "moe-trace $s --help: nothing on stdout"
    [ -s "$tmp/err" ] && fail "moe-trace $s --help: wrote to stderr"
    grep -o -- '--[a-zA-Z][-a-zA-Z]*' "$tmp/out" >>"$tmp/help"
    # A bad option: one line plus the hint, status 2.
    # shellcheck disable=SC2086
    "$bin" $s --no-such-option >/dev/null 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] || fail "moe-trace $s --no-such-option: status $rc, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 2 ] || fail "moe-trace $s --no-such-option: not two lines"
    hint="Try 'moe-trace${s:+ $s} --help' for more information."
    [ "$(tail -n 1 "$tmp/err")" = "$hint" ] || fail "moe-trace $s: missing hint '$hint'"
done
sort -u "$tmp/help" >"$tmp/help.sorted"

# Long options the man page documents (\-\-name in roff source).
grep -o '\\-\\-[a-zA-Z][-a-zA-Z]*' "$man" | sed 's/\\-\\-/--/' | sort -u >"$tmp/man.sorted"

missing=$(comm -23 "$tmp/help.sorted" "$tmp/man.sorted")
[ -z "$missing" ] || fail "in --help but not in moe-trace.1: $(echo $missing)"
extra=$(comm -13 "$tmp/help.sorted" "$tmp/man.sorted")
[ -z "$extra" ] || fail "in moe-trace.1 but in no --help: $(echo $extra)"

# --version: "moe-trace (moeflow) X.Y.Z", then the library and the features.
"$bin" --version >"$tmp/out" || fail "--version status"
head -n 1 "$tmp/out" | grep -Eq '^moe-trace \(moeflow\) [0-9]+\.[0-9]+\.[0-9]+$' ||
    fail "--version first line: $(head -n 1 "$tmp/out")"
grep -q '^features: .*zlib' "$tmp/out" || fail "--version lacks the features line"

n=$(wc -l <"$tmp/help.sorted")
[ "$status" -eq 0 ] && echo "help_man: $n long options agree between --help and moe-trace.1"
exit $status
