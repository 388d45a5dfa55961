#!/bin/sh
# tests/cli/run_train.sh -- moe-run --train: training steps on 8 ranks replaying DeepSeek-V2-Lite
# routing with a moe-place placement, and on 8 ranks with a computed gate, in fp32 and bf16,
# in all five modes: --check compares the first step's loss
# and every gradient, and the loss of every step, with the serial reference model trained alike
# (SGD and Adam); the loss falls, the modes and rank counts give the same losses; each of
# MPMoE's memory-reuse strategies trains the same function below the activation peak of none;
# replicated experts train; a rank killed in training ends the job; what does not train yet
# is refused.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
run_data 256
# LeakSanitizer (slow under MPI, run_lib.sh) checks the computed-gate vanilla and datacentric
# cases. The ASan build looks for memory errors: bf16 runs the same code as fp32 but for the
# wire's packing, which the first case covers, so there the other cases run in fp32 only.
asan=$(ldd "${top_builddir:-.}/lib/.libs/libmoecore.so" 2>/dev/null | grep libasan)
dts="fp32 bf16"
# the computed-gate cases: 8 ranks on 2 nodes; under ASan (slow, leak-checked) 4 ranks, whose
# code paths are the same, and the replayed datacentric and hierarchical cases are left to the
# computed-gate ones
cg=8 cgn=4 replayed_modes="datacentric coherent hierarchical"
[ -z "$asan" ] || { dts=fp32 cg=4 cgn=2 replayed_modes=coherent; }

# falls FILE: the JSON's losses fall from the first to the last
falls() {
    tr -d '\n' <"$1" | sed -n 's/.*"losses": \[\([^]]*\)\].*/\1/p' | tr ',' '\n' |
        awk 'NR == 1 { a = $1 } { b = $1 } END { exit !(NR >= 2 && b < a) }'
}

losses() { tr -d '\n' <"$1" | sed -n 's/.*"losses": \[\([^]]*\)\].*/\1/p'; }
# bwd_bytes FILE: the backward's intra- and inter-node bytes per step; fwd_bytes FILE: the
# forward's
bwd_bytes() { sed -n 's/.*"backward_bytes": {"intra": \([0-9]*\), "inter": \([0-9]*\)}.*/\1 \2/p' "$1"; }
fwd_bytes() { echo "$(json_list "$1" total_bytes_intra) $(json_list "$1" total_bytes_inter)"; }
# within FILE LO HI: the backward moves LO to HI times the forward's bytes on each link class
within() {
    set -- "$1" "$2" "$3" "$(fwd_bytes "$1")" "$(bwd_bytes "$1")"
    awk -v lo="$2" -v hi="$3" -v f="$4" -v b="$5" 'BEGIN { split(f, x, " "); split(b, y, " ")
        for (c = 1; c <= 2; c++) if (y[c] < lo * x[c] || y[c] > hi * x[c]) exit 1
        exit !(y[1] + y[2] > 0) }' || fail "backward bytes $5 not $2-$3 x the forward's $4"
}
# scaled FILE NUM DEN: the backward moves the forward's bytes x NUM / DEN on each link class
scaled() {
    set -- "$1" "$2" "$3" "$(fwd_bytes "$1")" "$(bwd_bytes "$1")"
    awk -v n="$2" -v d="$3" -v f="$4" -v b="$5" 'BEGIN { split(f, x, " "); split(b, y, " ")
        exit !(x[1] * n == y[1] * d && x[2] * n == y[2] * d && y[1] + y[2] > 0) }' ||
        fail "backward bytes $5 are not forward's $4 x $2 / $3"
}
peak() { sed -n 's/.*"peak_activation_bytes": \([0-9]*\).*/\1/p' "$1"; }

for dt in fp32 bf16; do
    begin "replayed, 8 ranks, $dt: --train --check passes and the loss falls"
    expect_exit 0 mpi_noleak 8 --train --trace "$T/ds.mft" --placement "$T/p8.moep" \
        --hidden 32 --ffn 24 --iters 3 --warmup 0 --check --dtype $dt --json "$T/r$dt.json"
    grep -q 'check against the serial training (loss and gradients) reference: .*: ok$' \
        "$T/out" || fail "no passing check line"
    grep -q '"ok": true' "$T/r$dt.json" || fail "JSON lacks a passing check"
    falls "$T/r$dt.json" || fail "the loss does not fall"
    # each row's gradient out and its reply [dx | dweights] back: (H + H + K) / (H + H), H 32
    scaled "$T/r$dt.json" 70 64
    # a step's parts (the ranks' mean) add up to the step (the slowest rank's; barriers end it)
    awk -v f="$(json_list "$T/r$dt.json" forward_ms)" -v b="$(json_list "$T/r$dt.json" backward_ms)" \
        -v u="$(json_list "$T/r$dt.json" update_ms)" -v t="$(json_list "$T/r$dt.json" iteration_ms)" \
        'BEGIN { s = f + b + u; exit !(f > 0 && b > 0 && u > 0 && s <= 1.001 * t && s >= 0.8 * t) }' ||
        fail "step parts do not add up to the step"
    end
done

begin "pipelined, 3 chunks, replayed, 8 ranks: --check passes, vanilla's losses, less memory"
expect_exit 0 mpi_noleak 8 --train --mode pipelined --chunks 3 --trace "$T/ds.mft" \
    --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 3 --warmup 0 --check \
    --json "$T/p.json"
grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
# the same function: the losses to the rounding of sums taken in another order (1e-6)
same_losses() {
    awk -v a="$(losses "$1")" -v b="$(losses "$2")" 'BEGIN {
        n = split(a, x, ", "); m = split(b, y, ", "); if (n != m || n < 2) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-6 * y[i]) exit 1 }
    }' || fail "losses $(losses "$1") against $(losses "$2")"
}
same_losses "$T/p.json" "$T/rfp32.json"
[ "$(peak "$T/p.json")" -lt "$(peak "$T/rfp32.json")" ] ||
    fail "activation peak $(peak "$T/p.json") not below vanilla's $(peak "$T/rfp32.json")"
grep -q '"peak_rss_bytes": [1-9]' "$T/p.json" || fail "no peak RSS"
end

# MPMoE's memory reuse on the pipelined shape, where the paper finds its savings (n > 1
# partitions): every strategy trains the same function and holds less at once than none
offload() { sed -n 's/.*"peak_offload_bytes": \([0-9]*\).*/\1/p' "$1"; }
grep -q '"reuse": "none"' "$T/p.json" || fail "the default reuse is not none"
[ "$(offload "$T/p.json")" = 0 ] || fail "none offloads $(offload "$T/p.json") bytes"
strategies="S1 S2 S3 S4"
[ -z "$asan" ] || strategies="S2 S3" # between them every way to keep or restore T_DI and T_M
for s in $strategies; do
    begin "pipelined, 3 chunks, --reuse $s: --check passes, the same losses, below none's peak"
    expect_exit 0 mpi_noleak 8 --train --mode pipelined --chunks 3 --reuse $s \
        --trace "$T/ds.mft" --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 3 \
        --warmup 0 --check --json "$T/s$s.json"
    grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
    grep -q "\"reuse\": \"$s\"" "$T/s$s.json" || fail "JSON does not name $s"
    same_losses "$T/s$s.json" "$T/p.json"
    [ "$(peak "$T/s$s.json")" -lt "$(peak "$T/p.json")" ] ||
        fail "activation peak $(peak "$T/s$s.json") not below none's $(peak "$T/p.json")"
    case $s in
    S4) [ "$(offload "$T/s$s.json")" = 0 ] || fail "S4 offloads" ;;
    *) [ "$(offload "$T/s$s.json")" -gt 0 ] || fail "$s offloads nothing" ;;
    esac
    # S2 and S4 re-send each row with its gradient (2 H wide), S1 and S3 the gradient alone
    case $s in S2 | S4) scaled "$T/s$s.json" 102 64 ;; *) scaled "$T/s$s.json" 70 64 ;; esac
    end
done

if [ -z "$asan" ]; then # auto only chooses a strategy the cases above ran
begin "--reuse auto: the MPMoE model picks one of S1-S4 and says which"
expect_exit 0 mpi_noleak 8 --train --mode pipelined --chunks 2 --reuse auto -v \
    --trace "$T/ds.mft" --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 1 --warmup 0 \
    --json "$T/auto.json"
grep -q '^moe-run: --reuse auto: S[1-4] (MPMoE model, 2 chunks' "$T/err" ||
    fail "no message naming the choice"
expect_eq "$(grep -c '^moe-run: --reuse auto' "$T/err")" 1 "messages of the choice"
grep -q '"reuse": "S[1-4]"' "$T/auto.json" || fail "JSON does not name the choice"
end
fi

for mode in $replayed_modes; do
    case $mode in
    datacentric) what="pulled experts' gradients go to their owners" ;;
    coherent) what="the gradients follow the tokens' homes back" ;;
    hierarchical) what="the gradients of relayed rows are summed in the node" ;;
    esac
    for dt in $dts; do
        begin "$mode, replayed, 8 ranks, $dt: $what"
        expect_exit 0 mpi_noleak 8 --train --mode $mode --gpus-per-node 4 --trace "$T/ds.mft" \
            --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 3 --warmup 0 --check \
            --dtype $dt --json "$T/$mode$dt.json"
        grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
        [ $dt = bf16 ] || same_losses "$T/$mode$dt.json" "$T/rfp32.json"
        falls "$T/$mode$dt.json" || fail "the loss does not fall"
        # the experts not kept pulled again along the forward's schedule and all their
        # gradients back along it: 1 to 2 times the forward's bytes on each class
        [ $mode != datacentric ] || within "$T/$mode$dt.json" 1 2
        end
    done
done

if [ -z "$asan" ]; then
begin "datacentric, every pulled expert kept (--credits 64): the backward returns gradients only"
expect_exit 0 mpi_noleak 8 --train --mode datacentric --credits 64 --trace "$T/ds.mft" \
    --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 2 --warmup 0 --check \
    --json "$T/dc64.json"
grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
scaled "$T/dc64.json" 1 1
[ "$(peak "$T/dc64.json")" -gt "$(peak "$T/datacentricfp32.json")" ] ||
    fail "keeping every pulled expert does not raise the activation peak"
end

# the pulled experts' gradients come back as they are ready, in an order that changes from
# run to run: they must be added in the schedule's order all the same (added as they arrive,
# 5 of 6 runs of this case gave different losses)
begin "datacentric, replayed, fp32: a rerun's losses are the same to the last digit"
for i in 1 2 3; do
    expect_exit 0 mpi_noleak 8 --train --mode datacentric --gpus-per-node 4 \
        --trace "$T/ds.mft" --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 4 \
        --warmup 0 --lr 0.5 --dtype fp32 --json "$T/dcr$i.json"
done
expect_eq "$(losses "$T/dcr2.json")" "$(losses "$T/dcr1.json")" "losses of a rerun"
expect_eq "$(losses "$T/dcr3.json")" "$(losses "$T/dcr1.json")" "losses of a second rerun"
[ -n "$(losses "$T/dcr1.json")" ] || fail "no losses"
end

# three chunks in flight, their replies progressed between experts: the same losses as a
# rerun, and as vanilla's to the rounding of sums in another order
begin "pipelined, 4 chunks, three in flight: a rerun's losses are the same to the last digit"
for i in 1 2; do
    expect_exit 0 mpi_noleak 8 --train --mode pipelined --chunks 4 --gpus-per-node 4 \
        --trace "$T/ds.mft" --placement "$T/p8.moep" --hidden 32 --ffn 24 --iters 3 \
        --warmup 0 --dtype fp32 --json "$T/ppr$i.json"
done
expect_eq "$(losses "$T/ppr2.json")" "$(losses "$T/ppr1.json")" "losses of a rerun"
same_losses "$T/ppr1.json" "$T/rfp32.json"
end
fi

# The computed gate in every mode (its own gradient through the softmax over the chosen
# logits); under ASan vanilla, hierarchical and datacentric, whose code the others share
cg_modes="vanilla coherent pipelined hierarchical datacentric"
[ -z "$asan" ] || cg_modes="vanilla hierarchical datacentric"
for mode in $cg_modes; do
    extra=
    case $mode in pipelined | hierarchical) extra="--chunks 2" ;; esac
    for dt in $dts; do
        begin "computed gate, $mode, $cg ranks on 2 nodes, $dt: --train --check passes, the loss falls"
        # shellcheck disable=SC2086
        expect_exit 0 mpi $cg --train --mode $mode $extra --gpus-per-node $cgn --layers 3 \
            --experts 8 --topk 2 --hidden 16 --ffn 12 --iters 4 --warmup 0 --lr 0.2 --check \
            --dtype $dt --json "$T/g$mode$dt.json"
        grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
        falls "$T/g$mode$dt.json" || fail "the loss does not fall"
        [ $mode != hierarchical ] || grep -q '"reuse": "S4"' "$T/g$mode$dt.json" ||
            fail "JSON does not say S4"
        end
    done
done
cp "$T/gvanillafp32.json" "$T/gfp32.json"

begin "Adam, computed gate, $cg ranks, bf16: the loss curve matches the reference's and falls"
expect_exit 0 mpi_noleak $cg --train --optimizer adam --gpus-per-node $cgn --layers 3 --experts 8 \
    --topk 2 --hidden 16 --ffn 12 --iters 5 --warmup 1 --check --dtype bf16 --json "$T/a.json"
grep -q '# training, Adam lr 0.001: loss per iteration' "$T/out" || fail "no Adam loss line"
grep -q '"optimizer": "adam"' "$T/a.json" || fail "JSON lacks the optimizer"
grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
falls "$T/a.json" || fail "the loss does not fall"
end

for ex in swiglu silu; do
    begin "$ex experts, computed gate, $cg ranks, bf16: per-layer references, gradients within 1e-2"
    # the per-layer reference keeps the wire's rounding to one layer: every gradient, the
    # inputs' included, within 1e-2 (the whole-model reference differed by 2-5% with SwiGLU),
    # and so are the output's gradient from the reference's own loss and the loss curve
    expect_exit 0 mpi_noleak $cg -v --train --expert $ex --gpus-per-node $cgn --layers 3 \
        --experts 8 --topk 2 --hidden 16 --ffn 12 --iters 2 --warmup 0 --lr 0.2 --check \
        --dtype bf16 --json "$T/x.json"
    grep -q "\"expert\": \"$ex\"" "$T/x.json" || fail "JSON lacks the expert kind"
    sed -n 's/.*fed with the run.s rows, routing and output gradient: //p' "$T/err" |
        tr ',;' '\n\n' | awk '{ n++; if ($NF + 0 > 1e-2) bad = 1 } END { exit bad || n != 6 }' ||
        fail "gradient differences: $(grep 'fed with' "$T/err")"
    end
done

if [ -z "$asan" ]; then # reruns of what ran above: their outputs, not their memory, are checked
begin "the same seed gives the same losses; one rank agrees with $cg (fp32, 1e-6)"
expect_exit 0 mpi_noleak $cg --train --gpus-per-node $cgn --layers 3 --experts 8 --topk 2 \
    --hidden 16 --ffn 12 --iters 4 --warmup 0 --lr 0.2 --dtype fp32 --json "$T/again.json"
expect_eq "$(losses "$T/again.json")" "$(losses "$T/gfp32.json")" "losses of a rerun"
expect_exit 0 "$MOE_BIN/moe-run" --train --layers 3 --experts 8 --topk 2 --hidden 16 --ffn 12 \
    --tokens-per-rank $((cg * 64)) --iters 4 --warmup 0 --lr 0.2 --json "$T/one.json"
same_losses "$T/one.json" "$T/gfp32.json"
grep -q '"train": null' "$T/rfp32.json" && fail "a training run's JSON says train null"
expect_exit 0 "$MOE_BIN/moe-run" --layers 2 --experts 4 --tokens-per-rank 8 --iters 1 \
    --json "$T/plain.json"
grep -q '"train": null' "$T/plain.json" || fail "JSON without --train: train should be null"
end
fi

for mode in vanilla coherent pipelined hierarchical datacentric; do
    begin "--lr 1e3 diverges, $mode, 2 ranks: --check fails, the JSON writes the loss null"
    # the loss reaches inf, then nan: a comparison with a non-finite value is never a pass,
    # and JSON has no NaN (issue 42, items 3 and 4)
    expect_exit 1 mpi_noleak 2 --train --mode $mode --lr 1e3 --layers 2 --experts 4 \
        --topk 2 --hidden 16 --ffn 12 --iters 4 --warmup 0 --check --json "$T/nan.json"
    grep -q 'check against the serial training .*: FAILED$' "$T/out" || fail "no failed check"
    grep -q '^# training diverged: the loss is not finite from iteration [0-9]* on' "$T/out" ||
        fail "the text report does not say the loss diverged"
    grep -qi 'nan\|inf' "$T/nan.json" && fail "non-finite numbers in the JSON"
    grep -q '"losses": \[[^]]*null' "$T/nan.json" || fail "the diverged loss is not null"
    if have python3; then
        python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/nan.json" ||
            fail "the JSON does not parse"
    fi
    end
done

begin "what does not train yet is refused"
R=$MOE_BIN/moe-run
expect_exit 2 "$R" --train --mode hierarchical --reuse S1
expect_tool_usage moe-run "" "--reuse: hierarchical mode restores by re-communication and \
re-computation only (S4)"
expect_exit 2 "$R" --train --calibrate
expect_tool_usage moe-run "" "--calibrate takes neither --json, --check nor --train"
expect_exit 2 "$R" --train --lr -1
expect_tool_usage moe-run "" "learning rate"
expect_exit 2 "$R" --train --optimizer lamb
expect_tool_usage moe-run "" "unknown optimizer 'lamb' (sgd, adam)"
expect_exit 2 "$R" --train --reuse S5
expect_tool_usage moe-run "" "unknown reuse strategy 'S5' (none, S1, S2, S3, S4, auto)"
expect_exit 2 "$R" --reuse S1
expect_tool_usage moe-run "" "--reuse applies to training in the expert-parallel modes"
expect_exit 2 "$R" --train --mode datacentric --reuse S4
expect_tool_usage moe-run "" "--reuse applies to training in the expert-parallel modes"
end

# Replicated experts: each copy takes the gradient of the tokens it served, the copies sum
# theirs and take the same update: the same function as one copy each (vanilla's losses)
"$MOE_BIN/moe-place" fit --no-PG --ranks 8 --gpus-per-node 4 --method balanced --replicas 8 \
    -o "$T/rep.moep" "$T/ds.mft" || fail "fit with replicas"
rep_modes="vanilla datacentric"
[ -z "$asan" ] || rep_modes=vanilla
for mode in $rep_modes; do
    begin "replicated experts (8 extra copies), $mode: --check passes, vanilla's losses"
    expect_exit 0 mpi_noleak 8 --train --mode $mode --trace "$T/ds.mft" \
        --placement "$T/rep.moep" --hidden 32 --ffn 24 --iters 3 --warmup 0 --check \
        --json "$T/rep.json"
    grep -q 'reference: .*: ok$' "$T/out" || fail "no passing check line"
    same_losses "$T/rep.json" "$T/rfp32.json"
    end
done

# vanilla, and the two modes whose backward has point-to-point transfers in flight
for kill_mode in vanilla "datacentric --gpus-per-node 2" \
    "pipelined --chunks 3 --gpus-per-node 2"; do
begin "a rank killed in its backward, --mode $kill_mode: every rank ends in seconds"
# the victim runs with -vv and is killed as soon as it says that its backward began; the
# backward of this shape takes far longer than the poll's 50 ms
L="--train --hidden 128 --ffn 128 --layers 2 --tokens-per-rank 256 --iters 1000000"
L="$L --mode $kill_mode"
# shellcheck disable=SC2016
victim='"$0" "$@" -vv 2>"$LOG" & p=$!
while kill -0 $p 2>/dev/null && ! grep -q ": backward (loss" "$LOG"; do sleep 0.05; done
kill -9 $p 2>/dev/null; wait $p'
t0=$(date +%s)
# shellcheck disable=SC2086
# a log of its own each time: the poll may read it before the victim's shell truncates it
log="$T/victim-${kill_mode%% *}.log"
rm -f "$log"
run env $NOLEAK_ENV LOG="$log" timeout -k 5 60 "$MPIRUN" --oversubscribe -np 3 \
    "$MOE_BIN/moe-run" $L : -np 1 sh -c "$victim" "$MOE_BIN/moe-run" $L
secs=$(($(date +%s) - t0))
[ "$rc" != 0 ] || fail "exit status 0"
[ "$rc" != 124 ] || fail "hung until the test's timeout"
[ "$secs" -le 30 ] || fail "took $secs s (bound 30 s)"
grep -q ": backward (loss" "$log" || fail "the victim never reached its backward"
end
done

finish
