#!/bin/sh
# tests/fuzz/run.sh -- run every libFuzzer target for SECONDS each, seeded from the test
# fixtures; fails on the first crash, leak or sanitizer report.
# Usage: sh tests/fuzz/run.sh BUILD_DIR [SECONDS]   (after `make -C BUILD_DIR fuzz`)
set -eu
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-30}
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/tests/fuzz/bin
work=${MOE_FUZZ_DIR:-$(mktemp -d)}
mkdir -p "$work"
mt=$build/cmd/moe-trace

# Seed corpora: small traces in every format, the importers' fixtures by format, placement
# fixtures and the topology presets.
seed() { mkdir -p "$work/corpus/$1"; }
seed trace
"$mt" gen -n 20 -s 4 -L 3 -E 8 -k 2 --no-PG -o "$work/corpus/trace/b.moet"
"$mt" gen -n 20 -s 4 -L 2 -E 300 -k 3 -w --no-PG -O u -o "$work/corpus/trace/u.moet"
"$mt" gen -n 10 -s 2 -L 2 -E 8 -k 2 -w -O t -o "$work/corpus/trace/t.txt"
"$mt" gen -n 10 -s 2 -L 2 -E 8 -k 2 -O z -o "$work/corpus/trace/z.txt.gz"
for f in tokens jsonl csv npy npy_ltk megatron sglang pt raw base64 safetensors torch vllm; do
    seed "$f"
done
seed affinity_table
"$build/cmd/moe-affinity" --no-PG -o "$work/corpus/affinity_table/small.aff" \
    "$work/corpus/trace/b.moet"
"$build/cmd/moe-affinity" --no-PG --top1 -o "$work/corpus/affinity_table/w.aff" \
    "$work/corpus/trace/u.moet"
d=$src/tests/data/import
cp "$d"/*.tokens "$d"/*.meta "$d"/*.weights "$work/corpus/tokens/" 2>/dev/null || true
cp "$d"/*.jsonl "$work/corpus/jsonl/" 2>/dev/null || true
cp "$d"/megatron*.jsonl "$work/corpus/megatron/" 2>/dev/null || true
cp "$d"/*.csv "$work/corpus/csv/" 2>/dev/null || true
cp "$d"/*.npy "$work/corpus/npy/" 2>/dev/null || true
cp "$d"/*.npy "$work/corpus/npy_ltk/" 2>/dev/null || true
cp "$d"/*.pt "$work/corpus/sglang/" 2>/dev/null || true
cp "$d"/*.pt "$work/corpus/pt/" 2>/dev/null || true
cp "$d"/*.safetensors "$d"/logits_*.npy "$work/corpus/safetensors/" 2>/dev/null || true
"$mt" stats --format vllm --window 7 -o "$work/corpus/safetensors/window.st" \
    "$work/corpus/trace/b.moet"
"$mt" stats --format sglang -o "$work/corpus/safetensors/logical_count.json" \
    "$work/corpus/trace/b.moet"
cp "$d"/*.raw "$work/corpus/raw/" 2>/dev/null || true
cp "$d"/*.b64 "$work/corpus/base64/" 2>/dev/null || true
cp "$d"/*.pt "$work/corpus/torch/"
cp "$d"/vllm_response.json "$d"/exec_order.jsonl "$work/corpus/vllm/"
# what is handed over besides traces: SGLang's maps (JSON, .pt, inline), EPLB's, loads
seed handoff
cp "$d"/*map*.json "$d"/sglang_stat_dump.* "$src"/tests/data/place/sglang_map* \
    "$work/corpus/handoff/"
cp "$work/corpus/safetensors/logical_count.json" "$work/corpus/handoff/"
for f in placement_text placement_exflow placement_eplb placement_sglang topology; do
    seed "$f"
done
p=$src/tests/data/placement
cp "$p"/*.moep "$p"/*.moep.gz "$work/corpus/placement_text/"
cp "$p"/*.csv "$work/corpus/placement_exflow/"
cp "$p"/*.json "$src"/tests/data/place/eplb*.json "$work/corpus/placement_eplb/"
cp "$src"/tests/data/place/sglang*.json "$work/corpus/placement_sglang/"
cp "$src"/share/topologies/*.topo "$work/corpus/topology/"
seed nccl
cp "$src"/tests/data/nccl/*.txt "$work/corpus/nccl/"
seed costcfg
printf 'topology = monta-a800\nseq = 8Ki  # tokens\nhidden=8192\nr1 = 8M:0.427,32M:0.633\njson\n' \
    >"$work/corpus/costcfg/monta.conf"
printf 'batch = 8\nseq = 1024\nexperts-per-worker = 1,2,4\nalpha = comm,all=0.8\nreuse = S2\n' \
    >"$work/corpus/costcfg/janus.conf"
printf 'config = x.conf\nbw-inter = 200Gb/s\nzero = 1\nactivation = full\nsource = token\n' \
    >"$work/corpus/costcfg/nest.conf"
seed hfmodel
cp "$src"/tests/data/hf/*.json "$work/corpus/hfmodel/"
seed mpmoe_profile
printf '# S B n seconds\nS1 4096 1 0.0021\nS1 4096 2 0.0018\nnone 8192 4 0.004\nS4 2048 8 1e-3\n' \
    >"$work/corpus/mpmoe_profile/a.prof"

# Each target runs for $secs seconds of wall-clock time, $jobs at a time (one per core): the same
# fuzzing per target as one after another, in a fraction of the time. Reports come in list order.
jobs=${MOE_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
targets="trace import_tokens import_jsonl import_csv import_npy import_npy_ltk import_megatron
    import_sglang pt import_raw import_base64 safetensors import_torch import_vllm handoff
    affinity_table placement_text placement_exflow placement_eplb placement_sglang topology
    nccl costcfg
    mpmoe_profile hfmodel"
# fuzz_one TARGET: fuzz it; its log is $work/TARGET.log, its verdict (0 or 1) $work/TARGET.rc.
fuzz_one() {
    _c=$work/corpus/${1#import_}
    if "$bin/fuzz_$1" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$work/$1-" "$_c" >"$work/$1.log" 2>&1; then
        echo 0 >"$work/$1.rc"
    else
        echo 1 >"$work/$1.rc"
    fi
}
n=0
for t in $targets; do
    fuzz_one "$t" &
    n=$((n + 1))
    if [ "$n" -ge "$jobs" ]; then
        wait
        n=0
    fi
done
wait

status=0
for t in $targets; do
    log=$work/$t.log
    if [ "$(cat "$work/$t.rc" 2>/dev/null)" = 0 ]; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz $t: ${secs}s, $runs runs, no findings"
    else
        echo "fuzz $t: FAILED (log: $log)"
        tail -n 40 "$log"
        status=1
    fi
done
exit $status
