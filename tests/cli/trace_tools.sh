#!/bin/sh
# tests/cli/trace_tools.sh -- what stats, head, slice, cat, sample and split compute, checked
# on a small hand-written trace whose answers are worked out below.

. "$(dirname "$0")/lib.sh"

# 3 layers, 4 experts, top-2; 5 tokens in 3 sequences, 2 steps, 2 ranks; two missing cells.
#
#   token seq pos step rank | layer 0 | layer 1 | layer 2
#   0     0   0   0    0    |   0,1   |   2,3   |   0,2
#   1     0   1   0    1    |   0,2   |    .    |   1,3
#   2     1   0   1    0    |   0,3   |   2,1   |    .
#   3     1   1   1    1    |   1,2   |   3,0   |   0,1
#   4     2   0   1    0    |   0,1   |   2,3   |   0,2
#
# Loads (tokens per expert):  layer 0: 4 3 2 1   layer 1: 1 1 3 3   layer 2: 3 2 2 1
TAB=$(printf '\t')
{
    printf '@MT\tVN:1.0\tlayers:3\texperts:4\ttopk:2\thidden:1024\telem_bytes:2\tranks:2'
    printf '\tweights:0\n'
    printf '@CO\thand-written test trace\n'
    printf '0\t0\t0\t0\t0\t0,1\t2,3\t0,2\n'
    printf '1\t0\t1\t0\t1\t0,2\t.\t1,3\n'
    printf '2\t1\t0\t1\t0\t0,3\t2,1\t.\n'
    printf '3\t1\t1\t1\t1\t1,2\t3,0\t0,1\n'
    printf '4\t2\t0\t1\t0\t0,1\t2,3\t0,2\n'
} >"$T/small.txt"
moe view -O b --no-PG -o "$T/small.moet" "$T/small.txt" || fail "cannot convert the test trace"
grep -v '^@' "$T/small.txt" >"$T/small.rec"

# records FILE: the record lines of a trace.
records() {
    moe view --no-header "$1"
}

# ---------------------------------------------------------------- stats
for input in small.txt small.moet; do
    begin "stats of the hand-written trace ($input)"
    expect_exit 0 moe stats --loads "$T/$input"
    expect_no_stderr
    # key value lines
    for kv in "tokens 5" "sequences 3" "layers 3" "experts 4" "topk 2" "steps 2" \
        "source_ranks 2" "weights no" "hidden 1024" "elem_bytes 2" "missing_cells 2" \
        "incomplete_tokens 2"; do
        grep -qx "$kv" "$T/out" || fail "stats lacks '$kv'"
    done
    # per-layer rows, whitespace-normalised:
    # layer tokens missing min max mean max/mean cv hottest
    awk '$1 == "layer" { $1 = $1; print }' "$T/out" >"$T/layers"
    {
        echo "layer 0 5 0 1 4 2.50 1.600 0.447 0"
        echo "layer 1 4 1 1 3 2.00 1.500 0.500 2"
        echo "layer 2 4 1 1 3 2.00 1.500 0.354 0"
    } >"$T/layers.want"
    same_file "$T/layers.want" "$T/layers" "per-layer rows"
    grep '^load ' "$T/out" >"$T/loads"
    printf 'load 0 4 3 2 1\nload 1 1 1 3 3\nload 2 3 2 2 1\n' >"$T/loads.want"
    same_file "$T/loads.want" "$T/loads" "--loads lines"
    end
done

begin "stats: loads add up to tokens x top-k per present layer"
moe gen -L 6 -E 32 -k 4 -n 5000 -s 20 -r 4 --steps 5 -S 17 -o "$T/g.moet"
moe stats --loads "$T/g.moet" >"$T/g.stats"
expect_eq "$(awk '$1 == "tokens" { print $2 }' "$T/g.stats")" 5000 "tokens"
expect_eq "$(awk '$1 == "sequences" { print $2 }' "$T/g.stats")" 20 "sequences"
expect_eq "$(awk '$1 == "source_ranks" { print $2 }' "$T/g.stats")" 4 "source ranks"
expect_eq "$(awk '$1 == "steps" { print $2 }' "$T/g.stats")" 5 "steps"
bad=$(awk '$1 == "load" { s = 0; for (i = 3; i <= NF; i++) s += $i; if (s != 20000) print $2 }' \
    "$T/g.stats")
expect_eq "$bad" "" "layers whose loads do not sum to 5000 x 4"
nload=$(grep -c '^load ' "$T/g.stats")
expect_eq "$nload" 6 "load lines"
# The stats of a trace and of its text view agree.
moe view "$T/g.moet" | moe stats --loads >"$T/g2.stats"
same_file "$T/g.stats" "$T/g2.stats" "stats of the text view"
# The trace map counts stored ids without widening them: 16-bit ids with missing cells too.
sed 's/experts:4/experts:300/' "$T/small.txt" >"$T/wide.txt"
moe view -O b --no-PG -o "$T/wide.moet" "$T/wide.txt" || fail "cannot convert the wide trace"
moe stats --loads "$T/wide.txt" >"$T/wide.want"
moe stats --loads -@ 1 "$T/wide.moet" >"$T/wide.got"
same_file "$T/wide.want" "$T/wide.got" "stats of 16-bit ids with missing cells"
# Workers count blocks of their own and merge: the report does not depend on their number.
moe stats -@ 3 --loads "$T/g.moet" >"$T/g3.stats"
same_file "$T/g.stats" "$T/g3.stats" "stats -@ 3"
end

# ---------------------------------------------------------------- head
begin "head"
moe head -n 2 -O t --no-PG "$T/small.moet" >"$T/h2"
expect_eq "$(grep -vc '^@' "$T/h2")" 2 "head -n 2 records"
head -n 2 "$T/small.rec" >"$T/h2.want"
grep -v '^@' "$T/h2" >"$T/h2.rec"
same_file "$T/h2.want" "$T/h2.rec" "head -n 2"
grep -q '^@CO	hand-written test trace$' "$T/h2" || fail "head drops the header text"
moe head -n 100 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/h100"
same_file "$T/small.rec" "$T/h100" "head -n 100 of 5 tokens"
moe head -O t --no-PG "$T/g.moet" | grep -vc '^@' >"$T/hdef"
expect_eq "$(cat "$T/hdef")" 10 "head default count"
moe head -n 0 -O t --no-PG "$T/small.moet" >"$T/h0"
expect_eq "$(grep -vc '^@' "$T/h0")" 0 "head -n 0 records"
expect_eq "$(head -n 1 "$T/h0" | cut -f1-3)" "@MT${TAB}VN:1.0${TAB}layers:3" "head -n 0 header"
moe head -n 3 -O t --no-PG - <"$T/small.txt" | grep -v '^@' >"$T/hstdin"
head -n 3 "$T/small.rec" >"$T/h3.want"
same_file "$T/h3.want" "$T/hstdin" "head from stdin"
# Default output is binary.
moe head -n 2 -o "$T/h.moet" "$T/small.moet"
expect_eq "$(od -An -tx1 -N2 "$T/h.moet" | tr -d ' ')" 1f8b "head default format (gzip magic)"
end

# ---------------------------------------------------------------- slice
begin "slice"
moe slice --layers 1-2 -O t --no-PG "$T/small.moet" >"$T/s12"
expect_eq "$(head -n 1 "$T/s12" | cut -f3)" "layers:2" "sliced header"
grep -v '^@' "$T/s12" >"$T/s12.rec"
cut -f1-5,7,8 "$T/small.rec" >"$T/s12.want"
same_file "$T/s12.want" "$T/s12.rec" "slice --layers 1-2"
moe slice --layers 0 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/s0.rec"
cut -f1-6 "$T/small.rec" >"$T/s0.want"
same_file "$T/s0.want" "$T/s0.rec" "slice --layers 0"
moe slice --layers 0-2 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/sall.rec"
same_file "$T/small.rec" "$T/sall.rec" "slice of every layer"
# Missing cells survive slicing; stats of the slice count them.
moe slice --layers 2 -o "$T/s2.moet" "$T/small.moet"
expect_eq "$(stat_of "$T/s2.moet" missing_cells)" 1 "missing cells in layer 2"
expect_eq "$(stat_of "$T/s2.moet" layers)" 1 "layers of the slice"
expect_exit 1 moe slice --layers 1-3 -o "$T/bad.moet" "$T/small.moet"
expect_err_line "outside the trace's 3 layers"
expect_no_output "$T/bad.moet"
# With weights: ids and weights move together.
moe gen -L 4 -E 8 -k 2 -n 50 -s 2 -w -S 3 --no-PG -O t >"$T/w.txt"
moe slice --layers 2-3 -O t --no-PG "$T/w.txt" | grep -v '^@' >"$T/w23.rec"
grep -v '^@' "$T/w.txt" | cut -f1-5,8,9 >"$T/w23.want"
same_file "$T/w23.want" "$T/w23.rec" "slice with weights"
end

# ---------------------------------------------------------------- cat
begin "cat"
moe cat -O t --no-PG "$T/small.moet" "$T/small.txt" "$T/small.moet" >"$T/c3"
expect_eq "$(grep -vc '^@' "$T/c3")" 15 "records of three copies"
cat "$T/small.rec" "$T/small.rec" "$T/small.rec" >"$T/c3.want"
grep -v '^@' "$T/c3" >"$T/c3.rec"
same_file "$T/c3.want" "$T/c3.rec" "cat of three copies"
expect_eq "$(grep -c '^@MT' "$T/c3")" 1 "one header"
moe cat -O t --no-PG - <"$T/small.moet" | grep -v '^@' >"$T/c1.rec"
same_file "$T/small.rec" "$T/c1.rec" "cat from stdin"
# Different shapes: a clear error, exit 1, no output.
moe gen -L 3 -E 8 -k 2 -n 20 -s 2 -o "$T/e8.moet"
moe gen -L 2 -E 4 -k 2 -n 20 -s 2 -o "$T/l2.moet"
moe gen -L 3 -E 4 -k 1 -n 20 -s 2 -o "$T/k1.moet"
moe gen -L 3 -E 4 -k 2 -n 20 -s 2 -w -o "$T/w.moet"
for other in e8 l2 k1 w; do
    expect_exit 1 moe cat -o "$T/cat.moet" "$T/small.moet" "$T/$other.moet"
    expect_err_line "differs from '$T/small.moet'"
    expect_no_output "$T/cat.moet"
done
expect_exit 1 moe cat -o "$T/cat.moet" "$T/small.moet" "$T/e8.moet"
expect_err_line \
    "'$T/e8.moet': shape 3 layers, 8 experts, top-2 differs from '$T/small.moet' (3, 4, top-2)"
# Same shape, other hidden size and text: allowed (the first header wins).
moe gen -L 3 -E 4 -k 2 -n 20 -s 2 --hidden 7 -o "$T/h7.moet"
expect_exit 0 moe cat -O t --no-PG "$T/small.moet" "$T/h7.moet"
expect_eq "$(grep -vc '^@' "$T/out")" 25 "records of a same-shape cat"
expect_eq "$(head -n 1 "$T/out" | cut -f6)" "hidden:1024" "header of the first input"
end

# ---------------------------------------------------------------- sample
begin "sample"
moe sample -n 3 -S 4 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/n3"
expect_eq "$(wc -l <"$T/n3" | tr -d ' ')" 3 "sample -n 3"
# A subset of the input, in input order.
expect_eq "$(grep -vxFf "$T/small.rec" "$T/n3" | wc -l | tr -d ' ')" 0 "sampled lines not in input"
sort -n "$T/n3" | cmp -s - "$T/n3" || fail "sample -n not in input order"
moe sample -n 10 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/n10"
same_file "$T/small.rec" "$T/n10" "sample -n larger than the input"
moe sample -n 0 -O t --no-PG "$T/small.moet" | grep -vc '^@' >"$T/n0"
expect_eq "$(cat "$T/n0")" 0 "sample -n 0"
# Exactly N over a larger trace, for several seeds.
for s in 1 2 3; do
    expect_eq "$(moe sample -n 777 -S $s -O t "$T/g.moet" | grep -vc '^@')" 777 \
        "sample -n 777 -S $s"
done
# By sequence: whole sequences only.
moe sample -n 2 --by-sequence -S 9 -O t --no-PG "$T/small.moet" | grep -v '^@' >"$T/bs"
nseq=$(cut -f2 "$T/bs" | sort -u | wc -l | tr -d ' ')
expect_eq "$nseq" 2 "sequences kept by --by-sequence -n 2"
for q in $(cut -f2 "$T/bs" | sort -u); do
    awk -F'\t' -v q="$q" '$2 == q' "$T/small.rec" >"$T/bs.want"
    awk -F'\t' -v q="$q" '$2 == q' "$T/bs" >"$T/bs.got"
    same_file "$T/bs.want" "$T/bs.got" "sequence $q kept whole"
done
# -n 0 by sequence keeps none (it once read the cut from before the sorted hashes).
expect_eq "$(moe sample -n 0 --by-sequence -O t "$T/small.moet" | grep -vc '^@')" 0 \
    "sample -n 0 --by-sequence"
expect_exit 1 moe sample -n 2 --by-sequence - <"$T/small.moet"
expect_err_line "needs a file"
moe sample -p 0.5 --by-sequence -S 3 -O t "$T/g.moet" | grep -v '^@' >"$T/bsp"
moe view --no-header "$T/g.moet" >"$T/g.rec"
for q in $(cut -f2 "$T/bsp" | sort -u); do
    a=$(awk -F'\t' -v q="$q" '$2 == q' "$T/g.rec" | wc -l)
    b=$(awk -F'\t' -v q="$q" '$2 == q' "$T/bsp" | wc -l)
    [ "$a" = "$b" ] || fail "sequence $q: $b of $a tokens kept by -p --by-sequence"
done
end

# ---------------------------------------------------------------- split
begin "split"
moe split --ids 0,2 --train "$T/tr.moet" --test "$T/te.moet" --no-PG "$T/small.moet"
records "$T/tr.moet" >"$T/tr.rec"
records "$T/te.moet" >"$T/te.rec"
awk -F'\t' '$2 == 0 || $2 == 2' "$T/small.rec" >"$T/tr.want"
awk -F'\t' '$2 == 1' "$T/small.rec" >"$T/te.want"
same_file "$T/tr.want" "$T/tr.rec" "training part"
same_file "$T/te.want" "$T/te.rec" "test part"
# Both parts carry the input's header.
moe view -H --no-PG "$T/tr.moet" >"$T/tr.hdr"
grep '^@' "$T/small.txt" >"$T/hdr.want"
same_file "$T/hdr.want" "$T/tr.hdr" "header of the training part"
# view -h/-H as in samtools view: -h with the header (the default), -H the header only.
moe view -h --no-PG "$T/tr.moet" >"$T/tr.h"
moe view --no-PG "$T/tr.moet" >"$T/tr.all"
same_file "$T/tr.all" "$T/tr.h" "view -h: header and records"
moe view -H -h --no-PG "$T/tr.moet" >"$T/tr.hH"
same_file "$T/hdr.want" "$T/tr.hH" "view -H -h: the header only"
# Sequences not in the trace: an empty part is still a valid trace.
moe split --ids 100-200 --train "$T/tr2.moet" --test "$T/te2.moet" "$T/small.moet"
expect_eq "$(stat_of "$T/tr2.moet" tokens)" 0 "empty training part"
expect_eq "$(stat_of "$T/te2.moet" tokens)" 5 "full test part"
# --ratio 0 and 1.
moe split --ratio 1 --train "$T/tr3.moet" --test "$T/te3.moet" "$T/g.moet"
expect_eq "$(stat_of "$T/tr3.moet" tokens)" 5000 "--ratio 1 training tokens"
expect_eq "$(stat_of "$T/te3.moet" tokens)" 0 "--ratio 1 test tokens"
moe split --ratio 0 --train "$T/tr4.moet" --test "$T/te4.moet" "$T/g.moet"
expect_eq "$(stat_of "$T/tr4.moet" tokens)" 0 "--ratio 0 training tokens"
# Text output of both parts.
moe split --ids 1 -O t --train "$T/tr5.txt" --test "$T/te5.txt" "$T/small.moet"
expect_eq "$(head -c 3 "$T/tr5.txt")" "@MT" "split -O t"
end

finish
