#!/usr/bin/python3
"""tests/data/place/make_eplb.py -- the eplb_*.json samples: the output of DeepSeek's own
rebalance_experts (github.com/deepseek-ai/EPLB, eplb.py, commit d52c72d) on seeded loads, as
JSON {"phy2log": [layers][replicas], "log2phy": [layers][experts][X], "logcnt":
[layers][experts]} -- the three tensors it returns, .tolist()'d.

Run with Debian's python3 and python3-torch (1.13), giving the path of eplb.py, which is not
copied here:
    /usr/bin/python3 tests/data/place/make_eplb.py PATH/TO/eplb.py tests/data/place
The samples are committed; the tests read them and need neither torch nor this script.

Cases (loads from a seeded Zipf-like draw, so that hot experts get replicas and
rebalance_experts puts two slots of one expert on one GPU):
  eplb_dsv2lite.json   26 layers x 64 experts (DeepSeek-V2-Lite's MoE layers), 80 replicas on
                       8 GPUs, 1 node, 1 group (the hierarchical policy degenerates to one node)
  eplb_hier.json       the shape of eplb.py's README example: 2 layers x 12 experts, 16
                       replicas, 4 groups, 2 nodes, 8 GPUs (the hierarchical policy)
  eplb_global.json     4 layers x 12 experts, 24 replicas, 3 groups, 2 nodes, 4 GPUs
                       (3 % 2 != 0: the global policy)
"""
import importlib.util
import json
import random
import sys

import torch


def load_eplb(path):
    spec = importlib.util.spec_from_file_location("eplb", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def zipf_loads(rng, layers, experts, tokens, s=1.1):
    w = [1.0 / (i + 1) ** s for i in range(experts)]
    out = []
    for _ in range(layers):
        order = list(range(experts))
        rng.shuffle(order)
        row = [0] * experts
        for _ in range(tokens):
            row[order[rng.choices(range(experts), weights=w)[0]]] += 1
        out.append(row)
    return out


def write(eplb, path, weight, replicas, groups, nodes, gpus):
    phy2log, log2phy, logcnt = eplb.rebalance_experts(torch.tensor(weight), replicas, groups,
                                                      nodes, gpus)
    doc = {"phy2log": phy2log.tolist(), "log2phy": log2phy.tolist(), "logcnt": logcnt.tolist()}
    with open(path, "w") as f:
        f.write("{\"phy2log\": " + json.dumps(doc["phy2log"], separators=(",", ":")) + ",\n")
        f.write(" \"log2phy\": " + json.dumps(doc["log2phy"], separators=(",", ":")) + ",\n")
        f.write(" \"logcnt\": " + json.dumps(doc["logcnt"], separators=(",", ":")) + "}\n")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_eplb.py PATH/TO/eplb.py OUTDIR")
    eplb, out = load_eplb(sys.argv[1]), sys.argv[2]
    rng = random.Random(38)
    write(eplb, f"{out}/eplb_dsv2lite.json", zipf_loads(rng, 26, 64, 6000), 80, 1, 1, 8)
    write(eplb, f"{out}/eplb_hier.json", zipf_loads(rng, 2, 12, 1500), 16, 4, 2, 8)
    write(eplb, f"{out}/eplb_global.json", zipf_loads(rng, 4, 12, 2000), 24, 3, 2, 4)


if __name__ == "__main__":
    main()
