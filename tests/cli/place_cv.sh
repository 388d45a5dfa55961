#!/bin/sh
# tests/cli/place_cv.sh -- moe-place fit's cross-validation, --memory and --tune: the @FT
# line's in-sample figures are moe-place eval's on the fit data; held-out figures come from
# fits that did not see the fold (a trace whose sequences each route their own way is fitted
# far better in-sample than held out); one long sequence is folded in blocks of tokens;
# --memory's slot counts, groups and replicas; byte-identical for any -@ and --tune.

. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }

# ft FILE FIELD: a field of the @FT line of a placement ('' when absent)
ft() { sed -n "s/^@FT.*	$2:\([^	]*\).*/\1/p" "$1"; }
# cv FILE FIELD: a cross-validation field of the @FT line (folds, done, unit, block, units
# are cv_FIELD there)
cv() {
    case $2 in folds | done | unit | block | units) ft "$1" "cv_$2" ;; *) ft "$1" "$2" ;; esac
}
# col REPORT SCHEME COLUMN: a column of eval's SCHEME line (3 per_token_layer, 12 max_load)
col() { awk -v s="$2" -v c="$3" '$1 == "SCHEME" && $2 == s { print $c }' "$1"; }
# close A B: A and B agree to 4 decimals
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d < 0.00006 && d > -0.00006) }'; }

# 16 sequences of 24 top-1 tokens over 4 layers of 4 experts. Sequence s routes every token
# through its own permutation P_s of the experts, layer to layer (P_s drawn by an LCG), so what
# one sequence does says nothing about another: a fit seeing a sequence places its path
# together, a fit without it cannot.
awk 'BEGIN {
    x = 12345
    for (s = 0; s < 16; s++) {
        for (i = 0; i < 4; i++) p[i] = i
        for (i = 3; i > 0; i--) {
            x = (x * 1103515245 + 12345) % 2147483648
            k = int(x / 65536) % (i + 1)
            t = p[i]; p[i] = p[k]; p[k] = t
        }
        for (t = 0; t < 24; t++) {
            e = t % 4
            line = e
            for (j = 1; j < 4; j++) { e = p[e]; line = line " " e }
            print line > "'"$T"'/seq.txt"
            print "s" s " prefill " t > "'"$T"'/seq.meta"
        }
    }
}'
moe import -q --no-PG --meta "$T/seq.meta" -o "$T/seq.moet" "$T/seq.txt" ||
    { echo "cannot import the test trace"; exit 1; }
G1=$T/g1.moet
moe gen -L 4 -E 16 -k 2 -n 3000 -s 30 -r 4 -S 3 --no-PG -o "$G1" ||
    { echo "cannot make the test trace"; exit 1; }

begin "cross-validation: in-sample figures are eval's on the fit data"
expect_exit 0 mp fit --no-PG --ranks 4 -o "$T/a.moep" "$G1"
expect_no_stderr
[ "$(cv "$T/a.moep" folds)" = 4 ] && [ "$(cv "$T/a.moep" done)" = 4 ] ||
    fail "no 4-fold cross-validation: $(grep '^@FT' "$T/a.moep")"
[ "$(cv "$T/a.moep" unit)" = sequence ] && [ "$(cv "$T/a.moep" units)" = 30 ] ||
    fail "30 sequences folded: $(grep '^@FT' "$T/a.moep")"
mp eval --no-layers -o "$T/e" "$T/a.moep" "$G1" || fail "eval"
close "$(cv "$T/a.moep" in_xfer)" "$(col "$T/e" coherent 3)" ||
    fail "in-sample transfers $(cv "$T/a.moep" in_xfer) vs eval $(col "$T/e" coherent 3)"
close "$(cv "$T/a.moep" in_load)" "$(col "$T/e" coherent 12)" ||
    fail "in-sample load $(cv "$T/a.moep" in_load) vs eval $(col "$T/e" coherent 12)"
mp fit --no-PG --ranks 4 --method contiguous -o "$T/c.moep" "$G1" &&
    mp eval --no-layers -o "$T/ec" "$T/c.moep" "$G1" || fail "contiguous fit or eval"
close "$(cv "$T/a.moep" vanilla_contiguous)" "$(col "$T/ec" vanilla 3)" ||
    fail "baseline $(cv "$T/a.moep" vanilla_contiguous) vs eval $(col "$T/ec" vanilla 3)"
grep -q 'cv_folds' "$T/c.moep" && fail "a fixed layout learns nothing: no cross-validation"
mp fit --no-PG --ranks 4 --cv 0 -o "$T/n.moep" "$G1" || fail "--cv 0"
grep -q 'cv_folds' "$T/n.moep" && fail "--cv 0 cross-validated"
mp fit --no-PG --ranks 4 --method balanced --cv 3 -o "$T/b.moep" "$G1" || fail "balanced"
[ "$(cv "$T/b.moep" done)" = 3 ] || fail "balanced --cv 3: $(grep '^@FT' "$T/b.moep")"
end

begin "held-out figures come from fits that did not see the fold"
# 16 sequences, 4 folds: every fold fit misses the paths of the fold it is scored on
for m in affinity exflow; do
    mp fit --no-PG --ranks 4 --topk 1 --method $m --time-limit 20 -o "$T/s.moep" \
        "$T/seq.moet" || fail "fit --method $m"
    i=$(cv "$T/s.moep" in_hops) h=$(cv "$T/s.moep" held_hops)
    awk -v i="$i" -v h="$h" 'BEGIN { exit !(h > i + 0.3) }' ||
        fail "$m: held-out hops $h not above in-sample $i"
done
end

begin "one long sequence is folded in blocks of consecutive tokens"
awk '{ print "one prefill " NR - 1 }' "$T/seq.txt" >"$T/one.meta"
moe import -q --no-PG --meta "$T/one.meta" -o "$T/one.moet" "$T/seq.txt" || fail "import"
mp fit --no-PG --ranks 4 --topk 1 -o "$T/o.moep" "$T/one.moet" || fail "fit"
# 384 tokens, 4 folds x 4 blocks: blocks of 24 tokens
[ "$(cv "$T/o.moep" unit)" = tokens ] && [ "$(cv "$T/o.moep" block)" = 24 ] &&
    [ "$(cv "$T/o.moep" units)" = 16 ] && [ "$(cv "$T/o.moep" done)" = 4 ] ||
    fail "blocks: $(grep '^@FT' "$T/o.moep")"
end

begin "--memory: slots per rank, groups and replicas"
# 16 experts on 4 ranks: E/G = 4 slots
for c in "1:4:0:" "1.5:6:8:" "1.6:6:8:" "2:8:0:2" "4:16:0:1"; do
    x=${c%%:*} r=${c#*:}
    want_cap=${r%%:*} r=${r#*:}
    want_rep=${r%%:*} want_ep=${r#*:}
    expect_exit 0 mp fit --no-PG --ranks 4 --cv 0 --memory "$x" -o "$T/m.moep" "$G1"
    cap=$(sed -n '1s/.*capacity:\([0-9]*\).*/\1/p' "$T/m.moep")
    [ "$cap" = "$want_cap" ] && [ "$(ft "$T/m.moep" replicas)" = "$want_rep" ] &&
        [ "$(ft "$T/m.moep" ep_size)" = "$want_ep" ] ||
        fail "--memory $x: capacity $cap, $(grep '^@FT' "$T/m.moep" | cut -f8,14)"
    mp check "$T/m.moep" >/dev/null || fail "--memory $x: check"
done
# replicas the contiguous layout cannot place: one line, exit 1
expect_exit 1 mp fit --ranks 4 --method contiguous --memory 1.5 -o "$T/bad.moep" "$G1"
expect_tool_err_line moe-place "--memory 1.5: 6 slots per rank"
[ -e "$T/bad.moep" ] && fail "half-written output"
expect_exit 2 mp fit --ranks 4 --memory 2 --replicas 4 "$G1"
expect_tool_usage moe-place fit "--memory"
expect_exit 2 mp fit --ranks 4 --memory 0.5 "$G1"
expect_tool_usage moe-place fit "memory"
expect_exit 2 mp fit --ranks 4 --cv 1 "$G1"
expect_tool_usage moe-place fit "--cv"
expect_exit 2 mp fit --ranks 4 --cv 0 --tune "$G1"
expect_tool_usage moe-place fit "--tune"
end

begin "--tune: one of the settings it tried, byte-identical for -@ 0 and -@ 1"
mp fit --no-PG --ranks 4 --tune --memory 2 -@ 0 -o "$T/t0.moep" "$G1" &&
    mp fit --no-PG --ranks 4 --tune --memory 2 -@ 1 -o "$T/t1.moep" "$G1" || fail "fit --tune"
same_file "$T/t0.moep" "$T/t1.moep" "--tune -@ 0 vs -@ 1"
# two ways to spend 8 slots (one group with 16 replicas, or two groups) x 4 load bounds
[ "$(cv "$T/t0.moep" tuned)" = 8 ] || fail "settings tried: $(grep '^@FT' "$T/t0.moep")"
case $(ft "$T/t0.moep" max_imbalance) in 1.1 | 1.05 | 1.025 | 0) ;;
*) fail "bound $(ft "$T/t0.moep" max_imbalance) is not one tried" ;;
esac
end

finish
