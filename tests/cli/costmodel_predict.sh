#!/bin/sh
# tests/cli/costmodel_predict.sh -- moe-costmodel simulate's per-rank transfers are moe-run's: on
# 8 ranks (2 nodes x 4) replaying DeepSeek-V2-Lite routing with a moe-place placement, the
# bytes simulate --ranks says each rank sends on each link class equal those moe-run measured,
# in vanilla, coherent and hierarchical mode (forwards inside the receiving node included);
# and simulate --train counts the peak activation bytes moe-run --train counts, per mode and
# memory-reuse strategy.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
run_data 384
printf 'nodes 2\ngpus-per-node 4\n' >"$T/c.topo"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/c.topo" --hidden 40 --ffn 16 --dtype fp32 \
    --no-layers --ranks "$T/ds.mft" "$T/p8.moep" >"$T/sim.txt" || fail "simulate failed"

for mode in vanilla coherent hierarchical; do
    begin "$mode: bytes each rank sends, by link class, equal simulate's"
    expect_exit 0 mpi 8 --mode "$mode" --trace "$T/ds.mft" --placement "$T/p8.moep" \
        --hidden 40 --ffn 16 --iters 1 --warmup 0 --json "$T/r.json"
    grep '"rank_vector_bytes"' "$T/r.json" >"$T/ranks.json"
    paste -d ' ' "$(json_list "$T/ranks.json" intra >"$T/gi"; echo "$T/gi")" \
        "$(json_list "$T/ranks.json" inter >"$T/ge"; echo "$T/ge")" >"$T/got"
    awk -F '\t' -v m="$mode" '$1 == "RANK" && $2 == m { print $4, $5 }' "$T/sim.txt" >"$T/want"
    expect_eq "$(wc -l <"$T/want" | tr -d ' ')" 8 "ranks simulated"
    same_file "$T/want" "$T/got" "intra/inter-node bytes per rank"
    expect_eq "$(awk '$1 + $2 > 0' "$T/got" | wc -l | tr -d ' ')" 8 "ranks sending bytes"
    end
done

begin "hierarchical sends fewer inter-node bytes than vanilla, more intra-node ones"
awk -F '\t' '$1 == "RANK" { i[$2] += $4; e[$2] += $5 } END {
    exit !(e["hierarchical"] < e["vanilla"] && i["hierarchical"] > i["vanilla"]) }' \
    "$T/sim.txt" || fail "hierarchical does not trade inter- for intra-node bytes"
end
# simulate --train: the bytes of activations and buffers moe-run --train holds at its peak
# are counted from the trace alone: equal where every rank holds the same rows at every
# layer's start (vanilla), within 2% where tokens move (coherent), within 5% where the work
# is cut into chunks or rounds (pipelined, datacentric: simulate counts the mean chunk's or
# round's buffers, the runtime holds its largest one's)
"$MOE_BIN/moe-costmodel" simulate --topology "$T/c.topo" --hidden 40 --ffn 16 --dtype fp32 \
    --chunks 3 --no-layers --train --reuse all "$T/ds.mft" "$T/p8.moep" >"$T/train.txt" ||
    fail "simulate --train failed"
for case in "vanilla none 0" "vanilla S1 0" "vanilla S3 0" "coherent S2 0.02" \
    "pipelined S4 0.05" "datacentric none 0.05"; do
    set -- $case
    begin "simulate --train predicts moe-run's peak activation bytes: $1, $2"
    extra=
    [ "$1" = pipelined ] && extra="--chunks 3"
    [ "$1" = datacentric ] || extra="$extra --reuse $2"
    # shellcheck disable=SC2086
    expect_exit 0 mpi 8 --train --mode "$1" $extra --trace "$T/ds.mft" --placement "$T/p8.moep" \
        --hidden 40 --ffn 16 --iters 1 --warmup 0 --json "$T/r.json"
    got=$(json_list "$T/r.json" peak_activation_bytes)
    want=$(awk -F '\t' -v m="$1" -v s="$2" '$1 == "TRAIN" && $2 == m && $3 == s { print $8 }' \
        "$T/train.txt")
    awk -v g="$got" -v w="$want" -v t="$3" 'BEGIN { d = (w - g) / g; if (d < 0) d = -d
        exit !(g > 0 && d <= t) }' || fail "peak bytes: simulate $want, moe-run $got"
    end
done

begin "simulate --train: one step per scheme and strategy, datacentric none, hierarchical S4"
expect_eq "$(grep -c '^TRAIN' "$T/train.txt")" 17 "TRAIN lines"
expect_eq "$(awk -F '\t' '$1 == "TRAIN" && ($2 == "hierarchical" || $2 == "datacentric") {
    print $2, $3 }' "$T/train.txt" | tr '\n' ,)" "hierarchical S4,datacentric none," "fixed ones"
# with speeds: a step is its forward, backward and update
printf 'link intra bandwidth 1e11 latency 2e-6\nlink inter bandwidth 2.5e10 latency 5e-6\n' |
    cat "$T/c.topo" - >"$T/s.topo"
printf 'flops 1e14\nhbm-bandwidth 2e12\n' >>"$T/s.topo"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/s.topo" --hidden 40 --ffn 16 --no-layers \
    --train --reuse none,S3 "$T/ds.mft" "$T/p8.moep" >"$T/timed.txt" ||
    fail "simulate --train with speeds failed"
expect_eq "$(grep -c '^TRAIN' "$T/timed.txt")" 8 "TRAIN lines of none and S3"
awk -F '\t' '$1 == "TRAIN" { n++; s = $5 + $6 + $7
    if (!($5 > 0 && $6 > 0 && $7 > 0 && s > 0.999 * $4 && s < 1.001 * $4)) exit 1 }
    $1 == "TRAIN" && $2 == "vanilla" { t[$3] = $6 }
    END { exit !(n == 8 && t["S3"] > t["none"]) }' "$T/timed.txt" ||
    fail "steps do not add up, or recomputing T_M (S3) costs no backward time"
# pipelined: its backward's chunks overlap as its forward's, so where the bytes, not the
# latencies, dominate (hidden 2048) its backward is shorter than vanilla's
"$MOE_BIN/moe-costmodel" simulate --topology "$T/s.topo" --hidden 2048 --ffn 1408 --no-layers \
    --chunks 3 --train --reuse none "$T/ds.mft" "$T/p8.moep" >"$T/pipe.txt" ||
    fail "simulate --train --chunks 3 failed"
awk -F '\t' '$1 == "TRAIN" { b[$2] = $6 } END {
    exit !(b["pipelined"] > 0 && b["pipelined"] < b["vanilla"]) }' "$T/pipe.txt" ||
    fail "pipelined's backward is not shorter than vanilla's"
# ranks sharing processors (cores below gpus-per-node): a transfer is a copy by the processors
# the compute needs, so pipelined's chunks add up instead of overlapping, forward and backward
{ cat "$T/s.topo"; echo "cores 1"; } >"$T/shared.topo"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/shared.topo" --hidden 2048 --ffn 1408 \
    --no-layers --chunks 3 --train --reuse none "$T/ds.mft" "$T/p8.moep" >"$T/share.txt" ||
    fail "simulate --train on shared processors failed"
awk -F '\t' '$1 == "TRAIN" { f[$2] = $5; b[$2] = $6 } END {
    exit !(f["pipelined"] > f["vanilla"] && b["pipelined"] > b["vanilla"]) }' "$T/share.txt" ||
    fail "pipelined overlaps transfers with compute on shared processors"
# the optimizer runs on every rank at once: 4 ranks of a node on 1 processor take 4 times
# as long as each alone (the allreduces' part aside)
awk -F '\t' 'FNR == 1 { k++ } $1 == "TRAIN" && $2 == "vanilla" { u[k] = $7 }
    END { exit !(u[1] > 3 * u[2]) }' "$T/share.txt" "$T/pipe.txt" ||
    fail "the optimizer step does not share the processors"
# backward-flops: the backward's FLOPs (twice the forward's with T_M kept: none) at that rate;
# at half the forward's rate, the expert part of the backward doubles
{ cat "$T/s.topo"; echo "backward-flops 5e13"; } >"$T/bwd.topo"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/bwd.topo" --hidden 2048 --ffn 1408 \
    --no-layers --train --reuse none "$T/ds.mft" "$T/p8.moep" >"$T/bwd.txt" ||
    fail "simulate --train with backward-flops failed"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/s.topo" --hidden 2048 --ffn 1408 \
    --no-layers --train --reuse none "$T/ds.mft" "$T/p8.moep" >"$T/fwdrate.txt" ||
    fail "simulate --train failed"
awk -F '\t' 'FNR == 1 { k++ } $1 == "TRAIN" && $2 == "vanilla" { b[k] = $6; f[k] = $5 }
    END { exit !(f[1] == f[2] && b[1] > 1.2 * b[2]) }' "$T/bwd.txt" "$T/fwdrate.txt" ||
    fail "backward-flops does not slow the backward, or changes the forward"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/c.topo" --hidden 40 --ffn 16 --no-layers \
    --train --optimizer adam --json "$T/ds.mft" "$T/p8.moep" >"$T/train.json" ||
    fail "simulate --train --json failed"
expect_eq "$(json_list "$T/train.json" peak_activation_bytes | wc -l | tr -d ' ')" 5 \
    "JSON steps (one strategy, none)"
grep -q '"optimizer": "adam"' "$T/train.json" || fail "JSON lacks the optimizer"
end

begin "simulate: --reuse and --optimizer need --train; unknown names are usage errors"
for bad in "--reuse S1" "--train --reuse S5" "--train --optimizer lbfgs" "--optimizer adam"; do
    # shellcheck disable=SC2086
    "$MOE_BIN/moe-costmodel" simulate --topology "$T/c.topo" $bad "$T/ds.mft" "$T/p8.moep" \
        >/dev/null 2>"$T/err"
    expect_eq "$?" 2 "exit status of simulate $bad"
    head -n 1 "$T/err" | grep -q '^moe-costmodel: ' || fail "no one-line reason for $bad"
done
end
finish
