#!/usr/bin/env python3
"""tests/data/place/replica_ref.py -- which GPU serves each (token, expert) under vLLM's and
SGLang's replica rules, restated from their source, and the vanilla expert-parallel transfers
that follows (moeflow(7): a token goes once to every other rank serving one of its experts,
and back), as a rank x rank matrix, for tests/cli/replica_rules.sh to compare with moe-place
eval --replica-rule.

  --rule positional     vLLM, vllm/model_executor/layers/fused_moe/router/base_router.py,
                        eplb_map_to_physical_and_record: physical id =
                        logical_to_physical_map[e][pos % logical_replica_count[e]], pos the
                        flattened index into the [tokens, top_k] ids
  --rule even           the same with pos replaced by (token * 2654435769) & 0xFFFFFFFF, the
                        token's index hashed (vLLM after its PR #40810)
  --rule sglang-static  SGLang, python/sglang/srt/eplb/expert_location.py,
                        compute_logical_to_rank_dispatch_physical_map (its random.Random(42),
                        _fair_choices, _compute_gpu_id_of_physical_expert) over every row of the
                        map, then expert_location_dispatch.py's
                        _topk_ids_logical_to_physical_static: the table row of the token's GPU
The map is what each system loads: vLLM's EPLB tensors (phy2log, log2phy, logcnt: moe-place
export --format eplb), one row per MoE layer; SGLang's physical_to_logical_map (export
--format sglang), one row per model layer, --moe-layers naming the trace's.
The trace: moe-trace view --no-header (token seq pos step rank, then a group per layer); the
token's GPU is its recorded rank; the token index is its id.
"""
import argparse
import json
import random
import sys


def compute_logical_to_all_physical_map(p2l, num_logical):
    out = [[[] for _ in range(num_logical)] for _ in p2l]
    for layer, row in enumerate(p2l):
        for phys, logical in enumerate(row):
            out[layer][logical].append(phys)
    return out  # the lists ascending; SGLang pads them with -1, skipped again on use


def fair_choices(arr, k, r):
    quotient, remainder = divmod(k, len(arr))
    ans = arr * quotient + r.sample(arr, k=remainder)
    r.shuffle(ans)
    return ans


def rank_dispatch_map(l2all, num_gpus, num_physical, seed=42):
    r = random.Random(seed)
    per_gpu = num_physical // num_gpus
    table = [[[-1] * len(l2all[0]) for _ in l2all] for _ in range(num_gpus)]
    for layer, experts in enumerate(l2all):
        for e, cands in enumerate(experts):
            for g in range(num_gpus):
                same = [p for p in cands if p // per_gpu == g]
                if same:
                    table[g][layer][e] = same[0]
            remain = [g for g in range(num_gpus) if table[g][layer][e] == -1]
            for g, p in zip(remain, fair_choices(cands, k=len(remain), r=r)):
                table[g][layer][e] = p
    return table, per_gpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rule", required=True, choices=["positional", "even", "sglang-static"])
    ap.add_argument("--map", required=True)
    ap.add_argument("--trace", required=True, help="moe-trace view --no-header output")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--experts", type=int, required=True)
    ap.add_argument("--moe-layers", help="sglang: the map rows of the trace's layers, 1-26")
    a = ap.parse_args()
    G = a.ranks
    doc = json.load(open(a.map))
    if a.rule == "sglang-static":
        p2l = doc["physical_to_logical_map"]
        P = len(p2l[0])
        table, per_gpu = rank_dispatch_map(compute_logical_to_all_physical_map(p2l, a.experts),
                                           G, P)
        rows = list(range(len(p2l)))
        if a.moe_layers:
            lo, _, hi = a.moe_layers.partition("-")
            rows = list(range(int(lo), int(hi or lo) + 1))
    else:
        log2phy, logcnt = doc["log2phy"], doc["logcnt"]
        per_gpu = doc["slots_per_rank"]
    mat = [[0] * G for _ in range(G)]
    for line in open(a.trace):
        f = line.split("\t")
        token, src = int(f[0]), int(f[4])
        cells = f[5:]
        for layer, cell in enumerate(cells):
            cell = cell.strip()
            if cell == ".":
                continue
            ids = [int(x) for x in cell.split(",")]
            k = len(ids)
            ranks = set()
            for i, e in enumerate(ids):
                if a.rule == "sglang-static":
                    phys = table[src][rows[layer]][e]
                else:
                    pos = token * k + i if a.rule == "positional" else \
                        (token * 2654435769) & 0xFFFFFFFF
                    phys = log2phy[layer][e][pos % logcnt[layer][e]]
                ranks.add(phys // per_gpu)
            for r in ranks:
                if r != src:
                    mat[src][r] += 1  # dispatch
                    mat[r][src] += 1  # combine
    for row in mat:
        print(" ".join(str(x) for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
