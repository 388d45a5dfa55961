#!/bin/sh
# tests/cli/run_guard.sh -- moe-run's runtime on 4 ranks in 2 nodes through the guard backend
# (tests/unit/guard_backend.h: the CPU backend under a GPU's memory rules, where the host cannot
# touch backend memory but through the backend's operations), as the GPU bundle's check step
# runs the modes (tests/gpu/run_modes): every mode, forward and training, fp32 and bf16;
# pipelined training in 3 chunks under each memory-reuse strategy, and with Adam; training that replays a
# trace on a placement with replicated experts. Every run passes its --check and no operation
# reports a violation (a violation fails its run and ends the job; the runtime's own access of
# backend memory ends it with status 3). Skips (77) without mpirun or an MPI build.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
RM=${top_builddir:-.}/tests/gpu/run_modes
[ -x "$RM" ] || { echo "skip: tests/gpu/run_modes not built"; exit 77; }
run_data 256
"$MOE_BIN/moe-place" fit --no-PG --ranks 4 --gpus-per-node 2 --method balanced --replicas 4 \
    -o "$T/rep4.moep" "$T/ds.mft" || exit 99
small="--gpus-per-node 2 --layers 2 --experts 8 --topk 2 --hidden 16 --ffn 12"
small="$small --tokens-per-rank 32 --iters 2 --warmup 1 --train-steps 2"

# guard N ARGS...: run_modes through the guard on 4 ranks; N lines must say PASS, none FAIL
guard() {
    _n=$1
    shift
    # shellcheck disable=SC2086
    expect_exit 0 env $NOLEAK_ENV timeout -k 5 120 "$MPIRUN" --oversubscribe -np 4 "$RM" \
        --backend guard "$@"
    expect_eq "$(grep -c '^run_modes: .* PASS ' "$T/out")" "$_n" "runs that passed"
    grep '^run_modes: .* FAIL' "$T/out" && fail "a run failed"
    grep '^guard: ' "$T/err" && fail "the guard saw a violation"
}

begin "every mode, forward and training, fp32 and bf16: --check passes under the guard"
# shellcheck disable=SC2086
guard 20 --train $small
end

begin "pipelined training, each memory-reuse strategy, and Adam: --check passes"
for s in none S1 S2 S3 S4; do
    # shellcheck disable=SC2086
    guard 1 --train-only --modes pipelined --chunks 3 --dtypes fp32 --reuse $s $small
done
# shellcheck disable=SC2086
guard 2 --train-only --modes pipelined,datacentric --dtypes bf16 --optimizer adam $small
end

begin "a replayed trace, replicated experts, training in vanilla and datacentric mode"
guard 2 --train-only --modes vanilla,datacentric --dtypes fp32 --trace "$T/ds.mft" \
    --placement "$T/rep4.moep" --gpus-per-node 2 --hidden 32 --ffn 24 --iters 2 --warmup 0
end

finish
