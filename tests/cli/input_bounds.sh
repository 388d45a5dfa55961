#!/bin/sh
# tests/cli/input_bounds.sh -- no input makes a tool reserve memory out of proportion to its
# size in bytes (tests/README, "Work and memory bounded by the input"): a trace header that
# declares the largest shape (4096 layers, 65535 experts, top-256: 1M ids, 2 MiB, a record)
# and holds no record, as an 86-byte text view and as a binary trace, read from a file and
# from a pipe by stats, view and moe-affinity (which refuses the tables such a shape needs),
# each in < 64 MB of peak RSS
# (160 MB under ASan, whose shadow memory counts) and 1 GiB of address space. The sequential
# reader once reserved 4096 records of that shape before reading one (8.4 GB for the text
# header, issue 42 item 2), and stats its L x E loads (2 GiB) before the first record.

. "$(dirname "$0")/lib.sh"

LIMIT_KB=65536
asan=$(ldd "${top_builddir:-.}/lib/.libs/libmoecore.so" 2>/dev/null | grep libasan)
[ -z "$asan" ] || LIMIT_KB=163840
if [ -n "$MOE_VALGRIND" ]; then
    echo "skip: peak memory is not measured under valgrind"
    exit 77
fi
if ! /usr/bin/time -f %M -o "$T/probe" true >/dev/null 2>&1 || [ ! -s "$T/probe" ]; then
    echo "skip: no GNU /usr/bin/time to measure peak memory"
    exit 77
fi

# bounded STATUS WHAT CMD...: CMD (stdin a pipe from $IN) ends within 20 s with STATUS (1: one
# line on stderr), under LIMIT_KB of RSS.
bounded() {
    _want=$1 _what=$2
    shift 2
    begin "$_what"
    # A real pipe (a redirected file can be seeked, and is read as one). A 1 GiB address-space
    # cap makes a reservation ahead of the records fail, even where the kernel would leave its
    # pages untouched; ASan reserves terabytes of address space, so not there.
    cat "$IN" | ( [ -n "$asan" ] || ulimit -v 1048576
        exec /usr/bin/time -f %M -o "$T/rss" timeout 20 "$@" >/dev/null 2>"$T/err"
        )
    # the pipeline's status is cat's: the command's is in time's output file
    _st=$(sed -n 's/^Command exited with non-zero status //p' "$T/rss")
    _st=${_st:-0}
    expect_eq "$_st" "$_want" "exit status (stderr: $(head -c 300 "$T/err"))"
    [ "$_want" = 0 ] || [ "$(wc -l <"$T/err")" = 1 ] || fail "not one line on stderr"
    _kb=$(tail -n 1 "$T/rss")
    if [ -z "$_kb" ] || [ "$_kb" -ge "$LIMIT_KB" ]; then
        fail "peak RSS ${_kb:-?} KB, limit $LIMIT_KB KB"
    fi
    echo "  peak RSS: $_kb KB"
    end
}

printf '@MT\tVN:1.0\tlayers:4096\texperts:65535\ttopk:256\thidden:0\telem_bytes:0\tranks:1\tweights:0\n' \
    >"$T/h.txt"
expect_eq "$(file_size "$T/h.txt")" 86 "the text header's size"
moe view -O b -f -o "$T/h.moet" "$T/h.txt" || fail "cannot write the binary header"
M=$MOE_BIN
for form in h.txt h.moet; do
    IN=$T/$form
    bounded 0 "stats of the header alone ($form, a file)" "$M/moe-trace" stats "$T/$form"
    bounded 0 "stats of the header alone ($form, a pipe)" "$M/moe-trace" stats -
    bounded 0 "stats -@ 1 of the header alone ($form, a pipe)" "$M/moe-trace" stats -@ 1 -
    bounded 0 "view of the header alone ($form, a pipe)" "$M/moe-trace" view -
    bounded 1 "moe-affinity of the header alone ($form, a pipe)" "$M/moe-affinity" -o /dev/null -
done
finish
