#!/bin/sh
# build-aux/demo.sh -- the end-to-end demo on seeded synthetic data (no model or GPU needed).
set -eu
bin=${1:-$(dirname "$0")/../cmd}
out=${MOE_DEMO_DIR:-demo-out}
mkdir -p "$out"
say() { printf '\n== %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
PATH=$bin:$PATH

say "1. a synthetic routing trace shaped like DeepSeek-V2-Lite (26 layers, 64 experts, top-6)"
run moe-trace gen --layers 26 --experts 64 --topk 6 --tokens 50000 --sequences 500 --ranks 8 \
    --zipf 0.9 --affinity 0.6 --coact 0.3 --seed 42 -o "$out/synthetic.moet"
ls -l "$out/synthetic.moet"

say "2. its statistics: counts, per-layer expert load and skew"
run moe-trace stats "$out/synthetic.moet"

say "3. the first records as text (token seq pos step rank, then the top-k ids of each layer)"
run moe-trace head -n 3 -O t --no-PG "$out/synthetic.moet" | cut -c1-150

say "4. split by sequence into train/test parts, as placement fitting will use them"
run moe-trace split --ratio 0.5 --seed 7 --train "$out/train.moet" --test "$out/test.moet" \
    "$out/synthetic.moet"
for f in train test; do
    printf '%s: ' "$f"
    moe-trace stats "$out/$f.moet" | awk '$1=="tokens"{t=$2} $1=="sequences"{s=$2} END{print t" tokens, "s" sequences"}'
done
say "5. inter-layer expert affinity against a shuffled baseline, a table and two heatmaps"
printf '(with this load skew the popular experts dominate P(next | this) in the shuffle too:\n'
printf ' the mutual information shows the affinity the generator put in)\n'
run moe-affinity -@ 1 --summary "$out/synthetic.moet"
run moe-affinity -@ 1 -o "$out/synthetic.aff" --png "$out/affinity-pair-0-1.png" \
    "$out/synthetic.moet"
run moe-affinity --plot grid --png "$out/affinity-grid.png" --svg "$out/affinity-grid.svg" \
    "$out/synthetic.moet"
printf 'does the affinity fitted on train predict test?\n'
moe-affinity compare --summary "$out/train.moet" "$out/test.moet"
ls -l "$out"/affinity-*

say "6. expert placement: fit on the train half, evaluate on the held-out test half"
run moe-place fit --ranks 8 --gpus-per-node 4 --method contiguous -o "$out/contiguous.moep" \
    "$out/train.moet"
run moe-place fit -@ 1 --ranks 8 --gpus-per-node 4 -o "$out/affinity.moep" "$out/train.moet"
run moe-place check "$out/contiguous.moep" "$out/affinity.moep"
for p in contiguous affinity; do
    run moe-place eval --no-layers --hidden 2048 --elem-bytes 2 "$out/$p.moep" "$out/test.moet" |
        grep -v '^# trace\|^# moe-place'
done
heldout() { moe-place eval --no-layers "$1" "$out/test.moet" | awk -F '\t' -v s="$2" \
    '$1 == "SCHEME" && $2 == s { print $3 }'; }
v=$(heldout "$out/contiguous.moep" vanilla)
c=$(heldout "$out/affinity.moep" coherent)
printf 'held-out: %s transfers per token per layer (coherent, affinity placement) against %s\n' \
    "$c" "$v"
printf '(vanilla expert parallelism, contiguous placement): %s of it\n' \
    "$(awk -v a="$c" -v b="$v" 'BEGIN { printf "%.2f", a / b }')"
printf '(this synthetic routing has little structure to place by, see its mutual information\n'
printf ' above; on the real DeepSeek-V2-Lite trace the same steps give 0.65: bench/bench_place.sh)\n'
run moe-place export --format exflow -o "$out/affinity.exflow.csv" "$out/affinity.moep"
run moe-place export --format eplb -o "$out/affinity.eplb.json" "$out/affinity.moep"

say "7. predicted time per dispatch scheme of both placements on 2 nodes x 4 H100 (NDR 400)"
top=$(cd "$(dirname "$0")/.." && pwd)
sed -e 's/^nodes 1$/nodes 2/' -e 's/^gpus-per-node 8$/gpus-per-node 4/' \
    "$top/share/topologies/h100-ndr400.topo" >"$out/h100-2x4.topo"
for p in contiguous affinity; do
    run moe-costmodel simulate -@ 1 --topology "$out/h100-2x4.topo" --hidden 2048 --ffn 1408 \
        --dtype bf16 --no-layers --best --plot "$out/schemes-$p.png" "$out/test.moet" \
        "$out/$p.moep" | grep '^#SCHEME\|^SCHEME\|^# best'
done

say "7b. the same at ExFlow's own shape: GPT-350M MoE-64 (24 layers, top-1, hidden 1024, fp16)"
printf 'on 2 nodes x 4 A100 (the paper'"'"'s Wilkes3 nodes), all-gather of token ids vs hidden vectors\n'
run moe-trace gen --layers 24 --experts 64 --topk 1 --tokens 20000 --sequences 200 --ranks 8 \
    --affinity 0.6 --hidden 1024 --elem-bytes 2 --seed 42 -o "$out/gpt.moet"
run moe-trace split --ratio 0.5 --seed 7 --train "$out/gpt-train.moet" \
    --test "$out/gpt-test.moet" "$out/gpt.moet"
run moe-place fit -@ 1 --ranks 8 --gpus-per-node 4 -o "$out/gpt-affinity.moep" \
    "$out/gpt-train.moet"
sed -e 's/^nodes 1$/nodes 2/' "$top/share/topologies/exflow-a100.topo" >"$out/a100-2x4.topo"
for gb in 4 hidden; do
    run moe-costmodel simulate -@ 1 --topology "$out/a100-2x4.topo" --ffn 4096 \
        --gather-bytes "$gb" --no-layers --best "$out/gpt-test.moet" "$out/gpt-affinity.moep" |
        grep '^SCHEME\|^ITER\|^# best' | cut -f1-5
done
run moe-costmodel exflow --topology "$out/a100-2x4.topo" --trace "$out/gpt-test.moet" \
    --placement "$out/gpt-affinity.moep"

say "8. moe-run: the same held-out tokens through real MoE layers on 8 MPI ranks (CPU)"
if command -v mpirun >/dev/null 2>&1 && moe-run --version | grep -q '(MPI)'; then
    [ "$(id -u)" != 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for m in vanilla:contiguous coherent:affinity; do
        run mpirun --oversubscribe -np 8 moe-run --mode "${m%%:*}" --trace "$out/test.moet" \
            --placement "$out/${m#*:}.moep" --tokens-per-rank 100 --hidden 64 --ffn 64 \
            --iters 1 --warmup 0 --check --json "$out/run-${m%%:*}.json" | grep -v '^ *[0-9]'
    done
    b() { tr ',' '\n' <"$1" | sed -n 's/.*"total_vector_bytes": \([0-9]*\).*/\1/p'; }
    printf 'measured: coherent + affinity sent %s bytes, vanilla + contiguous %s: %s of it\n' \
        "$(b "$out/run-coherent.json")" "$(b "$out/run-vanilla.json")" \
        "$(awk -v a="$(b "$out/run-coherent.json")" -v b="$(b "$out/run-vanilla.json")" \
            'BEGIN { printf "%.2f", a / b }')"
    say "9. moe-run --train: four steps, pipelined in 2 chunks, MPMoE's reuse S1 (offload), checked"
    run mpirun --oversubscribe -np 8 moe-run --train --mode pipelined --chunks 2 --reuse S1 \
        --trace "$out/test.moet" --placement "$out/contiguous.moep" --tokens-per-rank 100 \
        --hidden 64 --ffn 64 --iters 4 --warmup 0 --check | grep -E '^# (training|check)'
else
    printf '(skipped: no mpirun, or moe-run built without MPI)\n'
fi

say "10. a training step predicted at step 7's shape on 2 x 4 H100, pipelined in 2 chunks"
printf 'per MPMoE memory-reuse strategy: step time and peak activation bytes of the largest rank\n'
run moe-costmodel simulate -@ 1 --topology "$out/h100-2x4.topo" --hidden 2048 --ffn 1408 \
    --dtype bf16 --chunks 2 --no-layers --scheme pipelined --train --reuse all \
    "$out/test.moet" "$out/affinity.moep" | grep '^#TRAIN\|^TRAIN' | cut -f2-4,8-9
printf '\ndemo outputs are in %s/\n' "$out"
