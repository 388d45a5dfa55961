#!/bin/sh
# tests/cli/affinity_errors.sh -- moe-affinity on bad input and bad usage: exit status 1 (2 for
# usage), exactly one 'moe-affinity: ' line on stderr, and no output file left behind -- for the
# block-parallel reader (files, any -@), the sequential one (standard input) and every mode.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/affinity_lib.sh"

OUT=$T/out.aff
PNG=$T/out.png

# bad_input WHAT INPUT SUBSTRING: every mode fails on INPUT with exit 1, one line naming the
# problem, and no output.
bad_input() {
    _what=$1 _in=$2 _msg=$3
    begin "bad input: $_what"
    for _args in "" "-@ 1" "-@ 3" "--summary" "--top1" "--by-step 2" "--no-shuffle"; do
        # shellcheck disable=SC2086
        expect_exit 1 aff $_args -o "$OUT" --png "$PNG" "$_in"
        expect_aff_err_line "$_msg"
        expect_no_output "$OUT"
        expect_no_output "$PNG"
    done
    expect_exit 1 aff converge -o "$OUT" "$_in"
    expect_aff_err_line "$_msg"
    expect_no_output "$OUT"
    expect_exit 1 aff compare -o "$OUT" "$AFF_DATA/small.txt" "$_in"
    expect_aff_err_line "$_msg"
    expect_no_output "$OUT"
    if [ -f "$_in" ] && [ -r "$_in" ]; then
        run aff -o "$OUT" - <"$_in"
        expect_eq "$rc" 1 "exit status reading stdin"
        expect_aff_err_line "$_msg"
        expect_no_output "$OUT"
    fi
    end
}

# A good trace of several blocks to damage.
moe gen -L 4 -E 16 -k 2 -n 60000 -s 16 -S 3 --no-PG -o "$T/good.moet" ||
    fail "cannot make the test trace"
size=$(file_size "$T/good.moet")
begin "the undamaged trace counts"
expect_exit 0 aff -@ 2 -o "$OUT" "$T/good.moet"
expect_no_stderr
[ -s "$OUT" ] || fail "no table"
rm -f "$OUT"
end

head -c $((size / 2)) "$T/good.moet" >"$T/half.moet"
bad_input "truncated in the middle" "$T/half.moet" "truncated"
head -c $((size - 1)) "$T/good.moet" >"$T/minus1.moet"
bad_input "last byte missing" "$T/minus1.moet" "truncated"
head -c $((size - 30)) "$T/good.moet" >"$T/noeof.moet"
bad_input "missing end-of-file block" "$T/noeof.moet" "no end-of-file block"
head -c 17 "$T/good.moet" >"$T/hdr17.moet"
bad_input "cut inside the first block header" "$T/hdr17.moet" "truncated"

set -- $(od -An -tu1 -j 16 -N 4 "$T/good.moet")
off=$(($1 + 256 * $2 + 65536 * $3 + 16777216 * $4 + 1 + 100))
byte=$(od -An -tu1 -j $off -N 1 "$T/good.moet" | tr -d ' ')
cp "$T/good.moet" "$T/flip.moet"
printf "\\$(printf %03o $(((byte + 1) % 256)))" |
    dd of="$T/flip.moet" bs=1 seek=$off conv=notrunc 2>/dev/null
bad_input "changed byte in compressed data" "$T/flip.moet" "corrupt"

printf 'hello, world\n' | gzip -c >"$T/plain.gz"
bad_input "a gzip file that is not a trace" "$T/plain.gz" "not a moeflow trace"
: >"$T/empty"
bad_input "an empty file" "$T/empty" "empty"
bad_input "a missing file" "$T/does-not-exist.moet" "cannot open"
bad_input "newer major version" "$top_srcdir/tests/data/trace_v2.moet" "newer than this reader"
bad_input "bad magic" "$top_srcdir/tests/data/trace_badmagic.moet" "not a moeflow trace"
bad_input "another kind of moeflow file" "$top_srcdir/tests/data/trace_kind_p.moet" \
    "not a routing trace"
bad_input "expert id out of range" "$AFF_DATA/badid.moet" \
    "record 3: token 2: layer 0: expert id 9 out of range (8 experts)"
bad_input "a half-missing cell" "$AFF_DATA/partial.moet" "1 of 2 expert ids missing"

begin "the messages match moe-trace's"
for f in "$AFF_DATA/badid.moet" "$AFF_DATA/partial.moet" "$T/noeof.moet" "$T/flip.moet"; do
    moe view "$f" >/dev/null 2>"$T/trace.err"
    aff -@ 2 "$f" >/dev/null 2>"$T/aff.err"
    expect_eq "$(sed 's/^moe-affinity: //' "$T/aff.err")" \
        "$(sed 's/^moe-trace: //' "$T/trace.err")" "message for $(basename "$f")"
done
end

begin "a newer minor version with record extensions reads as the old one"
aff --no-PG --hops 2 "$AFF_DATA/small_ext.moet" | grep -v '^@' >"$T/ext"
aff --no-PG --hops 2 "$AFF_DATA/small.txt" | grep -v '^@' >"$T/txt"
same_file "$T/ext" "$T/txt" "extended records vs text"
end

# ------------------------------------------------------------------ usage errors

begin "usage errors: status 2, one line and the hint"
while IFS='|' read -r sub args; do
    sub=$(echo $sub)
    case $sub in '' | '#'*) continue ;; esac
    [ "$sub" = - ] && sub=
    # shellcheck disable=SC2086
    run aff $sub $args
    [ "$rc" = 2 ] || fail "moe-affinity $sub $args: exit $rc, expected 2"
    expect_aff_usage_error "$sub"
    expect_no_output "$OUT"
done <<EOF
- | --no-such-option
- | --hops 0 $AFF_DATA/small.txt
- | --hops 65 $AFF_DATA/small.txt
- | --window 1 $AFF_DATA/small.txt
- | -O b $AFF_DATA/small.txt
- | -f $AFF_DATA/small.txt
- | --plot pie --png $PNG $AFF_DATA/small.txt
- | --pair 1-x --png $PNG $AFF_DATA/small.txt
- | --by-step 0 $AFF_DATA/small.txt
- | --by-step 2 --summary $AFF_DATA/small.txt
- | --plot steps --png $PNG $AFF_DATA/small.txt
- | --shuffled --no-shuffle --png $PNG $AFF_DATA/small.txt
- | --kernel avx1024 $AFF_DATA/small.txt
- | --levels 3 $AFF_DATA/small.txt
- | -o $OUT $AFF_DATA/small.txt $AFF_DATA/small.txt
converge | --levels 0 $AFF_DATA/small.txt
converge | --png $PNG $AFF_DATA/small.txt
converge | --summary $AFF_DATA/small.txt
compare | $AFF_DATA/small.txt
compare | --hops 2 $AFF_DATA/small.txt $AFF_DATA/small.txt
EOF
end

begin "data-dependent refusals are runtime errors (status 1)"
expect_exit 1 aff --hops 3 -o "$OUT" "$AFF_DATA/small.txt"
expect_aff_err_line "out of range for 3 layers"
expect_no_output "$OUT"
expect_exit 1 aff --pair 2 --png "$PNG" "$AFF_DATA/small.txt"
expect_aff_err_line "no layer 3"
expect_no_output "$PNG"
expect_exit 1 aff --kernel avx512 --kernel scalar --by-step 1 --layer 7 --png "$PNG" \
    "$AFF_DATA/small.txt"
expect_aff_err_line "--layer 7"
expect_exit 1 aff compare "$AFF_DATA/small.txt" "$T/good.moet"
expect_aff_err_line "3 layers and 4 experts"
end

begin "output failures leave nothing behind"
expect_exit 1 aff -o "$T/no-such-dir/t.aff" "$AFF_DATA/small.txt"
expect_aff_err_line "cannot create"
expect_exit 1 aff -o "$OUT" --png "$T/no-such-dir/p.png" "$AFF_DATA/small.txt"
expect_aff_err_line "cannot create"
expect_no_output "$OUT"
expect_exit 1 aff -o "$OUT" --png "$PNG" --svg "$T/no-such-dir/p.svg" "$AFF_DATA/small.txt"
expect_aff_err_line "cannot create"
expect_no_output "$OUT"
expect_no_output "$PNG"
if [ -w /dev/full ]; then
    expect_exit 1 aff -o /dev/full "$AFF_DATA/small.txt"
    expect_aff_err_line "write error"
fi
end

# ------------------------------------------------------------------ bad tables

aff --no-PG -o "$T/t.aff" "$AFF_DATA/small.txt"
# bad_table WHAT SUBSTRING: compare reads a damaged $T/bad.aff and fails with one line.
bad_table() {
    begin "bad table: $1"
    expect_exit 1 aff compare -o "$OUT" "$T/bad.aff" "$AFF_DATA/small.txt"
    expect_aff_err_line "$2"
    expect_no_output "$OUT"
    end
}
sed '1s/VN:1.0/VN:2.0/' "$T/t.aff" >"$T/bad.aff"
bad_table "newer major version" "newer than this reader"
sed '1s/layers:3/layers:0/' "$T/t.aff" >"$T/bad.aff"
bad_table "impossible shape" "invalid @AF shape"
sed '/^TC	1	1	2/s/	2$//' "$T/t.aff" >"$T/bad.aff"
bad_table "a short TC row" "TC line has 3 counts, expected 4"
grep -v '^TC	1	0	3' "$T/t.aff" >"$T/bad.aff"
bad_table "a missing TC row" "missing TC lines"
sed 's/^CO	1	1	1/CO	1	1	x/' "$T/t.aff" >"$T/bad.aff"
bad_table "a bad count" "invalid count 'x'"
sed 's/^LOAD	2/LOAD	9/' "$T/t.aff" >"$T/bad.aff"
bad_table "a layer out of range" "layer '9' out of range"
sed '5a\
XX	1	2' "$T/t.aff" >"$T/bad.aff"
bad_table "an unknown record" "unknown record type 'XX'"
sed '1d' "$T/t.aff" >"$T/bad.aff"
bad_table "no @AF line (then it is no table, and no trace either)" "not a moeflow trace"
grep '^TC	1	0	0' "$T/t.aff" >/dev/null && sed 's/^TC	1	0	0	4/TC	1	0	0	99/' "$T/t.aff" >"$T/bad.aff"
bad_table "a row load beyond the expert's load" "exceeds the expert's load"
# issue 17 item 9: sets is implied by topk and top1; the flags are 0 or 1
sed '1s/sets:2/sets:0/' "$T/t.aff" >"$T/bad.aff"
bad_table "sets:0" "@AF field 'sets:0' disagrees with topk:2 top1:0 (sets:2 expected)"
sed '1s/sets:2/sets:300/' "$T/t.aff" >"$T/bad.aff"
bad_table "sets:300" "@AF field 'sets:300' disagrees"
sed '1s/sets:2/sets:1/' "$T/t.aff" >"$T/bad.aff"
bad_table "sets:1 without top1" "@AF field 'sets:1' disagrees"
sed '1s/coact:1/coact:7/' "$T/t.aff" >"$T/bad.aff"
bad_table "coact:7" "invalid @AF field 'coact:7' (0 or 1)"
sed '1s/shuffled:1/shuffled:2/' "$T/t.aff" >"$T/bad.aff"
bad_table "shuffled:2" "invalid @AF field 'shuffled:2' (0 or 1)"
sed '1s/top1:0/top1:9/' "$T/t.aff" >"$T/bad.aff"
bad_table "top1:9" "invalid @AF field 'top1:9' (0 or 1)"
begin "a top-1 table (sets:1) reads back"
aff --top1 --no-PG -o "$T/t1.aff" "$AFF_DATA/small.txt"
grep -q '	sets:1	' "$T/t1.aff" || fail "no sets:1 in a top-1 table"
expect_exit 0 aff compare -o "$OUT" "$T/t1.aff" "$T/t1.aff"
end

finish
