#!/bin/sh
# tests/cli/lint_picture.sh -- build-aux/lint-picture.sh (also `make lint`) holds
# doc/architecture.dot to the include graph: the real tree passes; a copy whose picture lacks
# an arrow the sources use, draws one no source uses, or names a shared piece that is not flat
# in lib/ fails, naming each finding.
. "$(dirname "$0")/lib.sh"

LINT=$top_srcdir/build-aux/lint-picture.sh

begin "the real tree: the picture agrees with the includes"
expect_exit 0 sh "$LINT" "$top_srcdir"
end

begin "the tree named by a relative path, as make lint in a build tree names it"
abs=$(cd "$top_srcdir" && pwd -P)
(cd "$abs/.." && sh "$abs/build-aux/lint-picture.sh" "$(basename "$abs")") >"$T/out" 2>&1 ||
    fail "relative SRCDIR: $(head -n 3 "$T/out")"
end

# a copy of the sources the script reads, with the picture edited
cp_tree() {
    rm -rf "$T/src"
    mkdir -p "$T/src/doc"
    cp -R "$top_srcdir/lib" "$top_srcdir/cmd" "$top_srcdir/kernels" "$T/src/"
    sed "$1" "$top_srcdir/doc/architecture.dot" >"$T/src/doc/architecture.dot"
}

begin "an arrow the sources need is missing: the use and the including file named"
cp_tree 's/ run -> cost;//'
expect_exit 1 sh "$LINT" "$T/src"
grep -q '^lint-picture: use run -> cost (lib/run/[a-z_]*\.c includes moe/cost\.h)' "$T/out" ||
    fail "run -> cost not reported: $(cat "$T/out")"
end

begin "an arrow no source uses: stale"
cp_tree 's/^    trace -> shared;/    trace -> shared; trace -> cost;/'
expect_exit 1 sh "$LINT" "$T/src"
grep -qx 'lint-picture: stale arrow trace -> cost' "$T/out" || fail "no stale arrow: $(cat "$T/out")"
end

begin "a shared piece that lives elsewhere (kern.c is run/'s)"
cp_tree 's/json_tok\.c  plot\.c"/json_tok.c  plot.c  kern.c"/'
expect_exit 1 sh "$LINT" "$T/src"
grep -q '^lint-picture: missing file kern.c (of the shared pieces' "$T/out" ||
    fail "kern.c not reported: $(cat "$T/out")"
end

finish
