#!/bin/sh
# tests/cli/replica_rule.sh -- --replica-rule nearest|even|positional|sglang-static
# (moeflow(7), "Replicas") in moe-place eval and fit, moe-costmodel simulate and moe-run:
# nearest is the default, byte for byte; the others change the counts, and under each rule
# simulate's counts equal eval's and moe-run's measured bytes per rank (4 MPI ranks replaying
# 96 tokens on a placement with replicas) equal eval's prediction; ranks given different rules
# are refused. The MPI cases skip without mpirun or an MPI build; the rest always run.
# tests/cli/replica_ref.sh checks the rules themselves against vLLM's and SGLang's.
. "${top_srcdir:-.}/tests/cli/lib.sh"

mp() { moe_tool moe-place "$@"; }
cm() { moe_tool moe-costmodel "$@"; }

# 4 ranks recorded in the trace (the accounting's and moe-run's source ranks), 2 nodes x 2;
# balanced gives several experts two or three copies in every layer
moe gen --no-PG -L 3 -E 8 -k 2 -n 96 -s 8 -r 4 -w --hidden 8 --elem-bytes 4 -S 3 \
    -o "$T/t.moet" &&
    mp fit --no-PG --ranks 4 --gpus-per-node 2 --method balanced --replicas 4 \
        -o "$T/p.moep" "$T/t.moet" || { echo "cannot make the test inputs"; exit 99; }
grep -q '	[0-9],[0-9]' "$T/p.moep" || { echo "the placement has no replicas"; exit 99; }
cat >"$T/c.topo" <<'TOPO'
topology test-2x2
nodes 2
gpus-per-node 2
link intra bandwidth 100 GB/s latency 2 us
link inter bandwidth 10 GB/s latency 5 us
flops 100 TFLOP/s
TOPO

begin "eval: nearest is the default, byte for byte; even differs and says so"
for fmt in "" --json; do
    expect_exit 0 mp eval $fmt "$T/p.moep" "$T/t.moet"
    cp "$T/out" "$T/default"
    expect_exit 0 mp eval $fmt --replica-rule nearest "$T/p.moep" "$T/t.moet"
    same_file "$T/out" "$T/default" "eval $fmt --replica-rule nearest"
    for rule in even positional sglang-static; do
        expect_exit 0 mp eval $fmt --replica-rule $rule "$T/p.moep" "$T/t.moet"
        differ_file "$T/out" "$T/default" "eval $fmt --replica-rule $rule"
    done
done
for rule in even positional sglang-static; do
    expect_exit 0 mp eval --json --replica-rule $rule "$T/p.moep" "$T/t.moet"
    grep -q "\"replica_rule\": \"$rule\"" "$T/out" || fail "the JSON does not name $rule"
done
grep -q 'replica_rule' "$T/default" && fail "the default JSON names a rule"
expect_exit 0 mp eval --replica-rule even "$T/p.moep" "$T/t.moet"
grep -q '^# trace: .*, replica rule: even$' "$T/out" || fail "the table does not name the rule"
# the same trace on a placement without copies: the rule cannot matter
expect_exit 0 mp fit --no-PG --ranks 4 --gpus-per-node 2 --method contiguous \
    -o "$T/c.moep" "$T/t.moet"
expect_exit 0 mp eval --json "$T/c.moep" "$T/t.moet"
cp "$T/out" "$T/c.near"
expect_exit 0 mp eval --json --replica-rule even "$T/c.moep" "$T/t.moet"
sed 's/"replica_rule": "even", //' "$T/out" >"$T/c.even"
same_file "$T/c.even" "$T/c.near" "without replicas the rules agree"
end

begin "a bad rule is a usage error"
for cmd in "mp eval" "cm simulate --topology $T/c.topo"; do
    run $cmd --replica-rule random "$T/p.moep" "$T/t.moet"
    expect_eq "$rc" 2 "$cmd: exit status"
    grep -q "unknown replica rule 'random' (nearest, even, positional, sglang-static)" \
        "$T/err" ||
        fail "$cmd: $(head -n 1 "$T/err")"
    expect_eq "$(wc -l <"$T/err" | tr -d ' ')" 2 "$cmd: stderr lines"
done
run "$MOE_BIN/moe-run" --replica-rule near
expect_eq "$rc" 2 "moe-run: exit status"
grep -q "^moe-run: unknown replica rule 'near'" "$T/err" || fail "moe-run: $(cat "$T/err")"
end

# counts FILE: the per-layer cells and transfers, and per_token_layer, of a JSON report
counts() { grep -o '"cells": [0-9]*, "transfers": [0-9]*\|"per_token_layer": [0-9.e+-]*' "$1"; }

begin "simulate: nearest is the default; under each rule its counts are eval's"
expect_exit 0 cm simulate --topology "$T/c.topo" "$T/t.moet" "$T/p.moep"
cp "$T/out" "$T/default"
expect_exit 0 cm simulate --topology "$T/c.topo" --replica-rule nearest "$T/t.moet" "$T/p.moep"
same_file "$T/out" "$T/default" "simulate --replica-rule nearest"
grep -q '^# trace: .* tokens$' "$T/out" || fail "the default names a rule"
for rule in nearest even positional sglang-static; do
    expect_exit 0 mp eval --json --replica-rule $rule "$T/p.moep" "$T/t.moet"
    counts "$T/out" >"$T/eval.$rule"
    expect_exit 0 cm simulate --json --topology "$T/c.topo" --replica-rule $rule \
        "$T/t.moet" "$T/p.moep"
    counts "$T/out" >"$T/sim.$rule"
    expect_eq "$(wc -l <"$T/eval.$rule" | tr -d ' ')" 8 "eval counts ($rule)"
    same_file "$T/sim.$rule" "$T/eval.$rule" "simulate's counts differ from eval's ($rule)"
done
differ_file "$T/eval.even" "$T/eval.nearest" "the two rules' counts"
differ_file "$T/eval.positional" "$T/eval.even" "positional against even"
differ_file "$T/eval.sglang-static" "$T/eval.nearest" "sglang-static against nearest"
expect_exit 0 cm simulate --topology "$T/c.topo" --replica-rule sglang-static "$T/t.moet" \
    "$T/p.moep"
grep -q '^# trace: .* tokens, replica rule: sglang-static$' "$T/out" ||
    fail "the table lacks the sglang-static rule"
expect_exit 0 cm simulate --topology "$T/c.topo" --replica-rule even "$T/t.moet" "$T/p.moep"
grep -q '^# trace: .* tokens, replica rule: even$' "$T/out" || fail "the table lacks the rule"
end

begin "fit: nearest is the default; even is named in @FT and the placement is valid"
for rule in "" "--replica-rule nearest" "--replica-rule even" "--replica-rule sglang-static"; do
    expect_exit 0 mp fit --no-PG --ranks 4 --gpus-per-node 2 --replicas 2 --time-limit 5 \
        $rule -o "$T/f${rule##* }.moep" "$T/t.moet"
done
same_file "$T/fnearest.moep" "$T/f.moep" "fit --replica-rule nearest"
grep -q '^@FT.*	replica_rule:even	' "$T/feven.moep" || fail "@FT does not name the rule"
grep -q 'replica_rule' "$T/f.moep" && fail "the default @FT names a rule"
expect_exit 0 mp check "$T/feven.moep"
grep -q '^@FT.*	replica_rule:sglang-static	' "$T/fsglang-static.moep" ||
    fail "@FT does not name sglang-static"
end

# ------------------------------------------------------------------ moe-run
MPIRUN=$(command -v mpirun 2>/dev/null)
if [ -z "$MPIRUN" ] || ! "$MOE_BIN/moe-run" --version | grep -q '(MPI)'; then
    begin "moe-run under both rules"
    skip_case "no mpirun or moe-run without MPI"
    finish
fi
. "$top_srcdir/tests/cli/run_lib.sh"

A="--trace $T/t.moet --placement $T/p.moep --hidden 8 --ffn 8 --iters 1 --warmup 0"
A="$A --tokens-per-rank 24"
for scheme in vanilla coherent; do
    begin "moe-run $scheme: bytes per rank equal eval's under each rule"
    expect_exit 0 mpi_noleak 4 --mode $scheme $A --json "$T/r.json"
    json_list "$T/r.json" sent >"$T/sent.default"
    for rule in nearest even positional sglang-static; do
        expect_exit 0 mpi_noleak 4 --mode $scheme --replica-rule $rule $A --json "$T/r.json"
        grep -q 'equal on every rank' "$T/out" || fail "$rule: the report does not say equal"
        grep -q "\"replica_rule\": \"$rule\"" "$T/r.json" || fail "$rule: not in the JSON"
        json_list "$T/r.json" sent >"$T/sent.$rule"
        mp eval --scheme $scheme --replica-rule $rule --hidden 8 --elem-bytes 4 \
            --matrix-bytes "$T/m.txt" "$T/p.moep" "$T/t.moet" >/dev/null ||
            fail "moe-place eval failed"
        awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }' "$T/m.txt" >"$T/want"
        expect_eq "$(wc -l <"$T/sent.$rule" | tr -d ' ')" 4 "$rule: ranks reported"
        same_file "$T/sent.$rule" "$T/want" "$rule: bytes per rank against eval"
    done
    same_file "$T/sent.nearest" "$T/sent.default" "nearest against no option"
    differ_file "$T/sent.even" "$T/sent.nearest" "the rules' bytes"
    end
done

begin "ranks given different rules are refused"
run timeout -k 5 60 "$MPIRUN" --oversubscribe -np 1 "$MOE_BIN/moe-run" $A \
    : -np 1 "$MOE_BIN/moe-run" $A --replica-rule even
expect_eq "$rc" 1 "exit status"
grep -q -F -x "moe-run: ranks disagree on --replica-rule: rank 0 has nearest, rank 1 has even" \
    "$T/err" || fail "$(grep 'moe-run:' "$T/err" | head -n 2)"
end

finish
