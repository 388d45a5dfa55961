#!/bin/sh
# tests/cli/trace_errors.sh -- bad input, usage errors and output failures: exit status 1 (2 for
# usage), exactly one 'moe-trace: ' line on stderr, and no output file left behind.

. "$(dirname "$0")/lib.sh"

OUT=$T/out.moet

# bad_input WHAT INPUT SUBSTRING [SUBCOMMAND...]: every reading subcommand fails on INPUT with
# exit 1, one line naming the problem, no output file; `view` also through stdin.
bad_input() {
    _what=$1 _in=$2 _msg=$3
    begin "bad input: $_what"
    expect_exit 1 moe view -O b -o "$OUT" "$_in"
    expect_err_line "$_msg"
    expect_no_output "$OUT"
    expect_exit 1 moe view "$_in"
    expect_err_line "$_msg"
    expect_exit 1 moe stats -o "$T/stats.txt" "$_in"
    expect_err_line "$_msg"
    expect_no_output "$T/stats.txt"
    for _sub in "head -n 1M" "slice --layers 0" "sample -p 0.5" "sample -n 5" "cat"; do
        expect_exit 1 moe $_sub -o "$OUT" "$_in"
        expect_err_line "$_msg"
        expect_no_output "$OUT"
    done
    expect_exit 1 moe split --ratio 0.5 --train "$T/tr.moet" --test "$T/te.moet" "$_in"
    expect_err_line "$_msg"
    expect_no_output "$T/tr.moet"
    expect_no_output "$T/te.moet"
    if [ -f "$_in" ] && [ -r "$_in" ]; then
        run moe view -O b -o "$OUT" - <"$_in"
        expect_eq "$rc" 1 "exit status reading stdin"
        expect_err_line "$_msg"
        expect_no_output "$OUT"
    fi
    end
}

# A good trace of several blocks to damage.
moe gen -L 4 -E 16 -k 2 -n 60000 -s 16 -S 3 --no-PG -o "$T/good.moet" ||
    fail "cannot make the test trace"
size=$(file_size "$T/good.moet")
begin "the undamaged trace reads"
expect_exit 0 moe view -O b -o "$OUT" "$T/good.moet"
expect_no_stderr
[ "$size" -gt 200000 ] || fail "test trace too small ($size bytes)"
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
head -c 10 "$T/good.moet" >"$T/hdr10.moet"
bad_input "cut before the size field" "$T/hdr10.moet" "truncated"

# Corruption: one changed byte in the compressed data of the second block (the first block's
# size is in bytes 16-19 of the file, little endian).
set -- $(od -An -tu1 -j 16 -N 4 "$T/good.moet")
off=$(($1 + 256 * $2 + 65536 * $3 + 16777216 * $4 + 1 + 100))
byte=$(od -An -tu1 -j $off -N 1 "$T/good.moet" | tr -d ' ')
cp "$T/good.moet" "$T/flip.moet"
printf "\\$(printf %03o $(((byte + 1) % 256)))" |
    dd of="$T/flip.moet" bs=1 seek=$off conv=notrunc 2>/dev/null
cmp -s "$T/good.moet" "$T/flip.moet" && fail "could not damage the test trace"
bad_input "changed byte in compressed data" "$T/flip.moet" "corrupt"

# Foreign and unsupported files.
printf 'hello, world\n' | gzip -c >"$T/plain.gz"
bad_input "a gzip file that is not a trace" "$T/plain.gz" "not a moeflow trace"
# Random-looking binary bytes (fixed, so the test is reproducible).
i=0
: >"$T/random.bin"
while [ $i -lt 64 ]; do
    printf '\327\022\233\001\376\200\017\364\131\003\252\377\000\345\206\041' >>"$T/random.bin"
    i=$((i + 1))
done
bad_input "random binary bytes" "$T/random.bin" "not a moeflow trace"
bad_input "a trace of a newer major version" "$DATA_DIR/trace_v2.moet" "version 2.0 is newer"
bad_input "payload with bad magic" "$DATA_DIR/trace_badmagic.moet" "bad magic"
bad_input "a moeflow file of another kind" "$DATA_DIR/trace_kind_p.moet" "not a routing trace"

begin "a newer minor version is read"
expect_exit 0 moe view --no-header "$DATA_DIR/trace_v1_9.moet"
expect_eq "$(wc -l <"$T/out" | tr -d ' ')" 3 "records of the minor-9 fixture"
expect_no_stderr
end

# Text views with bad records.
MT='@MT\tVN:1.0\tlayers:2\texperts:8\ttopk:2\thidden:0\telem_bytes:0\tranks:0\tweights:0\n'
textcase() {
    printf "$MT" >"$T/$1.txt"
    printf "$2" >>"$T/$1.txt"
    bad_input "text view: $1" "$T/$1.txt" "$3"
}
textcase id_ge_E '0\t0\t0\t0\t0\t1,2\t3,4\n1\t0\t1\t0\t0\t1,8\t3,4\n' \
    "line 3: expert id 8 out of range (8 experts)"
textcase ragged_columns '0\t0\t0\t0\t0\t1,2\t3,4\n1\t0\t1\t0\t0\t1,2\n' \
    "line 3: too few layer columns"
textcase ragged_group '0\t0\t0\t0\t0\t1,2\t3\n' "line 2: wrong number of expert ids"
textcase extra_column '0\t0\t0\t0\t0\t1,2\t3,4\t5,6\n' "line 2: too many layer columns"
textcase non_numeric_id '0\t0\t0\t0\t0\t1,two\t3,4\n' "line 2: non-numeric expert id"
textcase non_numeric_token 'zero\t0\t0\t0\t0\t1,2\t3,4\n' "line 2: expected token"
textcase missing_field '0\t0\t0\t0\t1,2\t3,4\n' "line 2: expected token"
textcase late_header '0\t0\t0\t0\t0\t1,2\t3,4\n@CO\tlate\n' "line 3: header line after records"
printf '@MT\tVN:1.0\tlayers:2\texperts:8\ttopk:9\n' >"$T/bad_shape.txt"
bad_input "text view: top-k above the expert count" "$T/bad_shape.txt" "invalid shape"
printf '@HD\tVN:1.0\n0\t0\t0\t0\t0\t1,2\n' >"$T/bad_mt.txt"
bad_input "text view: no @MT line" "$T/bad_mt.txt" "not a moeflow trace"
printf '@MT\tVN:9.0\tlayers:2\texperts:8\ttopk:2\n' >"$T/v9.txt"
bad_input "text view: newer major version" "$T/v9.txt" "version 9.0 is newer"

# Empty input.
: >"$T/empty.moet"
bad_input "empty file" "$T/empty.moet" "empty input"
begin "empty standard input"
run moe view -O b -o "$OUT" </dev/null
expect_eq "$rc" 1 "exit status"
expect_err_line "empty input"
expect_no_output "$OUT"
run moe stats - </dev/null
expect_eq "$rc" 1 "exit status"
expect_err_line "empty input"
: | moe view >"$T/out" 2>"$T/err"
expect_eq "$?" 1 "exit status of view from an empty pipe"
expect_err_line "empty input"
end

# Unreadable inputs.
bad_input "nonexistent file" "$T/no-such-file.moet" \
    "cannot open '$T/no-such-file.moet': No such file or directory"
mkdir "$T/adir"
bad_input "a directory" "$T/adir" "cannot open '$T/adir': Is a directory"
cp "$T/good.moet" "$T/noperm.moet"
chmod 000 "$T/noperm.moet"
if [ "$(id -u)" = 0 ]; then
    begin "a file without read permission"
    skip_case "running as root: permissions do not apply"
else
    bad_input "a file without read permission" "$T/noperm.moet" "Permission denied"
fi

# An unwritable output place.
begin "unwritable output"
expect_exit 1 moe view -O b -o "$T/no-such-dir/out.moet" "$T/good.moet"
expect_err_line "cannot create '$T/no-such-dir/out.moet': No such file or directory"
expect_exit 1 moe stats -o "$T/no-such-dir/s.txt" "$T/good.moet"
expect_err_line "No such file or directory"
expect_exit 1 moe gen -n 100 -o "$T/adir"
expect_err_line
end

# cat: the second input is bad; the output of the first must not survive.
begin "cat with a bad second input leaves no output"
expect_exit 1 moe cat -o "$OUT" "$T/good.moet" "$T/half.moet"
expect_err_line "truncated"
expect_no_output "$OUT"
end

begin "split with a bad input leaves neither part"
expect_exit 1 moe split --ids 0-3 --train "$T/tr.moet" --test "$T/te.moet" "$T/noeof.moet"
expect_err_line "no end-of-file block"
expect_no_output "$T/tr.moet"
expect_no_output "$T/te.moet"
end

# ---------------------------------------------------------------- usage errors
# usage SUBCOMMAND ARGS...: exit 2, one message line plus the --help hint, nothing on stdout.
usage() {
    _sub=$1
    shift
    run moe "$@"
    expect_eq "$rc" 2 "exit status of 'moe-trace $*'"
    expect_usage_error "$_sub"
    expect_no_stdout
}
begin "usage errors"
usage view view --bogus "$T/good.moet"
usage view view -O x "$T/good.moet"
usage view view -@ -1 "$T/good.moet"
usage view view -@ many "$T/good.moet"
usage view view -l 10 "$T/good.moet"
usage view view "$T/good.moet" "$T/good.moet"
usage view view -H --no-header "$T/good.moet"
usage view view -o
usage stats stats --bogus
usage head head -n abc "$T/good.moet"
usage head head -n -1 "$T/good.moet"
usage slice slice "$T/good.moet"
usage slice slice --layers 2-1 "$T/good.moet"
usage slice slice --layers x "$T/good.moet"
usage sample sample "$T/good.moet"
usage sample sample -p 1.5 "$T/good.moet"
usage sample sample -p 0.5 -n 3 "$T/good.moet"
usage split split --ratio 0.5 "$T/good.moet"
usage split split --ids 5-1 --train a --test b "$T/good.moet"
usage split split --ids 1,,2 --train a --test b "$T/good.moet"
usage cat cat
usage gen gen -E 0
usage gen gen -n 10X
usage gen gen --zipf nan
usage gen gen extra-argument
usage "" --bogus
usage "" nosuchcommand
usage ""
end

begin "usage error message names the bad option"
run moe view --bogus "$T/good.moet"
expect_eq "$(head -n 1 "$T/err")" "moe-trace: invalid or incomplete option '--bogus'" "message"
run moe view -O x "$T/good.moet"
expect_eq "$(head -n 1 "$T/err")" \
    "moe-trace: invalid output format 'x' (expected b, u, t or z)" "message"
end

begin "--help and --version: stdout, exit 0"
for sub in view stats head slice sample split cat gen; do
    expect_exit 0 moe $sub --help
    expect_no_stderr
    grep -q "^Usage: moe-trace $sub" "$T/out" || fail "$sub --help lacks its Usage line"
done
expect_exit 0 moe --version
expect_no_stderr
head -n 1 "$T/out" | grep -q '^moe-trace (moeflow) [0-9][0-9.]*$' || fail "--version first line"
end

# ---------------------------------------------------------------- terminals and pipes
begin "binary output to a terminal is refused"
if have script && script -qec true /dev/null >/dev/null 2>&1; then
    # script(1) gives the command a pseudo-terminal as stdout; -e passes its exit status on.
    script -qec "'$MOE_BIN/moe-trace' gen -n 100 -s 1" /dev/null >"$T/tty.out" 2>&1
    expect_eq "$?" 1 "exit status of gen to a terminal"
    grep -q "moe-trace: refusing to write binary data to a terminal" "$T/tty.out" ||
        fail "no refusal message: $(head -c 200 "$T/tty.out")"
    script -qec "'$MOE_BIN/moe-trace' view -O b '$T/good.moet'" /dev/null >"$T/tty.out" 2>&1
    expect_eq "$?" 1 "exit status of view -O b to a terminal"
    script -qec "'$MOE_BIN/moe-trace' head -n 2 -O t '$T/good.moet'" /dev/null >"$T/tty.out" 2>&1
    expect_eq "$?" 0 "exit status of text to a terminal"
    end
else
    skip_case "script(1) not available"
fi

moe gen -L 4 -E 16 -k 2 -n 200000 -s 64 -S 5 -o "$T/big.moet" || fail "cannot make BIG"
begin "view BIG | head -1: exit 0, nothing on stderr"
{
    moe view "$T/big.moet" 2>"$T/err"
    echo $? >"$T/status"
} | head -n 1 >"$T/out"
expect_eq "$(cat "$T/status")" 0 "exit status of view into a closed pipe"
expect_no_stderr
expect_eq "$(cut -c1-3 "$T/out")" "@MT" "first line"
for cmd in "stats" "view -O b -f" "view -O u -f" "head -n 100000 -O t" "gen -n 200000 -O t"; do
    {
        if [ "${cmd%% *}" = gen ]; then
            moe $cmd 2>"$T/err"
        else
            moe $cmd "$T/big.moet" 2>"$T/err"
        fi
        echo $? >"$T/status"
    } | head -c 100 >/dev/null
    expect_eq "$(cat "$T/status")" 0 "exit status of $cmd into a closed pipe"
    expect_no_stderr
done
end

begin "writing to a full device fails with one line"
if [ -w /dev/full ]; then
    for cmd in "view" "view -O b -f" "view -O z -f" "stats" "head -n 50000 -O t"; do
        moe $cmd "$T/big.moet" >/dev/full 2>"$T/err"
        expect_eq "$?" 1 "exit status of $cmd > /dev/full"
        expect_err_line "No space left on device"
    done
    moe gen -n 1000 -s 1 -O t >/dev/full 2>"$T/err"
    expect_eq "$?" 1 "exit status of gen > /dev/full"
    expect_err_line "No space left on device"
    moe stats "$T/good.moet" --loads >/dev/full 2>"$T/err"
    expect_eq "$?" 1 "exit status of a small stats > /dev/full"
    expect_err_line "No space left on device"
    end
else
    skip_case "/dev/full not available"
fi

finish
