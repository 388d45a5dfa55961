#!/bin/sh
# tests/cli/run_agree.sh -- ranks given different options (MPMD command lines) are refused
# before any communication: exit 1 within seconds, one line naming the option and two ranks'
# values, never a hang, a crash, a raw MPI error or a silent run (issue 17, item 1).
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"

R=$MOE_BIN/moe-run
"$MOE_BIN/moe-trace" gen -n 400 -s 5 -L 2 -E 4 -k 2 -r 4 -S 3 --no-PG -o "$T/p4.moet" || exit 99
"$MOE_BIN/moe-place" fit --no-PG --ranks 4 --method contiguous -o "$T/p.moep" "$T/p4.moet" ||
    exit 99
A="--hidden 16 --ffn 16 --warmup 0 --trace $T/p4.moet --placement $T/p.moep"

# The refused runs go without LeakSanitizer (NOLEAK_ENV, run_lib.sh): under ASan its slow
# unwinder made each 4-rank start-up cost ~12 s; the last case, a run that goes through,
# keeps it.

# differ ONE_RANK_OPTIONS MESSAGE: ranks 0, 2, 3 run with $A --iters 1, rank 1 with
# ONE_RANK_OPTIONS added; exit 1 (a hang meets the 60 s timeout: 124) within 50 s (MPI
# start-up of 4 ranks under ASan on a loaded 2-core machine takes 30-40 s) and exactly one
# line 'moe-run: MESSAGE'.
differ() {
    begin "rank 1 alone has $1"
    _t0=$(date +%s)
    run env $NOLEAK_ENV timeout -k 5 60 "$MPIRUN" --oversubscribe -np 1 "$R" $A --iters 1 \
        : -np 1 "$R" $A --iters 1 $1 : -np 2 "$R" $A --iters 1
    _secs=$(($(date +%s) - _t0))
    expect_eq "$rc" 1 "exit status"
    [ "$_secs" -le 50 ] || fail "took $_secs s"
    _n=$(grep -c '^moe-run: ' "$T/err")
    expect_eq "$_n" 1 "moe-run messages on stderr"
    grep -q -F -x "moe-run: $2" "$T/err" || fail "no line 'moe-run: $2'"
    if grep -q -i 'MPI_ERR\|signal\|segmentation' "$T/err"; then
        fail "raw MPI error or crash"
    fi
    end
}

# the four of issue 17 first: a hang, a hang, a segmentation fault, MPI_ERR_TRUNCATE, exit 0
differ "--iters 3" "ranks disagree on --iters: rank 0 has 1, rank 1 has 3"
differ "--check" "ranks disagree on --check: rank 0 has off, rank 1 has on"
differ "--mode coherent" "ranks disagree on --mode: rank 0 has vanilla, rank 1 has coherent"
differ "--hidden 32" "ranks disagree on --hidden: rank 0 has 16, rank 1 has 32"
differ "--gpus-per-node 1" \
    "ranks disagree on --gpus-per-node: rank 0 has the default, rank 1 has 1"
differ "--warmup 2" "ranks disagree on --warmup: rank 0 has 0, rank 1 has 2"
differ "--ffn 8" "ranks disagree on --ffn: rank 0 has 16, rank 1 has 8"
differ "--dtype bf16" "ranks disagree on --dtype: rank 0 has fp32, rank 1 has bf16"
differ "--expert silu" "ranks disagree on --expert: rank 0 has swiglu, rank 1 has silu"
differ "--seed 7" "ranks disagree on --seed: rank 0 has 1, rank 1 has 7"
differ "--tokens-per-rank 8" \
    "ranks disagree on --tokens-per-rank: rank 0 has 64, rank 1 has 8"
differ "--credits 2" "ranks disagree on --credits: rank 0 has 4, rank 1 has 2"
differ "--no-prefetch" "ranks disagree on --no-prefetch: rank 0 has off, rank 1 has on"
differ "--layers 2" "ranks disagree on --layers: rank 0 has the default, rank 1 has 2"
differ "--json $T/r.json" "ranks disagree on --json: rank 0 has none, rank 1 has a file"
differ "--backend cpu --calibrate" \
    "ranks disagree on --calibrate: rank 0 has off, rank 1 has on"

begin "--chunks on pipelined ranks: 2 against auto"
P="$A --iters 1 --mode pipelined"
run env $NOLEAK_ENV timeout -k 5 60 "$MPIRUN" --oversubscribe -np 2 "$R" $P --chunks 2 : -np 2 "$R" $P
expect_eq "$rc" 1 "exit status"
grep -q -F -x "moe-run: ranks disagree on --chunks: rank 0 has 2, rank 2 has the default" \
    "$T/err" || fail "no --chunks message"
end

begin "--topology on one rank only"
printf 'name t\nnodes 1\ngpus_per_node 4\n' >"$T/t.topo"
run env $NOLEAK_ENV timeout -k 5 60 "$MPIRUN" --oversubscribe -np 3 "$R" $A --iters 1 \
    : -np 1 "$R" $A --iters 1 --topology "$T/t.topo"
expect_eq "$rc" 1 "exit status"
grep -q "^moe-run: ranks disagree on --topology: rank 0 has none, rank 3 has " "$T/err" ||
    fail "no --topology message"
end

begin "the same options everywhere still run (another path to the same trace is fine)"
cp "$T/p4.moet" "$T/copy.moet"
run timeout -k 5 60 "$MPIRUN" --oversubscribe -np 2 "$R" $A --iters 1 \
    : -np 2 "$R" --hidden 16 --ffn 16 --warmup 0 --trace "$T/copy.moet" \
    --placement "$T/p.moep" --iters 1
expect_eq "$rc" 0 "exit status"
end

finish
