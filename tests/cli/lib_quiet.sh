#!/bin/sh
# tests/cli/lib_quiet.sh -- the installed libraries (libmoecore, libmoerun) never exit and never
# write to stdout or stderr themselves: no object of theirs but the logger's (lib/moe.c)
# references exit, abort, printf, puts, perror, stdout or stderr (nm over the built objects;
# issue 16, item 3). The tools' own library, libmoetool (cmd/cli.c), is not installed and may.
. "${top_srcdir:-.}/tests/cli/lib.sh"

command -v nm >/dev/null 2>&1 || { echo "skip: nm not found"; exit 77; }
objs=$(find "$top_builddir/lib" -name 'libmoecore_la-*.o' -o -name 'libmoerun_la-*.o' |
    sort)
[ -n "$objs" ] || { echo "skip: no library objects under $top_builddir/lib"; exit 77; }

bad='exit|_exit|_Exit|abort|printf|vprintf|puts|putchar|perror|stdout|stderr'

begin "no library object but the logger's exits or prints"
n=0
for o in $objs; do
    n=$((n + 1))
    case ${o##*/} in libmoecore_la-moe.o) continue ;; esac
    nm "$o" | awk '$1 == "U" { sub(/@.*/, "", $2); print $2 }' | grep -x -E "$bad" |
        sed "s|^|${o##*/}: |" >>"$T/bad"
done
[ "$n" -gt 40 ] || fail "only $n library objects found"
[ -s "$T/bad" ] && fail "$(sort -u "$T/bad" | tr '\n' ';')"
end

begin "the check sees a print (an object that calls printf and exit)"
printf '#include <stdio.h>\n#include <stdlib.h>\nvoid f(int n) { printf("%%d", n); exit(n); }\n' \
    >"$T/p.c"
${CC:-cc} -c -o "$T/libmoecore_la-p.o" "$T/p.c" || fail "cannot compile the fixture"
nm "$T/libmoecore_la-p.o" | awk '$1 == "U" { print $2 }' | grep -x -E "$bad" >"$T/fx"
expect_eq "$(sort "$T/fx" | tr '\n' ' ')" "exit printf " "symbols the check finds"
end

finish
