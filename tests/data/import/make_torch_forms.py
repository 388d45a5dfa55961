#!/usr/bin/python3
"""tests/data/import/make_torch_forms.py -- torch.save files as SGLang and Hugging Face write
them, made with torch itself (Debian's python3-torch 1.13):
    /usr/bin/python3 tests/data/import/make_torch_forms.py tests/data
The files are committed; the tests need neither torch nor this script.

  place/sglang_map.pt        --init-expert-location as a .pt: {'physical_to_logical_map':
                             tensor} (expert_location.py reads it with torch.load), the map of
                             place/sglang_map.json
  place/sglang_map_list.pt   the same map as nested Python lists
  import/sglang_stat_dump.pt the stat recorder's own dump (expert_distribution.py,
                             _StatAccumulator.dump): {'rank': 0, 'logical_count': int32 tensor
                             (steps, layers, experts), 'average_utilization_rate_over_window':
                             None}, which --init-expert-location takes too (init_by_eplb); the
                             counts of import/sglang_stat_dump.json
  import/hf_router_logits.pt torch.save(outputs.router_logits): Hugging Face's tuple of one
                             [tokens, experts] float tensor per MoE layer (Mixtral-style
                             output_router_logits), bfloat16
"""
import json
import sys

import torch

MAP = [[0, 1, 2, 3, 4, 5, 1, 4], [5, 5, 0, 1, 2, 3, 4, 5]]
COUNTS = [[[3, 0, 5, 1, 2, 9], [0, 4, 4, 1, 7, 2], [6, 6, 0, 1, 1, 3]],
          [[1, 2, 3, 4, 5, 6], [2, 2, 2, 2, 2, 2], [9, 0, 0, 0, 0, 8]]]
LOGITS = [[[0.5, -1.0, 2.0, 0.25], [1.5, 1.0, -0.5, 0.0], [-2.0, 0.75, 0.5, 3.0],
           [0.0, 0.125, 1.0, -1.0], [2.5, -0.25, 0.125, 1.25]],
          [[1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, -3.0, -4.0], [0.5, 0.375, 0.25, 0.0],
           [3.0, -3.0, 0.0, 1.5], [0.0, 1.0, 0.0, 2.0]]]


def main():
    out = sys.argv[1]
    torch.save({"physical_to_logical_map": torch.tensor(MAP)}, f"{out}/place/sglang_map.pt")
    torch.save({"physical_to_logical_map": MAP}, f"{out}/place/sglang_map_list.pt")
    torch.save(dict(rank=0, logical_count=torch.tensor(COUNTS, dtype=torch.int32),
                    average_utilization_rate_over_window=None),
               f"{out}/import/sglang_stat_dump.pt")
    with open(f"{out}/import/sglang_stat_dump.json", "w") as f:
        json.dump({"logical_count": COUNTS}, f)
        f.write("\n")
    torch.save(tuple(torch.tensor(l, dtype=torch.bfloat16) for l in LOGITS),
               f"{out}/import/hf_router_logits.pt")


if __name__ == "__main__":
    main()
