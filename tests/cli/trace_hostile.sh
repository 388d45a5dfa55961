#!/bin/sh
# tests/cli/trace_hostile.sh -- hostile bytes in otherwise valid traces: NUL bytes in the text
# view and gzip header flags that moe-trace(5) forbids in the binary format. Each input must be
# rejected (exit 1, one 'moe-trace: ' line naming the problem, no output file), by the streaming
# reader and the parallel trace map alike.

. "$(dirname "$0")/lib.sh"

OUT=$T/out.moet

# rejected WHAT INPUT SUBSTRING: view (streaming), stats -@0 and -@1 (the trace map), and view
# from stdin all fail with one line containing SUBSTRING and leave no output.
rejected() {
    _what=$1 _in=$2 _msg=$3
    begin "$_what"
    expect_exit 1 moe view -O b -o "$OUT" "$_in"
    expect_err_line "$_msg"
    expect_no_output "$OUT"
    for _t in 0 1; do
        expect_exit 1 moe stats -@$_t -o "$T/stats.txt" "$_in"
        expect_err_line "$_msg"
        expect_no_output "$T/stats.txt"
    done
    run moe view -O b -o "$OUT" - <"$_in"
    expect_eq "$rc" 1 "exit status reading stdin"
    expect_err_line "$_msg"
    expect_no_output "$OUT"
    end
}

# ------------------------------------------------------------------ NUL bytes in the text view

moe gen -L 2 -E 8 -k 2 -n 20 -s 3 --no-PG -o "$T/small.moet" || fail "cannot make the trace"
moe view -o "$T/good.txt" "$T/small.moet" || fail "cannot make the text view"
begin "the undamaged text view reads"
expect_exit 0 moe view -O b -o "$OUT" "$T/good.txt"
expect_no_stderr
rm -f "$OUT"
end

nhdr=$(grep -c '^@' "$T/good.txt")
first=$((nhdr + 1))
# with_line N PRINTF-FORMAT: good.txt with a line inserted before line N.
with_line() {
    head -n $(($1 - 1)) "$T/good.txt"
    printf "$2"
    tail -n +"$1" "$T/good.txt"
}
# A record line that starts with NUL was dropped as a blank line.
with_line $first '\000\t1\t2\t3\t4\t0,1\t2,3\n' >"$T/nul_start.txt"
rejected "NUL at the start of a record line" "$T/nul_start.txt" "line $first: NUL byte in line"
# A whole record followed by NUL and junk was read up to the NUL.
with_line $first '99\t0\t0\t0\t0\t0,1\t2,3\000junk\n' >"$T/nul_rec.txt"
rejected "NUL after a whole record" "$T/nul_rec.txt" "line $first: NUL byte in line"
# `@CO a\0b` became `@CO a`.
with_line 2 '@CO\ta\000b\n' >"$T/nul_co.txt"
rejected "NUL in an @CO header line" "$T/nul_co.txt" "line 2: NUL byte in line"
# NUL in a comment line between the records.
with_line $((first + 1)) '# note\000\n' >"$T/nul_comment.txt"
rejected "NUL in a comment line" "$T/nul_comment.txt" "line $((first + 1)): NUL byte in line"
# NUL inside the @MT line.
{ printf '@MT\tVN:1.0\000'; tail -c +8 "$T/good.txt"; } >"$T/nul_mt.txt"
rejected "NUL in the @MT line" "$T/nul_mt.txt" "line 1: NUL byte in line"
# Binary garbage after a valid @MT line converted to an empty trace with exit 0.
{ head -n 1 "$T/good.txt"; cat "$T/small.moet"; } >"$T/mt_binary.txt"
rejected "binary bytes after the @MT line" "$T/mt_binary.txt" "NUL byte in line"

# ------------------------------------------------------------------ gzip header flags

moe gen -L 4 -E 16 -k 2 -n 60000 -s 16 -S 3 --no-PG -o "$T/big.moet" ||
    fail "cannot make the test trace"
# The second block starts at BSIZE + 1 of the first (bytes 16..19, little endian).
b2=$(od -An -tu1 -j16 -N4 "$T/big.moet" | awk '{print $1 + 256 * ($2 + 256 * ($3 + 256 * $4)) + 1}')

# with_flag OFFSET OCTAL-BYTE OUT: big.moet with the FLG byte of the block at OFFSET replaced.
with_flag() {
    cp "$T/big.moet" "$3"
    printf "\\$2" | dd of="$3" bs=1 seek=$(($1 + 3)) conv=notrunc 2>/dev/null
}
for f in 006:FHCRC 014:FNAME 024:FCOMMENT 044:reserved-0x20 204:reserved-0x80 005:FTEXT; do
    with_flag 0 "${f%%:*}" "$T/flg1.moet"
    rejected "gzip flag ${f#*:} in the first block" "$T/flg1.moet" "gzip header flags"
done
with_flag "$b2" 014 "$T/flg2.moet"
rejected "gzip flag FNAME in the second block" "$T/flg2.moet" \
    "block at offset $b2: gzip header flags 0x0c"

finish
