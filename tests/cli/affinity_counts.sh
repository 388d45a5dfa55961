#!/bin/sh
# tests/cli/affinity_counts.sh -- moe-affinity counts exactly: a hand-computed trace (golden
# table and explicit rows), transition sums of tokens x K^2 per pair with missing cells
# excluded and reported, the same results from every input format, thread count and kernel,
# deterministic shuffles, and tables that read back.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/affinity_lib.sh"

SMALL=$AFF_DATA/small.txt

begin "hand-computed trace: golden table (loads, transitions, hops 2, co-activation)"
run aff --no-PG --hops 2 "$SMALL"
golden affinity_small
expect_no_stderr
end

# Rows worked out by hand in tests/unit/test_affinity.c (hop, layer, expert, row load, counts).
begin "hand-computed trace: transition rows, row loads and exclusions"
aff --no-PG --hops 2 "$SMALL" >"$T/small.aff"
for want in "TC 1 0 0 4 1 4 2 1" "TC 1 0 1 3 1 3 2 0" "TC 1 0 2 1 0 1 0 1" "TC 1 0 3 0 0 0 0 0" \
    "TC 1 1 0 1 1 1 0 0" "TC 1 1 1 4 2 2 2 2" "TC 1 1 2 2 0 0 2 2" "TC 1 1 3 1 1 1 0 0" \
    "TC 2 0 0 4 2 2 2 2" "TC 2 0 1 3 1 1 2 2" "TC 2 0 2 2 2 1 0 1" "TC 2 0 3 1 1 0 0 1" \
    "LOAD 1 1 4 2 1" "CO 2 3 1 0 2 3" "LAYER 1 4 1"; do
    tr '\t' ' ' <"$T/small.aff" | grep -q "^$want" || fail "no line '$want'"
done
expect_eq "$(summary_of "$SMALL" mean_max_conditional)" 0.937500 "mean_max_conditional"
expect_eq "$(summary_of "$SMALL" excluded_tokens)" 2 "excluded tokens (both pairs)"
expect_eq "$(summary_of "$SMALL" missing_cells)" 1 "missing cells"
end

begin "top-1: the first id of each cell"
aff --no-PG --top1 "$SMALL" >"$T/top1.aff"
for want in "TC 1 0 0 3 1 2 0 0" "TC 1 0 1 1 0 0 1 0" "TC 1 1 1 2 1 0 1 0" "TC 1 1 2 1 0 0 0 1"; do
    tr '\t' ' ' <"$T/top1.aff" | grep -q "^$want" || fail "no line '$want'"
done
end

# A synthetic trace with missing cells: gen, then blank some cells in the text view.
moe gen -L 5 -E 12 -k 3 -n 3000 -s 30 -S 17 --no-PG -O t -o "$T/gen.txt" || fail "gen"
awk -F '\t' 'BEGIN { OFS = "\t" } /^@/ { print; next }
    { if (NR % 7 == 0) $7 = "."; if (NR % 11 == 0) $9 = "."; print }' "$T/gen.txt" >"$T/miss.txt"
moe view --no-PG -O b -o "$T/miss.moet" "$T/miss.txt" || fail "view -O b"

# check_sums TABLE NPAIRS: in every pair the transitions add up to (tokens - excluded) x S^2,
# in the trace and in its shuffle, and there are exclusions (the trace has missing cells).
check_sums() {
    awk -F '\t' -v npairs="$2" '
    $1 == "@AF" { for (i = 2; i <= NF; i++) { split($i, kv, ":"); af[kv[1]] = kv[2] } }
    $1 == "PAIR" { ex[$2 " " $3] = $5; exs[$2 " " $3] = $10; pairs++ }
    $1 == "TC" || $1 == "TS" { s = 0; for (i = 6; i <= NF; i++) s += $i; sum[$1 " " $2 " " $3] += s }
    END {
        k2 = af["sets"] * af["sets"]; bad = 0
        for (p in ex) {
            if (sum["TC " p] != (af["tokens"] - ex[p]) * k2) { print "TC", p, sum["TC " p]; bad++ }
            if (sum["TS " p] != (af["tokens"] - exs[p]) * k2) { print "TS", p, sum["TS " p]; bad++ }
            excl += ex[p]
        }
        if (excl == 0) { print "no exclusions"; bad++ }
        if (pairs != npairs) { print "pairs", pairs; bad++ }
        exit bad != 0
    }' "$1" >"$T/awk.out" || fail "transition sums of $1: $(head -3 "$T/awk.out")"
}

begin "sum of transitions = (tokens - excluded) x K^2 per pair, real and shuffled"
aff --no-PG --hops 3 "$T/miss.moet" >"$T/miss.aff"
check_sums "$T/miss.aff" 9
aff --no-PG --window 7 "$T/miss.moet" >"$T/miss7.aff"
check_sums "$T/miss7.aff" 4
aff --no-PG --top1 "$T/miss.moet" >"$T/miss1.aff"
check_sums "$T/miss1.aff" 4
expect_eq "$(summary_of "$T/miss.moet" missing_cells)" \
    "$(awk -F '\t' '!/^@/ { for (i = 6; i <= NF; i++) m += ($i == ".") } END { print m }' \
        "$T/miss.txt")" "missing cells reported"
expect_eq "$(summary_of "$T/miss.moet" excluded_tokens)" \
    "$(awk -F '\t' '$1 == "PAIR" && $2 == 1 { e += $5 } END { print e }' "$T/miss.aff")" \
    "excluded tokens reported"
end

begin "same table from binary, text, gzipped text and stdin, any -@, any kernel"
aff --no-PG "$T/miss.moet" >"$T/ref.aff"
gzip -c "$T/miss.txt" >"$T/miss.txt.gz"
for args in "$T/miss.txt" "$T/miss.txt.gz" "-@ 1 $T/miss.moet" "-@ 3 $T/miss.moet" \
    "--kernel scalar $T/miss.moet" "--window 1000 --window 8192 $T/miss.moet"; do
    # shellcheck disable=SC2086
    run aff --no-PG $args
    expect_eq "$rc" 0 "exit status of $args"
    same_file "$T/out" "$T/ref.aff" "table of $args"
done
run aff --no-PG - <"$T/miss.moet"
same_file "$T/out" "$T/ref.aff" "table from stdin"
for k in avx2 avx512; do
    if aff --kernel $k --summary "$SMALL" >/dev/null 2>&1; then
        run aff --no-PG --kernel $k "$T/miss.moet"
        same_file "$T/out" "$T/ref.aff" "table with kernel $k"
    else
        echo "  (kernel $k not available here)"
    fi
done
end

begin "the shuffle is seeded: same seed same table, other seed other shuffle, real part equal"
aff --no-PG -S 5 "$T/miss.moet" >"$T/s5a"
aff --no-PG -S 5 -@ 2 "$T/miss.moet" >"$T/s5b"
aff --no-PG -S 6 "$T/miss.moet" >"$T/s6"
same_file "$T/s5a" "$T/s5b" "seed 5, -@ 0 and -@ 2"
differ_file "$T/s5a" "$T/s6" "seeds 5 and 6"
grep '^TC' "$T/s5a" >"$T/tc5"
grep '^TC' "$T/s6" >"$T/tc6"
same_file "$T/tc5" "$T/tc6" "real transitions do not depend on the seed"
end

begin "tables read back: compare of a table with its trace, gzipped tables (-O z)"
run aff --no-PG -O z -o "$T/miss.aff.gz" "$T/miss.moet"
expect_eq "$rc" 0 "-O z exit status"
gzip -dc "$T/miss.aff.gz" >"$T/unz.aff" || fail "the -O z output is not gzip"
same_file "$T/unz.aff" "$T/ref.aff" "gzipped table"
run aff compare --summary "$T/miss.aff.gz" "$T/miss.moet"
expect_eq "$rc" 0 "compare exit status"
expect_eq "$(awk '$1 == "tv_mean" { print $2 }' "$T/out")" 0.000000 "tv of a table vs its trace"
expect_eq "$(awk '$1 == "ma_common" { print $2 }' "$T/out")" 1.000000 "most affiliated in common"
end

begin "@PG provenance: the table records the trace's header lines and this command"
aff -o "$T/pg.aff" "$SMALL"
grep -q '^@CO	hand-computed' "$T/pg.aff" || fail "trace @CO line not carried"
grep -q '^@PG	ID:moe-affinity	PN:moe-affinity' "$T/pg.aff" || fail "no @PG line"
end

finish
