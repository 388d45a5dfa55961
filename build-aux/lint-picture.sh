#!/bin/sh
# build-aux/lint-picture.sh -- checks doc/architecture.dot against the include graph of the
# sources, part by part.
#
# Usage: lint-picture.sh SRCDIR
#
# Parts: each lib/PART/ directory, "shared" (the flat lib/*.c), "kernels" (kernels/), "cli"
# (cmd/cli.c, cmd/cli.h) and one node per tool (cmd/moe-NAME.c as moe_NAME; cmd/costmodel*
# belong to moe_costmodel). A public header lib/moe/NAME.h belongs to the part whose README
# lists it on its "Public header(s):" line (moe/kern.h to run, where kern.c lives), the others
# to shared; a private header belongs to the part of its directory.
#
# Findings, one line each:
#   use A -> B (FILE includes HEADER): the sources use B from A, and the picture's arrows do not
#       lead from A to B (directly or through other parts);
#   stale arrow A -> B: the picture draws an arrow no source of A uses (a dashed arrow, a
#       choice made at run time such as a module opened, is not held to it);
#   missing file NAME: a file the picture's labels name (a NAME.c or NAME.h) is not in the tree,
#       or, for the shared pieces' label, not in the flat lib/.
# An edge drawn with ltail=cluster_tools stands for every tool.
#
# Exit: 0 no finding, 1 a finding, 2 usage. POSIX sh and awk.
set -u
LC_ALL=C
export LC_ALL
[ $# -eq 1 ] || { echo "usage: lint-picture.sh SRCDIR" >&2; exit 2; }
# absolute: the script reads the tree after a cd into it (make lint passes a relative srcdir)
src=$(cd "$1" 2>/dev/null && pwd) || { echo "lint-picture: no directory $1" >&2; exit 2; }
dot=$src/doc/architecture.dot
[ -f "$dot" ] || { echo "lint-picture: no $dot" >&2; exit 2; }
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# owners of the public headers: "moe/NAME.h PART"
for readme in "$src"/lib/*/README; do
    part=$(basename "$(dirname "$readme")")
    sed -n '/^Public header/,/^$/p' "$readme" | grep -o 'moe/[a-z_]*\.h' | sort -u |
        sed "s|\$| $part|"
done >"$tmp/owners"
echo "moe/kern.h run" >>"$tmp/owners"

# every "#include" of a source, as "FILE PART-OF-FILE HEADER"
cd "$src" || exit 2
for f in lib/*.c lib/*.h lib/*/*.c lib/*/*.h cmd/*.c cmd/*.h kernels/*.c kernels/*.h \
    kernels/*.cu kernels/*.cuh; do
    [ -f "$f" ] || continue
    case $f in
    lib/moe/*) # a public header's includes are its owner's use
        part=$(awk -v h="moe/${f#lib/moe/}" '$1 == h { print $2 }' "$tmp/owners")
        part=${part:-shared} ;;
    lib/*/*) part=$(echo "$f" | cut -d/ -f2) ;;
    lib/*) part=shared ;;
    kernels/*) part=kernels ;;
    cmd/cli.*) part=cli ;;
    cmd/costmodel*) part=moe_costmodel ;;
    cmd/moe-*) part=$(basename "$f" .c | tr - _) ;;
    *) continue ;;
    esac
    sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | sed "s|^|$f $part |"
done >"$tmp/includes"

# the picture: its arrows (tools expanded) and the file names in its labels
awk '
    /^[ \t]*\/\// { next }
    /->/ {
        line = $0
        tools = index(line, "ltail=cluster_tools") > 0
        optional = index(line, "style=dashed") > 0 # a run-time choice (a module opened)
        sub(/\[.*$/, "", line)
        n = split(line, st, ";")
        for (i = 1; i <= n; i++) {
            if (split(st[i], ab, "->") != 2) continue
            a = ab[1]; b = ab[2]
            gsub(/[ \t]/, "", a); gsub(/[ \t]/, "", b)
            print (tools ? "TOOLS" : a), b, optional
        }
    }' "$dot" >"$tmp/arrows"
# the files its labels name: those of the shared node must be flat lib/ files, the others
# anywhere in lib/, cmd/ or kernels/
sed 's/\\n/ /g' "$dot" | awk '
    /^[ \t]*\/\// { next }
    /^[ \t]*shared \[/ { inshared = 1 }
    {
        line = $0
        while (match(line, /[a-z][a-z_]*\.[ch]([^a-z_]|$)/)) {
            name = substr(line, RSTART, RLENGTH)
            sub(/[^a-z_.ch]$/, "", name); sub(/[^a-z_]$/, "", name)
            print (inshared ? "shared" : "any"), name
            line = substr(line, RSTART + RLENGTH)
        }
    }
    inshared && /\]/ { inshared = 0 }' | sort -u >"$tmp/named"

awk -v owners="$tmp/owners" -v arrows="$tmp/arrows" -v named="$tmp/named" -v src="$src" '
    BEGIN {
        while ((getline l < owners) > 0) { split(l, w, " "); owner[w[1]] = w[2] }
        while ((getline l < arrows) > 0) {
            split(l, w, " ")
            arrow[++na] = w[1] SUBSEP w[2]
            optional[na] = w[3]
        }
    }
    {
        file = $1; part = $2; h = $3
        if (h ~ /^moe\//) to = (h in owner) ? owner[h] : "shared"
        else if (h == "cli.h") to = "cli"
        else if (h == "costmodel.h" || h == "config.h") next
        else if (h ~ /\//) { split(h, w, "/"); to = w[1] }
        else if (file ~ /^lib\/[a-z]+\//) next   # a header of its own part
        else if (file ~ /^lib\//) to = "shared"
        else next                                # kernels/ and cmd/ local headers
        if (to == part) next
        if (!((part, to) in use)) { use[part, to] = file " includes " h; nuse++ }
    }
    function tool(p) { return p ~ /^moe_/ }
    function reach(a, b,    seen, queue, qh, qt, x, i, e, w) {
        qh = 1; qt = 0; queue[++qt] = a; seen[a] = 1
        while (qh <= qt) {
            x = queue[qh++]
            if (x == b) return 1
            for (i = 1; i <= na; i++) {
                split(arrow[i], w, SUBSEP)
                if ((w[1] == x || (w[1] == "TOOLS" && tool(x))) && !(w[2] in seen)) {
                    seen[w[2]] = 1; queue[++qt] = w[2]
                }
            }
        }
        return 0
    }
    END {
        bad = 0
        for (k in use) {
            split(k, w, SUBSEP)
            if (!reach(w[1], w[2])) {
                printf "lint-picture: use %s -> %s (%s): no arrow leads there\n", w[1], w[2], use[k]
                bad = 1
            }
        }
        for (i = 1; i <= na; i++) {
            split(arrow[i], w, SUBSEP)
            used = 0
            if (w[1] == "TOOLS") {
                for (k in use) { split(k, u, SUBSEP); if (tool(u[1]) && u[2] == w[2]) used = 1 }
            } else used = (w[1], w[2]) in use
            if (!used && !optional[i]) { printf "lint-picture: stale arrow %s -> %s\n", w[1], w[2]; bad = 1 }
        }
        while ((getline l < named) > 0) {
            split(l, w, " ")
            if (w[1] == "shared")
                cmd = "test -f \"" src "/lib/" w[2] "\""
            else
                cmd = "find \"" src "/lib\" \"" src "/cmd\" \"" src "/kernels\" -name \"" w[2] \
                      "\" | grep -q ."
            if (system(cmd) != 0) {
                printf "lint-picture: missing file %s%s\n", w[2],
                       w[1] == "shared" ? " (of the shared pieces, flat in lib/)" : ""
                bad = 1
            }
        }
        exit bad
    }' "$tmp/includes"
