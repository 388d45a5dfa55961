#!/usr/bin/env python3
# tests/data/import/make_dense.py -- writes the safetensors, raw and base64 samples of
# tests/cli/import_dense.sh from the formats' documented layouts, with the standard library
# only (no numpy, torch or safetensors here): safetensors per huggingface/safetensors' README
# (u64 LE header length, JSON header, C-ordered little-endian data), SGLang's "return routed
# experts" (base64 of int32 [tokens, all layers, k], dense layers zero) and vLLM's (int16
# [tokens, MoE layers, k]). Run it in this directory; the outputs are committed.
import base64, json, struct

def pack(fmt, values):
    return b''.join(struct.pack('<' + fmt, v) for v in values)

def bf16(x):
    # the top half of the float32 (the values used are exact in bfloat16)
    return struct.pack('<I', struct.unpack('<I', struct.pack('<f', x))[0])[2:]

def safetensors(path, tensors, metadata=None, order=None, raw_header=None, tail=b''):
    """tensors: list of (name, dtype, shape, bytes) laid out in list order."""
    hdr, data = {}, b''
    for name, dtype, shape, blob in tensors:
        hdr[name] = {'dtype': dtype, 'shape': shape,
                     'data_offsets': [len(data), len(data) + len(blob)]}
        data += blob
    if metadata is not None:
        hdr['__metadata__'] = metadata
    keys = order or list(hdr)
    text = raw_header if raw_header is not None else \
        '{' + ','.join(json.dumps(k) + ':' + json.dumps(hdr[k]) for k in keys) + '}'
    text = text.encode()
    text += b' ' * (-len(text) % 8)  # the writer pads the header to 8 bytes with spaces
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + data + tail)

# Expert ids [T=4, L=3, K=2] int32; id -1 marks a missing cell (token 2, layer 1).
ids = [[[(t * 5 + l * 3 + k * 7) % 8 for k in range(2)] for l in range(3)] for t in range(4)]
ids[2][1][1] = -1
flat = [v for t in ids for l in t for v in l]
safetensors('st_ids.safetensors', [('topk_ids', 'I32', [4, 3, 2], pack('i', flat))],
            metadata={'format': 'pt'})
# The same ids [L, T, K] for --layout LTK.
ltk = [ids[t][l][k] for l in range(3) for t in range(4) for k in range(2)]
safetensors('st_ids_ltk.safetensors', [('ids', 'I64', [3, 4, 2], pack('q', ltk))])
# Two tensors: pick one with --tensor; the header lists them out of data order.
safetensors('st_multi.safetensors',
            [('b', 'I16', [3, 2, 1], pack('h', [1, 2, 3, 4, 5, 6])),
             ('a', 'U8', [2, 2], bytes([7, 6, 5, 4]))], order=['a', 'b'])

# Router logits, one [T=3, E=5] float32 tensor per MoE layer as a user saves Hugging Face's
# output_router_logits tuple; names numbered 1, 2, 10 (layer order is numeric). Row 1 of
# layer 2 ties experts 1 and 3.
logits = {
    1: [[0.5, -1.0, 2.0, 0.25, 1.5], [3.0, 0.0, -2.0, 1.0, 0.5], [-0.5, -0.25, -1.0, 0.75, 0.0]],
    2: [[1.0, 1.0, 0.0, -1.0, 0.5], [0.0, 2.5, 1.0, 2.5, -3.0], [4.0, -4.0, 0.5, 0.5, 2.0]],
    10: [[0.0, 0.0, 0.0, 0.0, 0.0], [-1.5, 0.5, 1.25, 2.25, -0.75], [1.0, 2.0, 3.0, 4.0, 5.0]],
}
safetensors('st_logits.safetensors',
            [('router_logits.%d' % l, 'F32', [3, 5], pack('f', sum(logits[l], [])))
             for l in (10, 1, 2)])
with open('st_logits.txt', 'w') as f:  # the same logits as text, for the test's awk
    for l in (1, 2, 10):
        for row in logits[l]:
            f.write(' '.join(repr(x) for x in row) + '\n')
# The layers 1 and 2 as one bfloat16 [L=2, T=3, E=5] tensor, and layer 1 as float16 [3, 5].
safetensors('st_logits_bf16.safetensors',
            [('logits', 'BF16', [2, 3, 5],
              b''.join(bf16(x) for l in (1, 2) for row in logits[l] for x in row))])
safetensors('st_logits_f16.safetensors',
            [('logits', 'F16', [3, 5], pack('e', sum(logits[1], [])))])

# SGLang: two requests of 3 and 2 tokens, 4 model layers of which 1 and 3 are MoE, top-2.
def sglang(T, seed):
    out = []
    for t in range(T):
        for l in range(4):
            for k in range(2):
                out.append(0 if l in (0, 2) else (seed + t * 3 + l + k * 5) % 16)
    return base64.b64encode(pack('i', out)).decode()
with open('sglang_routed.b64', 'w') as f:
    f.write(sglang(3, 1) + '\n' + sglang(2, 7) + '\n')
# vLLM: int16 [T=3, 2 MoE layers, top-2] raw, and the same as one base64 line.
vllm = [(t * 7 + l * 2 + k) % 10 for t in range(3) for l in range(2) for k in range(2)]
with open('vllm_routed.raw', 'wb') as f:
    f.write(pack('h', vllm))

# Malformed files for tests/cli/import_dense.sh.
good = [('x', 'I32', [2, 1, 1], pack('i', [1, 2]))]
safetensors('st_bad_overlap.safetensors', [], raw_header=json.dumps({
    'x': {'dtype': 'I32', 'shape': [2, 1, 1], 'data_offsets': [0, 8]},
    'y': {'dtype': 'I32', 'shape': [1, 1, 1], 'data_offsets': [4, 8]}}), tail=pack('i', [1, 2]))
safetensors('st_bad_hole.safetensors', [], raw_header=json.dumps({
    'x': {'dtype': 'I32', 'shape': [2, 1, 1], 'data_offsets': [4, 12]}}),
    tail=pack('i', [0, 1, 2]))
safetensors('st_bad_dtype.safetensors', [], raw_header=json.dumps({
    'x': {'dtype': 'Q4', 'shape': [2, 1, 1], 'data_offsets': [0, 8]}}), tail=pack('i', [1, 2]))
safetensors('st_bad_shape.safetensors', [], raw_header=json.dumps({
    'x': {'dtype': 'I32', 'shape': [3, 1, 1], 'data_offsets': [0, 8]}}), tail=pack('i', [1, 2]))
safetensors('st_bad_trailing.safetensors', good, tail=b'\0\0\0\0')
# 2^58 C64 elements: 2^64 bits, which wraps to a 0-byte tensor in 64-bit arithmetic
safetensors('st_bad_overflow.safetensors', [], raw_header=json.dumps({
    'x': {'dtype': 'C64', 'shape': [1 << 29, 1 << 29, 1], 'data_offsets': [0, 0]}}))
safetensors('st_bad_dup.safetensors', [], raw_header=
    '{"x":{"dtype":"I32","shape":[1,1,1],"data_offsets":[0,4]},'
    '"x":{"dtype":"I32","shape":[1,1,1],"data_offsets":[4,8]}}', tail=pack('i', [1, 2]))

# NumPy .npy (format.py's version 1.0: magic, header length u16 LE, dict padded with spaces
# to a multiple of 64 bytes ending in '\n'): the logits as np.stack(router_logits), float32
# [L=3, T=3, E=5] in layer order 1, 2, 10, and layer 1 as float16 [T=3, E=5].
def npy(path, descr, shape, blob):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ', '.join(str(n) for n in shape) + (',' if len(shape) == 1 else ''))
    d += ' ' * (-(10 + len(d) + 1) % 64) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() + blob)
npy('logits_ltk.npy', '<f4', (3, 3, 5),
    pack('f', [x for l in (1, 2, 10) for row in logits[l] for x in row]))
npy('logits_f2.npy', '<f2', (3, 5), pack('e', sum(logits[1], [])))
# the same float32 logits as a big-endian array (np.dtype('>f4'), as some savers write)
npy('logits_be.npy', '>f4', (3, 3, 5),
    b''.join(struct.pack('>f', x) for l in (1, 2, 10) for row in logits[l] for x in row))
