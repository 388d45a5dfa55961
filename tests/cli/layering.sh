#!/bin/sh
# tests/cli/layering.sh -- no call or include circle between the files of a library part
# (issue 16): within each part listed in PARTS, the "calls a function defined in" relation
# between the built objects (nm) and the "includes" relation between the sources must both be
# acyclic (tsort finds no loop). Parts join PARTS as their circles are cut.

. "$(dirname "$0")/lib.sh"

command -v nm >/dev/null 2>&1 && command -v tsort >/dev/null 2>&1 || {
    echo "layering: nm or tsort not found: skipped"
    exit 77
}
PARTS=${MOE_LAYER_PARTS:-"trace affinity"}
: "${top_builddir:=.}"

# objects PART: the part's compiled objects (libtool's PIC copies when there are any).
objects() {
    _o=$(find "$top_builddir/lib/$1" -path '*/.libs/*.o' 2>/dev/null | sort)
    [ -n "$_o" ] || _o=$(find "$top_builddir/lib/$1" -name '*.o' 2>/dev/null | sort)
    echo "$_o"
}

# acyclic WHAT EDGES-FILE: tsort accepts the edges (pairs "from to", one a line).
acyclic() {
    if ! tsort "$2" >/dev/null 2>"$T/tsort.err"; then
        fail "$1: $(grep -v '^tsort: -:' "$T/tsort.err" | tr '\n' ' ')"
        sed 's/^/    edge: /' "$2" | head -40
    fi
}

for part in $PARTS; do
    begin "lib/$part: no call circle between its objects"
    objs=$(objects "$part")
    if [ -z "$objs" ]; then
        fail "no objects under $top_builddir/lib/$part (not built?)"
    else
        : >"$T/defs"
        for o in $objs; do
            nm -g --defined-only "$o" | awk -v f="$(basename "$o" .o)" \
                '$2 ~ /^[TDBRV]$/ { print $3, f }' >>"$T/defs"
        done
        sort "$T/defs" >"$T/defs.s"
        : >"$T/calls"
        for o in $objs; do
            f=$(basename "$o" .o)
            nm -u "$o" | awk '{ print $NF }' | sort -u | join - "$T/defs.s" |
                awk -v f="$f" '$2 != f { print f, $2 }' | sort -u >>"$T/calls"
        done
        acyclic "calls" "$T/calls"
    fi
    end

    begin "lib/$part: no include circle between its files"
    : >"$T/incl"
    for src in "$top_srcdir/lib/$part"/*.c "$top_srcdir/lib/$part"/*.h; do
        [ -f "$src" ] || continue
        b=$(basename "$src")
        sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src" | while read -r h; do
            [ -f "$top_srcdir/lib/$part/$h" ] && echo "$b $h"
        done >>"$T/incl"
    done
    acyclic "includes" "$T/incl"
    end
done

finish
