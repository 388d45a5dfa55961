#!/bin/sh
# tests/cli/train_update_bytes.sh -- moe-run --train sums a replicated expert's gradient among
# the ranks holding it (run_train_reduce.c): each holder sends its copy's gradient, fp32, to
# the n - 1 other holders, and an expert with one holder sends nothing. The JSON's
# train.update_bytes (per step, per rank) must equal the figures computed by hand below, in
# every mode, with --check passing; a placement without replicas sends none.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"

# 3 ranks, 2 layers of 4 experts, H 32, F 24, SwiGLU: an expert is W = 3 H F = 2304 floats,
# 9216 bytes. Layer 0: expert 0 on ranks 0,1,2 (each sends 2 x 9216), expert 1 on 0,1 (9216
# each); layer 1: expert 3 on 0,2 (9216 each); the rest one copy each.
#   rank 0: 18432 + 9216 + 9216 = 36864
#   rank 1: 18432 + 9216        = 27648
#   rank 2: 18432 + 9216        = 27648
# (the world-wide fp64 all-reduce it replaces sent 3 experts x 18432 bytes on every rank).
tab=$(printf '\t')
{
    echo "@PL${tab}VN:1.0${tab}layers:2${tab}experts:4${tab}ranks:3${tab}gpus_per_node:3${tab}capacity:3"
    for row in 0:0:0,1,2 0:1:0,1 0:2:2 0:3:1 1:0:0 1:1:1 1:2:2 1:3:0,2; do
        echo "$row" | tr ':' '\t'
    done
} >"$T/rep.moep"
{
    echo "@PL${tab}VN:1.0${tab}layers:2${tab}experts:4${tab}ranks:3${tab}gpus_per_node:3${tab}capacity:2"
    for row in 0:0:0 0:1:1 0:2:2 0:3:0 1:0:1 1:1:2 1:2:0 1:3:1; do
        echo "$row" | tr ':' '\t'
    done
} >"$T/one.moep"
common="--train --layers 2 --experts 4 --topk 2 --hidden 32 --ffn 24 --tokens-per-rank 16
--iters 2 --warmup 1 --check"
upd() { tr -d '\n' <"$1" | sed -n 's/.*"update_bytes": \[\([^]]*\)\].*/\1/p'; }

for mode in vanilla coherent pipelined hierarchical datacentric; do
    begin "$mode: replicated experts' update bytes are their holders' copies"
    # shellcheck disable=SC2086
    expect_exit 0 mpi 3 --mode "$mode" $common --placement "$T/rep.moep" --json "$T/r.json"
    grep -q ': ok$' "$T/out" || fail "--train --check does not pass"
    [ "$(upd "$T/r.json")" = "36864, 27648, 27648" ] ||
        fail "update_bytes [$(upd "$T/r.json")], expected [36864, 27648, 27648]"
    end
done

begin "no replicated expert: no update bytes"
# shellcheck disable=SC2086
expect_exit 0 mpi 3 $common --placement "$T/one.moep" --json "$T/r.json"
grep -q ': ok$' "$T/out" || fail "--train --check does not pass"
[ "$(upd "$T/r.json")" = "0, 0, 0" ] || fail "update_bytes [$(upd "$T/r.json")], expected zeros"
end

finish
