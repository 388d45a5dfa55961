#!/bin/sh
# tests/cli/run_layers.sh -- libmoerun's layering (lib/run/README): no two of its .c files call
# each other, directly or round a longer loop (nm over the built objects: a file's undefined
# symbols resolved against the others' definitions), no include loop among its headers, and
# the library never exits and never writes to stdout/stderr itself (issue 16, item 3).
. "${top_srcdir:-.}/tests/cli/lib.sh"

command -v nm >/dev/null 2>&1 || { echo "skip: nm not found"; exit 77; }
objs=
for o in "$top_builddir"/lib/run/.libs/libmoerun_la-*.o "$top_builddir"/lib/run/libmoerun_la-*.o; do
    [ -f "$o" ] && objs="$objs $o"
done
[ -n "$objs" ] || { echo "skip: no libmoerun objects under $top_builddir/lib/run"; exit 77; }

# cycles: reads "FROM TO" edges, prints each node that reaches itself (transitive closure)
cycles() {
    awk '{ n[$1] = 1; n[$2] = 1; r[$1, $2] = 1 }
        END {
            for (k in n) for (i in n) if ((i, k) in r) for (j in n) if ((k, j) in r) r[i, j] = 1
            for (i in n) if ((i, i) in r) print i
        }'
}

begin "no call loop between the files of libmoerun (nm)"
for o in $objs; do
    f=${o##*/libmoerun_la-}
    nm "$o" | awk -v f="${f%.o}" '$2 ~ /^[TDBR]$/ { print "D", $3, f }
        $1 == "U" { print "U", $2, f }'
done >"$T/syms"
# only objects of this build: one object per file even if .libs and the top both hold one
sort -u "$T/syms" | awk '$1 == "D" { d[$2] = $3 } $1 == "U" { u[NR] = $2; uf[NR] = $3 }
    END { for (i in u) if ((u[i] in d) && d[u[i]] != uf[i]) print uf[i], d[u[i]] }' |
    sort -u >"$T/calls"
[ -s "$T/calls" ] || fail "no calls found between the objects"
grep -q '^run_api run_iter$' "$T/calls" || fail "run_api.c does not call run_iter.c?"
cycles <"$T/calls" >"$T/loops"
[ -s "$T/loops" ] && fail "call loop through: $(tr '\n' ' ' <"$T/loops")"
end

begin "no include loop among libmoerun's headers"
for h in "$top_srcdir"/lib/run/*.h "$top_srcdir"/lib/moe/run.h "$top_srcdir"/lib/moe/run_backend.h \
    "$top_srcdir"/lib/moe/kern.h; do
    sed -n 's/^#include "\(.*\)"/\1/p' "$h" | while read -r inc; do
        echo "${h##*/} ${inc##*/}"
    done
done >"$T/incs"
[ -s "$T/incs" ] || fail "no includes found"
cycles <"$T/incs" >"$T/loops"
[ -s "$T/loops" ] && fail "include loop through: $(tr '\n' ' ' <"$T/loops")"
end

begin "libmoerun references no exit, abort, printf, puts, perror, stdout or stderr"
so=$top_builddir/lib/.libs/libmoerun.so
if [ -f "$so" ]; then
    nm -D --undefined-only "$so" | awk '{ sub(/@.*/, "", $2); print $2 }' |
        grep -x -E 'exit|_exit|_Exit|abort|printf|vprintf|puts|putchar|perror|stdout|stderr' \
        >"$T/bad"
    [ -s "$T/bad" ] && fail "libmoerun uses: $(tr '\n' ' ' <"$T/bad")"
else
    echo "  (no shared libmoerun in this build: not checked)"
fi
end

finish
