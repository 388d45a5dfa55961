#!/bin/sh
# tests/cli/affinity_real.sh -- inter-layer affinity of real routing (../shared/traces): DeepSeek
# top-6 sets show mean_max_conditional 0.445 +- 0.005 against about 0.17 shuffled; Mixtral top-1
# shows the trace above its shuffle for every statistic. Skipped (77) without the traces.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/affinity_lib.sh"

SHARED=${MOE_SHARED:-$top_srcdir/../shared}
DS=$SHARED/traces/deepseek-v2-lite-chat
MX=$SHARED/traces/mixtral-8x7b-instruct-fp8
if [ ! -f "$DS/tokens.txt.gz" ] || [ ! -f "$MX/tokens.txt.gz" ]; then
    echo "skip: real traces not found under $SHARED/traces"
    exit 77
fi

# in_range VALUE LO HI WHAT
in_range() {
    awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "" && v >= lo && v <= hi) }' ||
        fail "$4 = '$1', expected in [$2, $3]"
}

moe import --no-PG --meta "$DS/tokens.meta.txt.gz" -o "$T/ds.moet" "$DS/tokens.txt.gz" ||
    { echo "cannot import the DeepSeek trace"; exit 1; }
moe import --no-PG --meta "$MX/tokens.meta.txt.gz" --weights "$MX/tokens.weights.txt.gz" \
    -o "$T/mx.moet" "$MX/tokens.txt.gz" 2>/dev/null ||
    { echo "cannot import the Mixtral trace"; exit 1; }

begin "DeepSeek-V2-Lite top-6: mean_max_conditional 0.445 +- 0.005, shuffled about 0.17"
run aff --summary -@ 1 "$T/ds.moet"
expect_eq "$rc" 0 "exit status"
expect_no_stderr
real=$(awk '$1 == "mean_max_conditional" { print $2 }' "$T/out")
shuf=$(awk '$1 == "mean_max_conditional" { print $3 }' "$T/out")
echo "  mean_max_conditional $real, shuffled $shuf"
in_range "$real" 0.440 0.450 "mean_max_conditional"
in_range "$shuf" 0.160 0.180 "shuffled mean_max_conditional"
expect_eq "$(awk '$1 == "tokens" { print $2 }' "$T/out")" 94165 "tokens"
expect_eq "$(awk '$1 == "excluded_tokens" { print $2 }' "$T/out")" 0 "excluded tokens"
# every statistic that has a baseline stands above it
awk '!/^#/ && $3 != "-" && !($2 > $3) { print; bad = 1 } END { exit bad }' \
    "$T/out" >"$T/bad" || fail "not above the baseline: $(cat "$T/bad")"
end

begin "DeepSeek: other seeds and windows give the same baseline within noise"
for args in "-S 7" "--window 4096" "--window 65536 -S 3"; do
    # shellcheck disable=SC2086
    s=$(aff --summary $args "$T/ds.moet" | awk '$1 == "mean_max_conditional" { print $3 }')
    in_range "$s" 0.160 0.180 "shuffled mean_max_conditional with $args"
done
end

begin "Mixtral top-1: real above shuffled for every statistic"
run aff --summary --top1 "$T/mx.moet"
expect_eq "$rc" 0 "exit status"
cat "$T/out" | sed -n '/mean_max/,$p' | sed 's/^/  /'
n=$(awk '!/^#/ && $3 != "-"' "$T/out" | wc -l | tr -d ' ')
[ "$n" -ge 3 ] || fail "only $n statistics with a baseline"
awk '!/^#/ && $3 != "-" && !($2 > $3) { print; bad = 1 } END { exit bad }' \
    "$T/out" >"$T/bad" || fail "not above the baseline: $(cat "$T/bad")"
in_range "$(awk '$1 == "mean_max_conditional" { print $2 }' "$T/out")" 0.38 0.42 \
    "Mixtral top-1 mean_max_conditional"
end

begin "Mixtral top-1 with --hops 3: every hop above its baseline"
run aff --summary --top1 --hops 3 -S 11 "$T/mx.moet"
awk '!/^#/ && $3 != "-" && !($2 > $3) { print; bad = 1 } END { exit bad }' \
    "$T/out" >"$T/bad" || fail "not above the baseline: $(cat "$T/bad")"
grep -q '^mean_max_conditional@3 ' "$T/out" || fail "no hop-3 statistic"
end

begin "DeepSeek: affinity converges (convergence table) and splits predict each other"
run aff converge "$T/ds.moet"
expect_eq "$rc" 0 "converge exit status"
tail -n 1 "$T/out" | awk '$1 == 1 && $3 == 94165 && $4 == 0 && $5 == 1 { ok = 1 } END { exit !ok }' ||
    fail "the full trace is not its own limit: $(tail -n 1 "$T/out")"
moe split --ids 1-500 --train "$T/a.moet" --test "$T/b.moet" "$T/ds.moet" || fail "split"
run aff compare --summary "$T/a.moet" "$T/b.moet"
gain=$(awk '$1 == "ll_gain" { print $2 }' "$T/out")
in_range "$gain" 0.3 2 "held-out log-likelihood gain over the shuffle (bits per transition)"
in_range "$(awk '$1 == "ma_common" { print $2 }' "$T/out")" 0.6 1 "most affiliated in common"
end

finish
