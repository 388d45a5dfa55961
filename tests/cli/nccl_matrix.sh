#!/bin/sh
# tests/cli/nccl_matrix.sh -- moe-place eval --matrix against the rules by which nccl-tests'
# alltoallv_perf (v2.19 and later) reads NCCL_TESTS_ALLTOALLV_MATRIX_FILE, re-stated below as
# an awk checker (written from reading src/alltoallv.cu, no code taken): the checker is tried on
# hand-made good and bad files, then on eval's output for generated traces, including the -b/-e
# that eval prints for the run.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-place" ]; then
    echo "MOE_BIN must hold moe-place (got '$MOE_BIN')" >&2
    exit 99
fi

mp() { moe_tool moe-place "$@"; }

# nccl_check FILE N: exit 0 when alltoallv_perf run on N ranks would take FILE, printing the
# smallest -e it accepts; else exit 1 with the reason. The reader's rules:
#  - the whole file is numbers separated by white space (isspace: blank, tab, CR, VT, FF,
#    newline); a number (strtod) must end at white space or the end of the file, so a comma,
#    a '#' comment or any other text is an error;
#  - a row is a line holding at least one number (blank lines do not count); every row has as
#    many numbers as the first; the last line needs no newline;
#  - rows == columns (square), at least one row, and at least as many rows as ranks (only the
#    first N rows and columns are used);
#  - values are bytes, >= 0 (a minus sign is only harmless on zero), finite and below 2^64;
#    fractions are allowed but cut: each cell is rounded down to a multiple of 16 bytes;
#  - -b must equal -e, and -e must be at least the largest total one rank sends (row sum) or
#    receives (column sum) of the rounded cells.
# strtod also takes hexadecimal, "inf" and "nan"; the writer never needs them and inf/nan are
# refused or undefined there, so the checker refuses them.
nccl_check() {
    awk -v n="$2" '
    BEGIN { rows = 0; num = "^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$" }
    {
        line = $0
        gsub(/[ \t\r\v\f]+/, " ", line)
        sub(/^ /, "", line); sub(/ $/, "", line)
        if (line == "") next
        k = split(line, w, " ")
        for (i = 1; i <= k; i++) {
            if (w[i] !~ num) { print "not a number: \"" w[i] "\" (row " rows ")"; bad = 1; exit 1 }
            v = w[i] + 0
            if (v < 0) { print "negative value " w[i]; bad = 1; exit 1 }
            if (v >= 18446744073709551616) { print "value beyond 2^64: " w[i]; bad = 1; exit 1 }
            cell[rows, i - 1] = int(v / 16) * 16
        }
        if (rows == 0) cols = k
        else if (k != cols) { print "row " rows " has " k " values, not " cols; bad = 1; exit 1 }
        rows++
    }
    END {
        if (bad) exit 1
        if (rows == 0) { print "empty"; exit 1 }
        if (rows != cols) { print "not square: " rows "x" cols; exit 1 }
        if (rows < n) { print rows "x" rows " is smaller than " n " ranks"; exit 1 }
        need = 0
        for (i = 0; i < n; i++) {
            s = 0; r = 0
            for (j = 0; j < n; j++) { s += cell[i, j]; r += cell[j, i] }
            if (s > need) need = s
            if (r > need) need = r
        }
        printf "%.0f\n", need
    }' "$1"
}

# accept FILE N NEED / reject FILE N: the checker's verdict on a hand-made file.
accept() {
    got=$(nccl_check "$1" "$2") || { fail "$1 refused: $got"; return; }
    expect_eq "$got" "$3" "smallest -e for $1"
}
reject() {
    nccl_check "$1" "$2" >/dev/null && fail "$1 accepted, the reader refuses it"
}

cd "$T" || exit 1

begin "the checker: files alltoallv_perf takes and refuses"
# the reader's own kind of example: blanks of any width, a tab, CR LF, blank lines, no final
# newline; 100 and 150 round down to 96 and 144
printf '100  200\t150\r\n\n50   100  75\n  300  150  200  ' >good3.txt
accept good3.txt 3 624
accept good3.txt 2 288   # the first two rows and columns only
printf '0 16\n32 0\n' >good2.txt
accept good2.txt 2 32
printf '1.5e3 0\n0 0.0\n' >exp.txt
accept exp.txt 2 1488
printf '0,16\n32,0\n' >comma.txt               # a comma after a number
reject comma.txt 2
printf '0.000000,0.500000\n1.000000,0.000000\n' >old.txt   # moe-place's old fractions
reject old.txt 2
printf '# bytes\n0 16\n32 0\n' >comment.txt     # no comments
reject comment.txt 2
printf '0 16 8\n32 0 8\n' >wide.txt             # 2x3
reject wide.txt 2
printf '0 16\n32\n' >ragged.txt
reject ragged.txt 2
printf '0 -16\n32 0\n' >neg.txt
reject neg.txt 2
printf '0 1e400\n32 0\n' >huge.txt
reject huge.txt 2
printf '0 inf\n32 0\n' >inf.txt
reject inf.txt 2
printf '0 16x\n32 0\n' >text.txt
reject text.txt 2
printf '\n \n' >blank.txt
reject blank.txt 1
reject good2.txt 3                              # fewer rows than ranks
end

# eval_case TRACE PLACEMENT G: --matrix passes the checker as a G x G matrix, the -b/-e
# printed are equal and exactly the smallest -e the run accepts, the cells are the whole
# trace's bytes (--matrix-bytes) over layers x 2 phases, rounded to 16 bytes.
eval_case() {
    run mp eval --matrix m.txt --matrix-bytes mb.txt -o r.txt "$2" "$1"
    expect_eq "$rc" 0 "eval --matrix on $G ranks"
    need=$(nccl_check m.txt "$3") || fail "--matrix refused: $need"
    expect_eq "$(nccl_check m.txt "$(($3 + 1))" >/dev/null; echo $?)" 1 "a $3 x $3 matrix"
    expect_eq "$(grep -c . m.txt)" "$3" "rows of --matrix"
    hint=$(grep 'nccl-tests:' "$T/err")
    b=$(echo "$hint" |
        sed -n 's/.* -b \([0-9]*\) -e \([0-9]*\) -f 2 on \([0-9]*\) ranks$/\1 \2 \3/p')
    expect_eq "$b" "$need $need $3" "-b -e and ranks printed ($hint)"
    expect_eq "$(grep -c . "$T/err")" 1 "stderr lines"
    echo "$hint" | grep -q "NCCL_TESTS_ALLTOALLV_MATRIX_FILE=m.txt alltoallv_perf" ||
        fail "no command line: $hint"
    L=$(sed -n 's/.*: \([0-9]*\) layers x.*/\1/p' r.txt)
    paste m.txt mb.txt | awk -v g="$3" -v x="$((L * 2))" '{
        for (i = 1; i <= g; i++) { d = $i - $(i + g) / x; if (d > 8 || d < -8 || $i % 16) bad = 1 }
    } END { exit bad }' || fail "--matrix is not --matrix-bytes / $((L * 2)) to 16 bytes"
}

begin "eval --matrix on 4 ranks and on 2 nodes x 4 passes the checker"
moe gen -L 4 -E 16 -k 2 -n 3000 -s 30 -r 4 -S 3 --hidden 64 --elem-bytes 2 --no-PG -o g.moet ||
    fail "cannot make the trace"
G=4
mp fit --no-PG --ranks 4 -o p4.moep g.moet || fail "fit 4"
eval_case g.moet p4.moep 4
G=8
mp fit --no-PG --ranks 8 --gpus-per-node 4 -o p8.moep g.moet || fail "fit 8"
eval_case g.moet p8.moep 8
run mp eval -q --matrix m.txt -o r.txt p8.moep g.moet
expect_no_stderr
end

begin "eval --matrix without the vector size: vectors, scaled by the run"
moe gen -L 2 -E 8 -k 2 -n 500 -s 10 -r 4 -S 4 --no-PG -o nv.moet || fail "cannot make the trace"
mp fit --no-PG --ranks 4 -o nv.moep nv.moet || fail "fit"
run mp eval --matrix m.txt -o r.txt nv.moep nv.moet
expect_eq "$rc" 0 "eval --matrix"
nccl_check m.txt 4 >/dev/null || fail "--matrix refused: $(nccl_check m.txt 4)"
grep -q 'NCCL_TESTS_ALLTOALLV_MATRIX_SCALE=V alltoallv_perf -b S -e S -f 2 on 4 ranks' "$T/err" ||
    fail "no scaled command line: $(cat "$T/err")"
# S is the largest row or column sum of the vectors
s=$(awk '{ for (i = 1; i <= NF; i++) { r[NR] += $i; c[i] += $i } }
    END { for (i in r) if (r[i] > m) m = r[i]
          for (i in c) if (c[i] > m) m = c[i]
          printf "%.3f", m }' m.txt)
grep -q "S = $s x V" "$T/err" || fail "S is not $s: $(cat "$T/err")"
end

finish
