#!/bin/sh
# tests/cli/affinity_modes.sh -- moe-affinity converge, compare and --by-step on seeded synthetic
# traces: their invariants (the whole trace is its own limit, a trace predicts itself, windows
# partition the tokens), their dependence on the affinity the generator puts in, determinism.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/affinity_lib.sh"

moe gen -L 6 -E 16 -k 2 -n 20000 -s 400 --zipf 0 --affinity 0.9 --fanout 1 -S 21 --no-PG \
    -o "$T/aff.moet" ||
    fail "gen"
moe gen -L 6 -E 16 -k 2 -n 20000 -s 400 --affinity 0 -S 22 --no-PG -o "$T/flat.moet" ||
    fail "gen"

begin "converge: nested samples, the whole trace last and exact, distances shrink"
run aff converge --levels 8 "$T/aff.moet"
expect_eq "$rc" 0 "exit status"
expect_no_stderr
awk '!/^#/ { n++; f[n] = $1; seq[n] = $2; tok[n] = $3; tv[n] = $4; ma[n] = $5 }
    END {
        bad = 0
        if (f[n] != 1 || tok[n] != 20000 || tv[n] != 0 || ma[n] != 1) { print "last line"; bad++ }
        for (i = 2; i <= n; i++)
            if (tok[i] < tok[i - 1] || seq[i] < seq[i - 1] || f[i] != 2 * f[i - 1]) {
                print "not nested at line", i; bad++ }
        if (!(tv[1] > tv[n - 1])) { print "no convergence"; bad++ }
        exit bad != 0 }' "$T/out" >"$T/bad" || fail "convergence table: $(cat "$T/bad")"
run aff converge --levels 8 -@ 2 "$T/aff.moet"
cp "$T/out" "$T/c2"
run aff converge --levels 8 "$T/aff.moet"
same_file "$T/out" "$T/c2" "converge with -@ 2"
run aff converge --levels 8 -S 9 "$T/aff.moet"
differ_file "$T/out" "$T/c2" "converge with another seed"
end

begin "compare: a trace predicts itself; affinity gains over the baseline, no affinity none"
run aff compare "$T/aff.moet" "$T/aff.moet"
expect_eq "$rc" 0 "exit status"
expect_eq "$(awk '$1 == "tv_mean" { print $2 }' "$T/out")" 0.000000 "tv with itself"
expect_eq "$(awk '$1 == "ma_common" { print $2 }' "$T/out")" 1.000000 "ma_common with itself"
[ "$(grep -c '^PAIR' "$T/out")" = 5 ] || fail "expected 5 PAIR lines"
moe split --ratio 0.5 -S 3 --train "$T/a.moet" --test "$T/b.moet" "$T/aff.moet" || fail "split"
g=$(aff compare --summary "$T/a.moet" "$T/b.moet" | awk '$1 == "ll_gain" { print $2 }')
awk -v g="$g" 'BEGIN { exit !(g > 0.2) }' || fail "ll_gain with affinity $g, expected > 0.2"
moe split --ratio 0.5 -S 3 --train "$T/c.moet" --test "$T/d.moet" "$T/flat.moet" || fail "split"
g=$(aff compare --summary "$T/c.moet" "$T/d.moet" | awk '$1 == "ll_gain" { print $2 }')
awk -v g="$g" 'BEGIN { exit !(g < 0.05 && g > -0.05) }' ||
    fail "ll_gain without affinity $g, expected about 0"
end

begin "--by-step: windows partition the tokens; loads per window and layer"
moe gen -L 4 -E 8 -k 2 -n 9000 -s 90 --steps 10 -S 23 --no-PG -o "$T/steps.moet" || fail "gen"
run aff --by-step 4 "$T/steps.moet"
expect_eq "$rc" 0 "exit status"
expect_eq "$(grep -c '^STEP' "$T/out")" 3 "windows of 4 of 10 steps"
expect_eq "$(awk -F '\t' '$1 == "STEP" { t += $5 } END { print t }' "$T/out")" 9000 "tokens"
expect_eq "$(grep -c '^SLOAD' "$T/out")" 12 "SLOAD lines"
awk -F '\t' '$1 == "SLOAD" { s = 0; for (i = 4; i <= NF; i++) s += $i; w[$2] += s }
    $1 == "STEP" { t[$2] = $5 }
    END { for (k in t) if (w[k] != t[k] * 2 * 4) { print k, w[k]; exit 1 } }' "$T/out" ||
    fail "SLOAD sums are not tokens x K x L per window"
aff --by-step 4 -@ 3 "$T/steps.moet" >"$T/s3"
same_file "$T/out" "$T/s3" "--by-step with -@ 3"
awk -F '\t' '$1 == "STEP" && $2 == 1 { exit !($3 == 4 && $4 == 7) }' "$T/out" ||
    fail "window 1 should span steps 4 to 7"
end

begin "--hops: pairs at distance d, a trace with affinity shows it at every hop"
run aff --summary --hops 3 "$T/aff.moet"
for d in "" @2 @3; do
    awk -v k="mean_max_conditional$d" '$1 == k { exit !($2 > $3) }' "$T/out" ||
        fail "mean_max_conditional$d not above its baseline"
done
end

finish
