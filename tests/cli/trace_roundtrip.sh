#!/bin/sh
# tests/cli/trace_roundtrip.sh -- lossless conversions between the trace formats, pipes versus
# files, zcat compatibility, thread-count independence, split/cat/sample consistency.

. "$(dirname "$0")/lib.sh"

# gen_to NAME OPTIONS...: a seeded trace written to $T/NAME.
gen_to() {
    _f=$T/$1
    shift
    moe gen "$@" -o "$_f" || fail "gen $* failed"
}

# ---------------------------------------------------------------- binary -> text -> binary
# name | gen options | options of the conversion back to binary
while IFS='|' read -r name opts back; do
    name=$(echo $name)
    case $name in '' | '#'*) continue ;; esac
    begin "binary -> text -> binary: $name"
    gen_to "$name.moet" $opts --no-PG </dev/null
    moe view --no-PG "$T/$name.moet" >"$T/$name.txt" </dev/null || fail "view failed"
    moe view $back --no-PG -o "$T/$name.back.moet" "$T/$name.txt" </dev/null ||
        fail "view $back failed"
    same_file "$T/$name.moet" "$T/$name.back.moet" "binary differs after the text round trip"
    # ... and text -> binary -> text
    moe view --no-PG "$T/$name.back.moet" >"$T/$name.back.txt" </dev/null
    same_file "$T/$name.txt" "$T/$name.back.txt" "text differs after the binary round trip"
    [ "$(tokens "$T/$name.txt")" -gt 0 ] || fail "no records"
    end
done <<'EOF'
plain       | -L 4 -E 16 -k 2 -n 3000 -s 8 -S 1          | -O b
weights     | -L 4 -E 16 -k 2 -n 3000 -s 8 -w -S 2       | -O b
e300        | -L 3 -E 300 -k 4 -n 2000 -s 5 -S 3         | -O b
e300_w      | -L 3 -E 300 -k 4 -n 2000 -s 5 -w -S 4      | -O b
e65535      | -L 2 -E 65535 -k 8 -n 500 -s 2 -w -S 5     | -O b
ranks_steps | -L 2 -E 8 -k 1 -n 5000 -s 50 -r 8 --steps 4 --hidden 7168 --elem-bytes 2 -S 6 | -O b
stored      | -L 4 -E 16 -k 2 -n 3000 -s 8 -O u -S 7     | -O u
level1      | -L 4 -E 16 -k 2 -n 3000 -s 8 -l 1 -w -S 8  | -O b -l 1
level9      | -L 4 -E 16 -k 2 -n 3000 -s 8 -l 9 -S 9     | -l 9 -O b
EOF

# A hand-written view with missing cells, comments and 64-bit tokens.
begin "text with missing cells -> binary -> text"
{
    printf '@MT\tVN:1.0\tlayers:3\texperts:300\ttopk:2\thidden:0\telem_bytes:0\tranks:2'
    printf '\tweights:1\n'
    printf '@CO\thand-written\n'
    printf '18446744073709551615\t4294967295\t0\t7\t1\t299:0.5,0:0.25\t.'
    printf '\t17:9.99995e-41,256:-0\n'
    printf '0\t0\t1\t7\t0\t.\t.\t.\n'
    printf '5\t1\t0\t8\t1\t1:1,2:0\t3:0.125,4:0.875\t.\n'
} >"$T/miss.txt"
moe view -O b --no-PG -o "$T/miss.moet" "$T/miss.txt" || fail "text -> binary failed"
moe view --no-PG "$T/miss.moet" >"$T/miss.back.txt"
same_file "$T/miss.txt" "$T/miss.back.txt" "text with missing cells"
moe view -O b --no-PG "$T/miss.back.txt" -o "$T/miss.back.moet"
same_file "$T/miss.moet" "$T/miss.back.moet"
end

# ---------------------------------------------------------------- pipes and files
begin "writing through a pipe equals writing to a file"
for fmt in b u t z; do
    moe gen -L 4 -E 16 -k 2 -n 20000 -s 8 -S 11 --no-PG -O $fmt -o "$T/file.$fmt"
    moe gen -L 4 -E 16 -k 2 -n 20000 -s 8 -S 11 --no-PG -O $fmt -o - | cat >"$T/pipe.$fmt"
    same_file "$T/file.$fmt" "$T/pipe.$fmt" "-O $fmt: pipe"
    moe gen -L 4 -E 16 -k 2 -n 20000 -s 8 -S 11 --no-PG -O $fmt -f >"$T/stdout.$fmt"
    same_file "$T/file.$fmt" "$T/stdout.$fmt" "-O $fmt: redirected stdout"
done
end

begin "reading from a pipe or stdin equals reading the file"
moe view --no-PG "$T/file.b" >"$T/from_file.txt"
cat "$T/file.b" | moe view --no-PG >"$T/from_pipe.txt"
moe view --no-PG - <"$T/file.b" >"$T/from_stdin.txt"
same_file "$T/from_file.txt" "$T/from_pipe.txt" "pipe input"
same_file "$T/from_file.txt" "$T/from_stdin.txt" "stdin input"
cat "$T/file.t" | moe stats >"$T/stats_pipe.txt"
moe stats "$T/file.b" >"$T/stats_file.txt"
same_file "$T/stats_file.txt" "$T/stats_pipe.txt" "stats of a piped text view"
moe gen -L 4 -E 16 -k 2 -n 20000 -s 8 -S 11 --no-PG -O u | moe view -O b --no-PG -o "$T/piped.b"
same_file "$T/file.b" "$T/piped.b" "gen -O u | view -O b"
end

begin "writing to a FIFO goes through it (and leaves it a FIFO)"
if mkfifo "$T/fifo" 2>/dev/null; then
    for fmt in t b; do
        cat "$T/fifo" >"$T/fifo.$fmt" &
        reader=$!
        moe gen -L 4 -E 16 -k 2 -n 20000 -s 8 -S 11 --no-PG -O $fmt -o "$T/fifo"
        st=$?
        if [ -p "$T/fifo" ]; then
            wait $reader
        else
            fail "-O $fmt: the FIFO was replaced by a regular file"
            kill $reader 2>/dev/null
            rm -f "$T/fifo"
            mkfifo "$T/fifo"
        fi
        expect_eq "$st" 0 "exit status of -o FIFO"
        same_file "$T/file.$fmt" "$T/fifo.$fmt" "-O $fmt written through a FIFO"
    done
    end
else
    skip_case "mkfifo not available"
fi

# ---------------------------------------------------------------- gzip compatibility
begin "zcat reads the container; its output is the payload"
if have zcat; then
    zcat "$T/file.b" >"$T/payload.b"
    expect_eq "$?" 0 "zcat exit status"
    zcat "$T/file.u" >"$T/payload.u"
    expect_eq "$?" 0 "zcat exit status (-O u)"
    [ -s "$T/payload.b" ] || fail "zcat output is empty"
    same_file "$T/payload.b" "$T/payload.u" "payload of -O b and -O u"
    expect_eq "$(head -c 5 "$T/payload.b")" "MOEFT" "payload magic"
    expect_eq "$(head -c 7 "$T/payload.b" | tail -c 2 | od -An -tu1 | tr -s ' ')" " 1 0" \
        "payload version bytes"
    gzip -t "$T/file.b" || fail "gzip -t rejects the container"
    # -O z is plain gzipped text: zcat gives the text view.
    zcat "$T/file.z" >"$T/z.txt"
    same_file "$T/file.t" "$T/z.txt" "zcat of -O z"
    end
else
    skip_case "zcat not available"
fi

begin "-O u and -O z read back like -O b"
for fmt in u t z; do
    moe view --no-PG "$T/file.$fmt" >"$T/view.$fmt.txt"
    same_file "$T/from_file.txt" "$T/view.$fmt.txt" "view of -O $fmt"
done
moe stats "$T/file.z" >"$T/stats_z.txt"
same_file "$T/stats_file.txt" "$T/stats_z.txt" "stats of -O z"
size_b=$(file_size "$T/file.b")
size_u=$(file_size "$T/file.u")
[ "$size_b" -lt "$size_u" ] || fail "-O b ($size_b bytes) is not smaller than -O u ($size_u)"
end

# ---------------------------------------------------------------- threads
begin "-@ N output equals -@ 0 output (gen, view -O b, cat, slice)"
for n in 0 1 3; do
    moe gen -L 8 -E 64 -k 2 -n 200000 -s 64 -w -S 21 --no-PG -@ $n -o "$T/g$n.moet"
    moe view -O b --no-PG -@ $n -o "$T/v$n.moet" "$T/g0.moet"
    moe cat --no-PG -@ $n -o "$T/c$n.moet" "$T/g0.moet" "$T/g0.moet"
    moe slice --layers 2-5 --no-PG -@ $n -o "$T/s$n.moet" "$T/g0.moet"
done
for n in 1 3; do
    same_file "$T/g0.moet" "$T/g$n.moet" "gen -@ $n"
    same_file "$T/v0.moet" "$T/v$n.moet" "view -O b -@ $n"
    same_file "$T/c0.moet" "$T/c$n.moet" "cat -@ $n"
    same_file "$T/s0.moet" "$T/s$n.moet" "slice -@ $n"
done
same_file "$T/g0.moet" "$T/v0.moet" "view -O b of a binary trace"
[ "$(file_size "$T/g0.moet")" -gt 300000 ] || fail "trace too small to span several blocks"
end

# ---------------------------------------------------------------- split and cat
gen_to split_in.moet -L 3 -E 16 -k 2 -n 6000 -s 60 -S 31 --no-PG
total=$(stat_of "$T/split_in.moet" tokens)
moe view --no-header "$T/split_in.moet" | sort -n >"$T/split_in.sorted"

# seqs FILE: the sorted distinct sequence ids of a trace.
seqs() {
    moe view --no-header "$1" | cut -f2 | sort -u
}

# check_split TRAIN TEST: a partition of split_in by sequence.
check_split() {
    n_train=$(stat_of "$1" tokens)
    n_test=$(stat_of "$2" tokens)
    expect_eq "$((n_train + n_test))" "$total" "train + test tokens"
    [ "$n_train" -gt 0 ] && [ "$n_test" -gt 0 ] || fail "an empty part ($n_train, $n_test)"
    seqs "$1" >"$T/s_train"
    seqs "$2" >"$T/s_test"
    both=$(comm -12 "$T/s_train" "$T/s_test" | wc -l | tr -d ' ')
    expect_eq "$both" 0 "sequences in both parts"
    moe cat --no-PG -O t "$1" "$2" | grep -v '^@' | sort -n >"$T/cat.sorted"
    same_file "$T/split_in.sorted" "$T/cat.sorted" "cat of the parts, sorted by token"
}

begin "split --ids: a partition by sequence id"
moe split --ids 0-9,20,40-44 --train "$T/tr.moet" --test "$T/te.moet" --no-PG "$T/split_in.moet" ||
    fail "split --ids failed"
check_split "$T/tr.moet" "$T/te.moet"
expect_eq "$(seqs "$T/tr.moet" | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 6 7 8 9 20 40 41 42 43 44 " \
    "training sequences"
end

begin "split --ratio: a seeded partition by sequence"
moe split --ratio 0.7 -S 5 --train "$T/rtr.moet" --test "$T/rte.moet" --no-PG "$T/split_in.moet" ||
    fail "split --ratio failed"
check_split "$T/rtr.moet" "$T/rte.moet"
ntr=$(seqs "$T/rtr.moet" | wc -l | tr -d ' ')
[ "$ntr" -ge 30 ] && [ "$ntr" -le 54 ] || fail "$ntr of 60 sequences in training for ratio 0.7"
moe split --ratio 0.7 -S 5 --train "$T/rtr2.moet" --test "$T/rte2.moet" --no-PG "$T/split_in.moet"
same_file "$T/rtr.moet" "$T/rtr2.moet" "same seed, same training part"
same_file "$T/rte.moet" "$T/rte2.moet" "same seed, same test part"
moe split --ratio 0.7 -S 6 --train "$T/rtr3.moet" --test "$T/rte3.moet" --no-PG "$T/split_in.moet"
differ_file "$T/rtr.moet" "$T/rtr3.moet" "another seed, another split"
# The whole trace when the parts come in order: sequences of --ids 0-29 precede the rest.
moe split --ids 0-29 --train "$T/a.moet" --test "$T/b.moet" --no-PG "$T/split_in.moet"
moe cat --no-PG -o "$T/ab.moet" "$T/a.moet" "$T/b.moet"
same_file "$T/split_in.moet" "$T/ab.moet" "cat of an ordered split equals the original"
end

# ---------------------------------------------------------------- sample
begin "sample: same seed same output, another seed another output"
moe sample -p 0.3 -S 7 --no-PG -o "$T/p1.moet" "$T/split_in.moet"
moe sample -p 0.3 -S 7 --no-PG -o "$T/p2.moet" "$T/split_in.moet"
moe sample -p 0.3 -S 8 --no-PG -o "$T/p3.moet" "$T/split_in.moet"
same_file "$T/p1.moet" "$T/p2.moet" "sample -p, same seed"
differ_file "$T/p1.moet" "$T/p3.moet" "sample -p, other seed"
n=$(stat_of "$T/p1.moet" tokens)
[ "$n" -ge 1500 ] && [ "$n" -le 2100 ] || fail "sample -p 0.3 kept $n of 6000 tokens"
moe sample -n 100 -S 7 --no-PG -o "$T/n1.moet" "$T/split_in.moet"
moe sample -n 100 -S 7 --no-PG -o "$T/n2.moet" "$T/split_in.moet"
moe sample -n 100 -S 8 --no-PG -o "$T/n3.moet" "$T/split_in.moet"
same_file "$T/n1.moet" "$T/n2.moet" "sample -n, same seed"
differ_file "$T/n1.moet" "$T/n3.moet" "sample -n, other seed"
expect_eq "$(stat_of "$T/n1.moet" tokens)" 100 "sample -n 100 tokens"
# From stdin too, and the same answer.
moe sample -n 100 -S 7 --no-PG -o "$T/n4.moet" - <"$T/split_in.moet"
same_file "$T/n1.moet" "$T/n4.moet" "sample -n from stdin"
# -p 1 keeps everything, -p 0 nothing.
moe sample -p 1 --no-PG -o "$T/all.moet" "$T/split_in.moet"
same_file "$T/split_in.moet" "$T/all.moet" "sample -p 1"
expect_eq "$(stat_of "$T/split_in.moet" tokens)" 6000 "input tokens"
moe sample -p 0 --no-PG -O t "$T/split_in.moet" >"$T/none.txt"
expect_eq "$(grep -vc '^@' "$T/none.txt")" 0 "sample -p 0 records"
end

finish
