#!/bin/sh
# tests/cli/run_pmpi.sh -- the collectives moe-run issues, counted by an MPI profiling wrapper
# (tests/unit/pmpi_count.c, linked into tests/unit/moe_run_pmpi) on 2 ranks: a layer's forward
# issues at most 3 collectives in vanilla mode (the count exchange, the rows with their
# metadata, the partial sums), coherent mode no more than vanilla, pipelined mode no more count
# exchanges for its chunks, and no collective carries 0 bytes from every rank (coherent mode's
# combine at top-1 moves nothing and is not issued). Per layer = the difference between a
# 4-layer and a 2-layer run, over the iterations (warm-up included). Skips (77) without
# mpirun or an MPI build.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
PM=${top_builddir:-.}/tests/unit/moe_run_pmpi
[ -x "$PM" ] || { echo "skip: tests/unit/moe_run_pmpi not built"; exit 77; }
[ -x "${top_builddir:-.}/tests/unit/.libs/moe_run_pmpi" ] && PM=$top_builddir/tests/unit/.libs/moe_run_pmpi

# count L I ARGS...: the wrapper's line for a run of L layers and I timed iterations (and one
# warm-up) on 2 ranks
count() {
    _l=$1
    _i=$2
    shift 2
    # shellcheck disable=SC2086
    env $NOLEAK_ENV MOE_PMPI_OUT="$T/pm" timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 \
        -x MOE_PMPI_OUT "$PM" --layers "$_l" --experts 8 --hidden 32 --ffn 16 \
        --tokens-per-rank 64 --iters "$_i" --warmup 1 "$@" >"$T/out" 2>"$T/err" ||
        fail "moe-run $* failed: $(cat "$T/err")"
    cat "$T/pm" >>"$T/pm.all"
    cat "$T/pm"
}
# field LINE NAME: the number after NAME
field() {
    echo "$1" | awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'
}
# per_layer ARGS...: $n, the collectives of a layer's forward in an iteration: what grows
# with layers x iterations, apart from what grows with either alone (set-up and report per
# layer, an iteration's barriers and all-gather), from 2 and 4 layers x 2 and 4 iterations;
# then no run may have issued a collective with 0 bytes from every rank or an empty message
per_layer() {
    : >"$T/pm.all"
    _c=0
    for _r in 4:4:1 2:4:-1 4:2:-1 2:2:1; do
        _l=${_r%%:*}
        _s=${_r##*:}
        _i=${_r#*:}
        _i=${_i%:*}
        _n=$(field "$(count "$_l" "$_i" "$@")" collectives)
        _c=$((_c + _s * _n))
    done
    n=$((_c / 4))
    [ $((_c % 4)) = 0 ] || fail "$*: $_c / 4 collectives: not a whole number a layer"
    if awk '$4 != 0 || $10 != 0' "$T/pm.all" | grep .; then
        fail "$*: collectives with 0 bytes from every rank, or empty messages"
    fi
}

begin "vanilla: at most 3 collectives a layer, none empty"
per_layer --mode vanilla
v=$n
echo "vanilla: $v collectives a layer"
[ "$v" -le 3 ] && [ "$v" -ge 1 ] || fail "vanilla issues $v collectives a layer"
end

begin "coherent: no more than vanilla, at top-2 and at top-1 (whose combine is empty)"
for k in 2 1; do
    per_layer --mode coherent --topk $k
    c=$n
    echo "coherent top-$k: $c collectives a layer"
    [ "$c" -le "$v" ] || fail "coherent top-$k issues $c collectives a layer, vanilla $v"
done
[ "$c" -lt "$v" ] || fail "coherent top-1 still issues the empty combine"
end

begin "pipelined: one count exchange a layer whatever the chunks"
per_layer --mode pipelined --chunks 2
p2=$n
per_layer --mode pipelined --chunks 4
p4=$n
echo "pipelined: $p2 collectives a layer at 2 chunks, $p4 at 4"
# each chunk: its rows and its partials; the counts once
[ "$p2" -le $((1 + 2 * 2)) ] && [ "$p4" -le $((1 + 2 * 4)) ] ||
    fail "pipelined issues $p2 / $p4 collectives a layer at 2 / 4 chunks"
end

begin "the wrapper counts: a run's collectives carry bytes"
line=$(count 2 2 --mode vanilla)
[ "$(field "$line" bytes)" -gt 0 ] || fail "no bytes counted: $line"
end

finish
