#!/usr/bin/env python3
"""tests/data/place/sglang_loader.py -- what SGLang loads from an --init-expert-location file,
restated from SGLang's own source (python/sglang/srt/eplb/expert_location.py and
python/sglang/srt/layers/moe/fused_moe_triton/layer.py), against the moe-place(5) placement
it was exported from.

SGLang's path, step by step (each function named as in SGLang, written again here):
  compute_initial_expert_location_metadata  .pt -> torch.load, .json -> the file's JSON, any
                                            other string -> inline JSON; a dict holding
                                            physical_to_logical_map goes to init_by_mapping
                                            with every key as a keyword argument
  ExpertLocationMetadata.init_by_mapping    the map as a (rows, P) tensor; _init_common: P must
                                            be E + ep_num_redundant_experts and a multiple of
                                            the EP size
  _compute_logical_to_all_physical_map      per row and slot, the slot appended to the list of
                                            the expert it names (a Python index: -1 would be the
                                            last expert), lists padded with -1
  FusedMoE(layer_id=the decoder layer's id) num_experts = P; EP rank r holds physical slots
                                            r * P/G .. (r + 1) * P/G - 1 (expert_map_cpu)
  FusedMoE.weight_loader(expert_id)         logical_to_all_physical(self.layer_id, expert_id):
                                            row layer_id of the map (an IndexError past the
                                            last row); each slot of this rank gets the weights
The model: num_hidden_layers decoder layers, MoE ones from first_k_dense_replace on (DeepSeek's
DeepseekV2DecoderLayer), n_routed_experts experts.

Usage: sglang_loader.py MAP PLACEMENT --ep-size G --layers N --first-moe-layer F --experts E
Exit 0 when every MoE model layer of every rank holds exactly the experts the placement gives
it (each slot loaded once), 1 otherwise (a line per problem), 2 on bad arguments.
"""
import argparse
import json
import sys
from pathlib import Path


# ---------------------------------------------------------------- expert_location.py

def compute_initial_expert_location_metadata(data, num_logical, ep_size):
    if data.endswith(".pt"):
        import torch  # the .pt forms need torch; the JSON forms do not
        data_dict = torch.load(data, weights_only=True)
        data_dict = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in data_dict.items()}
    elif data.endswith(".json"):
        data_dict = json.loads(Path(data).read_text())
    else:
        data_dict = json.loads(data)
    if "physical_to_logical_map" in data_dict:
        return init_by_mapping(num_logical, ep_size, **data_dict)
    raise NotImplementedError(f"Unknown init_expert_location format ({list(data_dict)=})")


def init_by_mapping(num_logical, ep_size, physical_to_logical_map):
    rows = len(physical_to_logical_map)
    widths = {len(r) for r in physical_to_logical_map}
    assert len(widths) == 1, "the map is not a rectangular tensor"
    num_physical = widths.pop()
    assert num_physical % ep_size == 0, "P is not a multiple of the EP size"
    assert num_physical >= num_logical, "fewer slots than experts"
    return dict(
        physical_to_logical_map=physical_to_logical_map,
        logical_to_all_physical_map=_compute_logical_to_all_physical_map(
            physical_to_logical_map, num_logical),
        num_layers=rows,
        num_physical_experts=num_physical,
    )


def _compute_logical_to_all_physical_map(physical_to_logical_map, num_logical_experts):
    num_layers = len(physical_to_logical_map)
    num_physical_experts = len(physical_to_logical_map[0])
    out = [[[] for _ in range(num_logical_experts)] for _ in range(num_layers)]
    for layer_id in range(num_layers):
        for physical_expert_id in range(num_physical_experts):
            logical_expert_id = physical_to_logical_map[layer_id][physical_expert_id]
            out[layer_id][logical_expert_id].append(physical_expert_id)
    max_len = max(len(inner) for outer in out for inner in outer)
    return [[inner + [-1] * (max_len - len(inner)) for inner in outer] for outer in out]


def logical_to_all_physical(meta, layer_id, logical_expert_id):
    return [p for p in meta["logical_to_all_physical_map"][layer_id][logical_expert_id]
            if p != -1]


# ---------------------------------------------------------------- fused_moe_triton/layer.py

class FusedMoE:
    """The loading side of one MoE layer on one EP rank."""

    def __init__(self, meta, layer_id, ep_size, ep_rank):
        self.meta = meta
        self.layer_id = layer_id
        self.num_experts = meta["num_physical_experts"]
        self.num_local_experts = self.num_experts // ep_size
        self.expert_map_cpu = [-1] * self.num_experts
        for i in range(self.num_local_experts):
            self.expert_map_cpu[ep_rank * self.num_local_experts + i] = i
        self.loaded = [[] for _ in range(self.num_local_experts)]  # param.data[local]

    def weight_loader(self, expert_id):
        for physical_expert_id in logical_to_all_physical(self.meta, self.layer_id, expert_id):
            local = self.expert_map_cpu[physical_expert_id]
            if local == -1:
                continue
            self.loaded[local].append(expert_id)


# ---------------------------------------------------------------- the placement (moe-place(5))

def read_placement(path):
    """{layer: {rank: [expert, ...]}} with each slot's expert (field 4 gives slots), and the
    @PL line's fields."""
    pl, cells = {}, {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("@PL"):
            pl = dict(f.split(":", 1) for f in line.split("\t")[1:])
            continue
        if not line or line[0] in "@#":
            continue
        f = line.split("\t")
        layer, expert = int(f[0]), int(f[1])
        slots = [int(r) for r in (f[3] if len(f) > 3 else f[2]).split(",")]
        for r in slots:
            cells.setdefault(layer, {}).setdefault(r, []).append(expert)
    return pl, cells


def model_ids(pl):
    layers = int(pl["layers"])
    if "moe_layers" not in pl:
        return list(range(layers))
    ids = []
    for item in pl["moe_layers"].split(","):
        a, _, b = item.partition("-")
        ids += range(int(a), int(b or a) + 1)
    assert len(ids) == layers
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("map")
    ap.add_argument("placement")
    ap.add_argument("--ep-size", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True, help="num_hidden_layers")
    ap.add_argument("--first-moe-layer", type=int, default=0, help="first_k_dense_replace")
    ap.add_argument("--experts", type=int, required=True, help="n_routed_experts")
    a = ap.parse_args()
    pl, want = read_placement(a.placement)
    ids = model_ids(pl)
    problems = []
    try:
        meta = compute_initial_expert_location_metadata(a.map, a.experts, a.ep_size)
    except (AssertionError, IndexError, KeyError, TypeError, ValueError) as e:
        print(f"init_by_mapping: {type(e).__name__}: {e}")
        return 1
    for layer_id in range(a.first_moe_layer, a.layers):  # the decoder layers with an MoE
        for rank in range(a.ep_size):
            moe = FusedMoE(meta, layer_id, a.ep_size, rank)
            try:
                for e in range(a.experts):
                    moe.weight_loader(e)
            except IndexError as e:
                problems.append(f"layer {layer_id} rank {rank}: IndexError: {e}")
                break
            for local, got in enumerate(moe.loaded):
                if len(got) != 1:
                    problems.append(f"layer {layer_id} rank {rank} slot {local}: loaded {got}")
            l = ids.index(layer_id) if layer_id in ids else None
            expect = sorted(want.get(l, {}).get(rank, [])) if l is not None else None
            got = sorted(x for g in moe.loaded for x in g)
            if expect != got:
                problems.append(f"layer {layer_id} rank {rank}: SGLang loads {got}, the "
                                f"placement has {expect}")
    for p in problems:
        print(p)
    if not problems:
        print(f"ok: {a.layers - a.first_moe_layer} MoE layers x {a.ep_size} ranks as placed, "
              f"{meta['num_layers']} rows")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
