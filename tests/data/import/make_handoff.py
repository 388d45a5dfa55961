#!/usr/bin/env python3
# tests/data/import/make_handoff.py -- the samples of tests/cli/import_handoff.sh (issue 38,
# items 2 and 5), written with the standard library only from the producers' own code:
#   SGLang  python/sglang/srt/layers/moe/routed_experts_capturer.py: int32 [tokens,
#           num_hidden_layers, top_k], zeros (not -1) in the dense layers (the buffer is
#           torch.zeros); with EPLB the ids are physical slots (captured after
#           topk_ids_logical_to_physical); returned base64 per request; its map is
#           --init-expert-location's physical_to_logical_map, a row per model layer.
#           python/sglang/srt/eplb/expert_distribution.py (per_token): topk_ids_of_layer
#           int32 (layers, tokens, 8), -1 padded, saved here as .npy (layout LTK).
#   vLLM    docs/training/routed_experts_replay.md (v0.21): routed_experts int16 [gen_len,
#           num_moe_layers, top_k], -1 rows for prefix-cached tokens; the HTTP API gives it
#           as JSON lists per choice, prompt_routed_experts per response; the SDK as numpy
#           arrays. vllm/.../routed_experts_capturer.py (the merged capturer): int32
#           [tokens, num_hidden_layers, top_k], zeros in the dense layers. Its EPLB maps
#           physical slots per MoE layer (phy2log).
# Run in this directory; the outputs are committed.
import base64, json, struct


def pack(fmt, values):
    return b''.join(struct.pack('<' + fmt, v) for v in values)


def npy(path, descr, shape, blob):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ', '.join(str(d) for d in shape) + (',' if len(shape) == 1 else ''))
    hdr += ' ' * (-(len(hdr) + 11) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode() + blob)


# ---- SGLang, EPLB on: 4 model layers (0 and 2 dense), 4 logical experts on 6 physical
# slots; two requests (3 and 2 tokens), top-2. Logical ids (t + l + 2k) mod 4 for token t of
# the request, MoE layer l; each logical id e goes to its first slot in the map row.
SG_MAP = [[0, 1, 2, 3, 0, 1], [2, 3, 0, 1, 2, 2], [0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 1, 3]]


def phys(row, e, which=0):
    slots = [s for s, x in enumerate(SG_MAP[row]) if x == e]
    return slots[which % len(slots)]


lines = []
for req, T in enumerate((3, 2)):
    flat = []
    for t in range(T):
        for l in range(4):
            for k in range(2):
                flat.append(0 if l in (0, 2) else phys(l, (t + l + 2 * k) % 4, t + req))
    lines.append(base64.b64encode(pack('i', flat)).decode())
with open('sglang_routed_phys.b64', 'w') as f:
    f.write('\n'.join(lines) + '\n')
with open('sglang_routed_map.json', 'w') as f:
    json.dump({'physical_to_logical_map': SG_MAP}, f)
    f.write('\n')

# The recorder's topk_ids_of_layer (layers, tokens, 8) of the first request, physical slots,
# -1 everywhere in the dense layers and past the top-2.
T = 3
ltk = []
for l in range(4):
    for t in range(T):
        row = [-1] * 8
        if l in (1, 3):
            row[0] = phys(l, (t + l) % 4, t)
            row[1] = phys(l, (t + l + 2) % 4, t)
        ltk += row
npy('sglang_ltk_phys.npy', '<i4', (4, T, 8), pack('i', ltk))

# ---- vLLM, EPLB on: 2 MoE layers, 4 logical experts on 6 slots (phy2log a row per MoE
# layer), int16 [gen_len = 4, 2, 2]; token 0 was prefix-cached: all -1.
VL_MAP = [[1, 0, 3, 2, 0, 1], [0, 0, 1, 2, 3, 3]]
VL = [[[-1, -1], [-1, -1]]]
for t in range(1, 4):
    VL.append([[[s for s, x in enumerate(VL_MAP[l]) if x == (t + l + 2 * k) % 4][t % 2 if
                 VL_MAP[l].count((t + l + 2 * k) % 4) > 1 else 0] for k in range(2)]
               for l in range(2)])
with open('vllm_routed_phys.raw', 'wb') as f:
    f.write(pack('h', [v for t in VL for l in t for v in l]))
with open('vllm_eplb_map.json', 'w') as f:
    json.dump({'phy2log': VL_MAP}, f)
    f.write('\n')

# ---- vLLM's routed experts as the SDK hands them (numpy arrays, np.save): int16 with -1
# rows, uint8 and uint16 variants; logical ids (t + 3l + k) mod 8, token 0 cached.
LOG = [[[-1, -1]] * 3] + [[[(t + 3 * l + k) % 8 for k in range(2)] for l in range(3)]
                          for t in range(1, 5)]
flat = [v for t in LOG for l in t for v in l]
npy('vllm_routed_i2.npy', '<i2', (5, 3, 2), pack('h', flat))
npy('vllm_routed_u1.npy', '|u1', (4, 3, 2), bytes(v for v in flat[6:]))
npy('vllm_routed_u2.npy', '<u2', (4, 3, 2), pack('H', flat[6:]))

# ---- vLLM's HTTP response (/v1/completions with --enable-return-routed-experts): the
# routed experts of the prompt (prompt_routed_experts) and of each choice's generated tokens
# (choices[i].routed_experts), JSON lists [tokens][num_moe_layers][top_k]. The prompt's first
# two tokens are prefix-cached (-1).
prompt = [[[-1, -1], [-1, -1]], [[-1, -1], [-1, -1]], [[1, 2], [3, 0]]]
gen0 = [[[0, 1], [2, 3]], [[3, 1], [1, 0]]]
gen1 = [[[2, 0], [0, 2]]]
resp = {'id': 'cmpl-38', 'object': 'text_completion', 'created': 1780000000,
        'model': 'Qwen/Qwen3-30B-A3B',
        'choices': [{'index': 0, 'text': ' Quantum', 'logprobs': None, 'finish_reason': 'length',
                     'routed_experts': gen0},
                    {'index': 1, 'text': ' A', 'logprobs': None, 'finish_reason': 'length',
                     'routed_experts': gen1}],
        'usage': {'prompt_tokens': 3, 'total_tokens': 6, 'completion_tokens': 3},
        'prompt_routed_experts': prompt}
with open('vllm_response.json', 'w') as f:
    json.dump(resp, f, indent=1)
    f.write('\n')
