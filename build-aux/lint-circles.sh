#!/bin/sh
# build-aux/lint-circles.sh -- finds include loops and call loops between the files of moeflow,
# and private headers included outside their part.
#
# Usage: lint-circles.sh [-a ALLOW] SRCDIR [BUILDDIR]
#
# Include loops: every `#include "NAME"` in SRCDIR/lib, cmd and kernels (.c .h .cu .cuh) is
# resolved as the compiler does here -- the including file's directory first, then lib/, then
# kernels/ (names found nowhere, such as config.h, are the build's and are skipped) -- and each
# cycle of the include graph is reported.
#
# Call loops: the objects the build left in BUILDDIR/lib, cmd and kernels (libtool's PIC objects
# in .libs/, the static ones beside them; automake prefixes names per target, as in
# lib/trace/.libs/libmoecore_la-trace.o, and each is mapped back to its source file) are read
# with nm: a file that leaves a symbol undefined (U) depends on the file defining it (T D B R
# ...). Every strongly connected component of more than one file is a loop, printed with one
# symbol per edge.
# Stale objects whose source is gone are ignored.
#
# Private headers: a NAME_internal.h or NAME.cuh is included only inside its own directory
# (lib/PART/, kernels/; the flat lib/ ones anywhere in lib/), and lib/ never includes cmd/ or
# kernels/ (doc/ARCHITECTURE, layering rules 2 and 3; place/ may include acct/acct_internal.h).
#
# A finding is named by a key line: "include FILE..." or "call FILE..." for a loop (members
# sorted), "private FILE HEADER" for a private header used outside its part. With -a ALLOW,
# findings whose key is a line of ALLOW are still printed but marked allowed and do not fail;
# allowed keys no longer found are noted. Lines of ALLOW starting with # are comments.
#
# Exit: 0 no finding (beyond ALLOW), 1 a finding, 2 usage, 77 no objects to read (the includes
# were still checked and found clean). POSIX sh and awk (mawk); nm from binutils ($NM overrides).
set -u
LC_ALL=C
export LC_ALL
me=lint-circles
allow=
while getopts a: opt; do
    case $opt in
    a) allow=$OPTARG ;;
    *) echo "usage: $me [-a ALLOW] SRCDIR [BUILDDIR]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $me [-a ALLOW] SRCDIR [BUILDDIR]" >&2
    exit 2
fi
src=$1
build=${2:-$1}
NM=${NM:-nm}
[ -d "$src" ] || { echo "$me: no source directory '$src'" >&2; exit 2; }
[ -d "$build" ] || { echo "$me: no build directory '$build'" >&2; exit 2; }
if [ -n "$allow" ] && [ ! -r "$allow" ]; then
    echo "$me: cannot read '$allow'" >&2
    exit 2
fi
src=$(cd "$src" && pwd) || exit 2
build=$(cd "$build" && pwd) || exit 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lint-circles.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' HUP INT TERM

# ---------------------------------------------------------------- the source files
dirs=
for d in lib cmd kernels; do
    [ -d "$src/$d" ] && dirs="$dirs $d"
done
[ -n "$dirs" ] || { echo "$me: no lib/, cmd/ or kernels/ under '$src'" >&2; exit 2; }
# shellcheck disable=SC2086
(cd "$src" && find $dirs -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) |
    sort) >"$tmp/files"

# ---------------------------------------------------------------- include edges
# Lines "FROM TO NAME": FROM includes TO, written as NAME.
# shellcheck disable=SC2046
(cd "$src" && awk -v list="$tmp/files" '
function norm(p,    n, a, i, k, out) {
    n = split(p, a, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (a[i] == "" || a[i] == ".") continue
        if (a[i] == ".." && k > 0 && seg[k] != "..") { k--; continue }
        seg[++k] = a[i]
    }
    out = ""
    for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") seg[i]
    return out
}
function dirof(p) { return sub(/\/[^\/]*$/, "", p) ? p : "." }
BEGIN { while ((getline f < list) > 0) have[f] = 1; close(list) }
/^[ \t]*#[ \t]*include[ \t]*"/ {
    name = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", name)
    if (!sub(/".*/, "", name)) next
    n = 0
    cand[++n] = norm(dirof(FILENAME) "/" name)
    cand[++n] = norm("lib/" name)
    cand[++n] = norm("kernels/" name)
    for (i = 1; i <= n; i++)
        if (cand[i] in have) { print FILENAME, cand[i], name; break }
}' $(cat "$tmp/files")) | sort -u >"$tmp/inc.edges"

# ---------------------------------------------------------------- call edges
# Objects -> source files: an object lib/x/.libs/lib_libmoecore_la-foo.o or lib/x/foo.o comes
# from the source lib/x/STEM.c (or .cu) whose STEM is the name, or its tail after a "-" (the
# longest such stem wins: cmd/moe_costmodel-moe-costmodel.o is cmd/moe-costmodel.c).
: >"$tmp/objmap"
: >"$tmp/objs"
for d in $dirs; do
    [ -d "$build/$d" ] || continue
    (cd "$build" && find "$d" -name '*.o' -type f) >>"$tmp/objs"
done
if [ -s "$tmp/objs" ]; then
    sort "$tmp/objs" | awk -v list="$tmp/files" '
    BEGIN {
        while ((getline f < list) > 0) {
            if (f !~ /\.(c|cu)$/) continue
            d = f; sub(/\/[^\/]*$/, "", d)
            s = f; sub(/.*\//, "", s); sub(/\.(c|cu)$/, "", s)
            nst[d]++; stem[d, nst[d]] = s; path[d, s] = f
        }
    }
    {
        o = $0
        d = o; sub(/\/[^\/]*$/, "", d); sub(/\/\.libs$/, "", d)
        b = o; sub(/.*\//, "", b); sub(/\.o$/, "", b)
        best = ""
        for (i = 1; i <= nst[d]; i++) {
            s = stem[d, i]
            if (b == s || (length(b) > length(s) && substr(b, length(b) - length(s)) == "-" s))
                if (length(s) > length(best)) best = s
        }
        if (best != "" && !((d, best) in done)) { done[d, best] = 1; print o, path[d, best] }
    }' >"$tmp/objmap"
fi
objs=$(wc -l <"$tmp/objmap" | tr -d ' ')
: >"$tmp/syms"
if [ "$objs" -gt 0 ]; then
    # one nm over every object; -A prefixes each line with "OBJECT:"
    # shellcheck disable=SC2046
    (cd "$build" && "$NM" -A -g $(awk '{print $1}' "$tmp/objmap")) >"$tmp/nm" 2>"$tmp/nm.err" || {
        echo "$me: $NM failed: $(head -n 1 "$tmp/nm.err")" >&2
        exit 2
    }
    awk -v map="$tmp/objmap" '
    BEGIN { while ((getline l < map) > 0) { split(l, a, " "); src[a[1]] = a[2] } }
    NF >= 2 {
        o = $1; sub(/:[^:]*$/, "", o)
        if (!(o in src)) next
        t = $(NF - 1); s = $NF
        if (t == "U") print src[o], "U", s
        else if (t ~ /^[TDBRGSCVW]$/) print src[o], "D", s
    }' "$tmp/nm" >"$tmp/syms"
fi
awk '
$2 == "D" { def[$3] = (($3 in def) ? def[$3] SUBSEP : "") $1; next }
$2 == "U" { nu++; uf[nu] = $1; us[nu] = $3 }
END {
    for (i = 1; i <= nu; i++) {
        if (!(us[i] in def)) continue
        n = split(def[us[i]], t, SUBSEP)
        for (j = 1; j <= n; j++) if (t[j] != uf[i]) print uf[i], t[j], us[i]
    }
}' "$tmp/syms" | sort -u >"$tmp/call.edges"

# ---------------------------------------------------------------- strongly connected components
# Tarjan's algorithm over "FROM TO LABEL" edges (sorted, so the report is deterministic); prints
# for each component of more than one node, or a node with an edge to itself, the key line
# "KIND MEMBER..." (members sorted) and then its edges, one label (the first) per edge.
scc() {
    awk -v kind="$1" '
    function strong(v,    i, w, m, k, j, x, y) {
        idx[v] = low[v] = ++counter
        stack[++sp] = v; on[v] = 1
        for (i = 1; i <= deg[v]; i++) {
            w = adj[v, i]
            if (!(w in idx)) { strong(w); if (low[w] < low[v]) low[v] = low[w] }
            else if (on[w] && idx[w] < low[v]) low[v] = idx[w]
        }
        if (low[v] != idx[v]) return
        m = 0
        do { w = stack[sp--]; on[w] = 0; mem[++m] = w } while (w != v)
        if (m == 1 && !((v, v) in lab)) return
        for (i = 2; i <= m; i++) {          # insertion sort of the members
            x = mem[i]
            for (j = i - 1; j >= 1 && mem[j] > x; j--) mem[j + 1] = mem[j]
            mem[j + 1] = x
        }
        line = kind
        ncomp++
        for (i = 1; i <= m; i++) { line = line " " mem[i]; inside[mem[i]] = ncomp }
        print "K " line
        for (i = 1; i <= m; i++)
            for (k = 1; k <= deg[mem[i]]; k++) {
                y = adj[mem[i], k]
                if (inside[y] == ncomp) print "E   " mem[i] " -> " y " (" lab[mem[i], y] ")"
            }
    }
    {
        if (!(($1, $2) in lab)) { lab[$1, $2] = $3; adj[$1, ++deg[$1]] = $2 }
        if (!($1 in seen)) { seen[$1] = 1; order[++nn] = $1 }
        if (!($2 in seen)) { seen[$2] = 1; order[++nn] = $2 }
    }
    END { for (i = 1; i <= nn; i++) if (!(order[i] in idx)) strong(order[i]) }'
}
{ scc include <"$tmp/inc.edges"; scc call <"$tmp/call.edges"; } >"$tmp/loops"

# ---------------------------------------------------------------- private headers
# A private header (NAME_internal.h, NAME.cuh) belongs to its directory: those of lib/PART/ to
# that part, those of kernels/ to kernels/, the flat lib/ ones to lib/ as a whole; nothing in lib/
# includes cmd/ or kernels/. One exception by design (doc/ARCHITECTURE, layering rule 2): place/
# scores layouts with the accounting's own per-cell rules, lib/acct/acct_internal.h. Lines
# "P FROM HEADER<tab>WHY".
awk '
function dirof(p) { return sub(/\/[^\/]*$/, "", p) ? p : "." }
{
    f = $1; h = $2; fd = dirof(f); hd = dirof(h); why = ""
    if (f ~ /^lib\// && h ~ /^(cmd|kernels)\//) why = "lib/ never includes " hd "/"
    else if (h ~ /(_internal\.h|\.cuh)$/) {
        if (hd == "lib") { if (f !~ /^lib\//) why = "private to lib/" }
        else if (fd != hd && !(h == "lib/acct/acct_internal.h" && fd == "lib/place"))
            why = "private to " hd "/"
    }
    if (why != "") print "P " f " " h "\t" why
}' "$tmp/inc.edges" >>"$tmp/loops"

# ---------------------------------------------------------------- report
if [ -n "$allow" ]; then
    grep -v '^[ \t]*#' "$allow" | grep -v '^[ \t]*$' | sed 's/[ \t]*$//' >"$tmp/allow"
else
    : >"$tmp/allow"
fi
awk -v me="$me" -v allowfile="$tmp/allow" -v allowname="$allow" '
BEGIN { while ((getline a < allowfile) > 0) ok[a] = 1 }
/^K / {
    key = substr($0, 3)
    kind = $2
    if (key in ok) { found[key] = 1; tag = " (allowed by " allowname ")"; nallowed++ }
    else { tag = ""; bad++ }
    sub(/^[a-z]+ /, "", key)
    print me ": " kind " loop" tag ": " key
    next
}
/^E / { print substr($0, 3) }
/^P / {
    split(substr($0, 3), pw, "\t"); split(pw[1], fh, " ")
    key = "private " pw[1]
    if (key in ok) { found[key] = 1; tag = " (allowed by " allowname ")" }
    else { tag = ""; bad++ }
    print me ": private header" tag ": " fh[1] " includes " fh[2] " (" pw[2] ")"
}
END {
    for (a in ok)
        if (!(a in found)) print me ": note: allowed loop no longer found: " a
    exit bad > 0
}' "$tmp/loops"
status=$?
ninc=$(wc -l <"$tmp/inc.edges" | tr -d ' ')
ncall=$(wc -l <"$tmp/call.edges" | tr -d ' ')
nfiles=$(wc -l <"$tmp/files" | tr -d ' ')
if [ "$objs" -eq 0 ]; then
    echo "$me: $nfiles files, $ninc include edges; no objects under '$build' (build first)"
    [ "$status" -ne 0 ] && exit 1
    exit 77
fi
echo "$me: $nfiles files, $ninc include edges; $objs objects, $ncall call edges"
[ "$status" -ne 0 ] && exit 1
exit 0
