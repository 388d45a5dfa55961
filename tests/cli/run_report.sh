#!/bin/sh
# tests/cli/run_report.sh -- moe-run's report (only rank 0 prints; header, one line per layer,
# totals), its JSON, and --calibrate's topology file (read back by moe-place).
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"

begin "one report from 4 ranks: header, a line per layer, totals"
expect_exit 0 mpi 4 --layers 3 --experts 8 --tokens-per-rank 16 --iters 2 --json "$T/r.json"
expect_no_stderr
expect_eq "$(grep -c '^# moe-run (moeflow)' "$T/out")" 1 "report headers"
expect_eq "$(grep -c '^ *[0-9]' "$T/out")" 3 "layer lines"
grep -q '^# ranks 4 (1 nodes x 4), backend cpu' "$T/out" || fail "no ranks line"
grep -q '^# per iteration: .* tokens/s' "$T/out" || fail "no throughput line"
grep -q '^# max rank load' "$T/out" || fail "no load line"
expect_eq "$(json_list "$T/r.json" layer | wc -l | tr -d ' ')" 3 "JSON layers"
expect_eq "$(json_list "$T/r.json" ranks)" 4 "JSON ranks"
grep -q '"check": null' "$T/r.json" || fail "JSON check should be null without --check"
# metadata: one figure per layer, then the iteration's (their sum), which the text prints
json_list "$T/r.json" metadata_bytes >"$T/meta"
expect_eq "$(wc -l <"$T/meta" | tr -d ' ')" 4 "JSON metadata figures"
expect_eq "$(awk 'NR < 4 { s += $1 } END { print s }' "$T/meta")" "$(tail -n 1 "$T/meta")" \
    "iteration metadata = sum over layers"
awk 'NR == 1 { a = $1 } END { exit !($1 > a && a > 0) }' "$T/meta" ||
    fail "the iteration's metadata should differ from layer 0's"
expect_eq "$(sed -n 's/.* \([0-9]*\) metadata bytes$/\1/p' "$T/out")" "$(tail -n 1 "$T/meta")" \
    "text metadata bytes = the iteration's"
# exposed communication: per layer, within the layer's dispatch + compute + combine
tr ',{}' '\n\n\n' <"$T/r.json" | awk -F': ' '/"(dispatch|compute|combine)_ms"/ { s += $2 }
    /"exposed_comm_ms"/ { n++; if (!($2 >= 0 && $2 <= s + 1e-3)) bad = 1; s = 0 }
    END { exit bad || n != 3 }' || fail "exposed_comm_ms not 3 figures within the layer times"
grep -q '^# exposed communication (.*), ms: [0-9.]* [0-9.]* [0-9.]*; [0-9.]* per iteration$' \
    "$T/out" || fail "no exposed communication line"
# layout_ms: the copies within a layer's dispatch + combine, one figure per layer
tr ',{}' '\n\n\n' <"$T/r.json" | awk -F': ' '/"(dispatch|combine)_ms"/ { s += $2 }
    /"layout_ms"/ { n++; if (!($2 > 0 && $2 <= s + 1e-3)) bad = 1; s = 0 }
    END { exit bad || n != 3 }' || fail "layout_ms not 3 figures within dispatch + combine"
expect_eq "$(grep -c '"imbalance_wait_ms": null' "$T/r.json")" 3 "no waiting without --measure-wait"
grep -q '^# waiting for the slowest' "$T/out" && fail "a waiting line without --measure-wait"
# --measure-wait: a figure per layer, within the layer's dispatch + compute + combine
expect_exit 0 mpi 2 --measure-wait --layers 2 --experts 8 --tokens-per-rank 16 --iters 2 \
    --json "$T/w.json"
tr ',{}' '\n\n\n' <"$T/w.json" | awk -F': ' '/"(dispatch|compute|combine)_ms"/ { s += $2 }
    /"imbalance_wait_ms"/ { n++; if (!($2 >= 0 && $2 <= s + 1e-3)) bad = 1; s = 0 }
    END { exit bad || n != 2 }' || fail "imbalance_wait_ms not 2 figures within the layer times"
grep -q '^# waiting for the slowest rank (.*), ms: [0-9.]* [0-9.]*; [0-9.]* per iteration$' \
    "$T/out" || fail "no waiting line with --measure-wait"
# the backend's kernel time: positive, within the iteration's, and said in the text
awk -v k="$(json_list "$T/r.json" kernel_ms)" -v t="$(json_list "$T/r.json" iteration_ms)" \
    'BEGIN { exit !(k > 0 && k <= t) }' || fail "kernel_ms not in (0, iteration_ms]"
grep -q '^# kernels and copies: .* ms per iteration' "$T/out" || fail "no kernel time line"
expect_exit 0 "$MOE_BIN/moe-run" --train --layers 2 --experts 4 --tokens-per-rank 8 --iters 1 \
    --json "$T/t.json"
grep -q '"kernel_ms": null' "$T/t.json" || fail "training: kernel_ms should be null"
end

begin "every mode: the steady state allocates nothing; -v counts each layer's host waits"
for m in vanilla coherent pipelined hierarchical datacentric; do
    expect_exit 0 mpi 4 --mode $m --gpus-per-node 2 --layers 2 --experts 8 \
        --tokens-per-rank 16 --iters 2 --json "$T/$m.json"
    grep -q '"allocs_timed": 0,' "$T/$m.json" || fail "$m: allocations in the timed iterations"
    grep -q '"allocs_warmup": [1-9]' "$T/$m.json" || fail "$m: no allocation in the warm-up"
    grep -q '^# host waits for the device: [0-9.]* per iteration' "$T/out" ||
        fail "$m: no host-wait line"
done
expect_exit 0 mpi 4 -v --layers 2 --experts 8 --tokens-per-rank 16 --iters 2
expect_eq "$(grep -c '^# layer [0-9]*: .* host waits for the device, 0.0 device allocations' \
    "$T/out")" 2 "-v per-layer lines without allocations"
end

begin "JSON output is atomic: an unwritable path fails on rank 0 only, exit 1"
expect_exit 1 mpi 2 --layers 1 --tokens-per-rank 4 --json "$T/no/dir/r.json"
grep -q "^moe-run: cannot create '$T/no/dir/r.json" "$T/err" || fail "no message"
expect_no_output "$T/no/dir/r.json"
end

begin "--calibrate writes a topology with both link classes that moe-place reads"
expect_exit 0 mpi 4 --calibrate --gpus-per-node 2 --hidden 16 --ffn 16 -o "$T/c.topo"
expect_no_stdout
grep -q '^link intra bandwidth [0-9.e+]* latency' "$T/c.topo" || fail "no intra link"
grep -q '^link inter bandwidth [0-9.e+]* latency' "$T/c.topo" || fail "no inter link"
grep -q '^efficiency intra ' "$T/c.topo" || fail "no intra curve"
grep -q '^flops [1-9]' "$T/c.topo" || fail "no flops"
grep -q '^backward-flops [1-9]' "$T/c.topo" || fail "no backward-flops"
grep -q '^nodes 2$' "$T/c.topo" || fail "nodes"
"$MOE_BIN/moe-trace" gen --no-PG -L 2 -E 8 -n 50 -o "$T/g.mft" || fail "moe-trace gen"
"$MOE_BIN/moe-place" fit --no-PG --topology "$T/c.topo" --method contiguous -o "$T/c.moep" \
    "$T/g.mft" || fail "moe-place cannot use the calibrated topology"
end

begin "--calibrate to standard output"
expect_exit 0 "$MOE_BIN/moe-run" --calibrate --hidden 8 --ffn 8
grep -q '^gpus-per-node 1$' "$T/out" || fail "no topology on stdout"
end

finish
