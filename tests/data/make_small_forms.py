#!/usr/bin/env python3
# tests/data/make_small_forms.py -- the samples of tests/cli/handoff_small.sh (issue 38, item
# 7), written with the standard library only from the producers' own code:
#   Megatron-Core megatron/core/transformer/moe/router_trace.py (RouterTracer._record and
#           _make_index_record, the layer from _parse_router_module_name): one JSONL file per
#           rank, a record {"step", "stage": "pre_dispatch", "block", "layer", "rank",
#           "num_tokens", "topk", "top_indices"} per router call, the layer the index N of
#           "decoder.layers.N." -- with pipeline parallelism the index into the stage's own
#           layers. Here 8 model layers, layer 0 dense, on 2 stages of 4 layers (ranks 0 and 1),
#           one step of 2 micro-batches of 3 tokens, top-2 of 8 experts: token t (0..5 in the
#           step) at model layer m routes to (3t + m) mod 8 and (5t + m + 1) mod 8.
#   FLAME-MoE one layer's [tokens, top-6] ids alone (actives/.../layer_NN), saved 2-D as a
#           .npy: it reads as 6 top-1 layers (the .npy reader warns).
#   nccl-tests v2.9.0 src/common.cu and src/all_gather.cu: the result table before the redop
#           and root columns (size count type, then time algbw busbw error out of place and in
#           place: 11 fields), with the figures of nccl/all_gather_8.txt (a v2.19 table).
# Run in tests/data; the outputs are committed.
import json, random, struct


def megatron_stages():
    layers_per_stage, dense = 4, {0}
    for stage in range(2):
        with open('import/megatron_pp%d.jsonl' % stage, 'w') as f:
            for mb in range(2):
                for local in range(layers_per_stage):
                    m = stage * layers_per_stage + local
                    if m in dense:
                        continue
                    ids = [[(3 * t + m) % 8, (5 * t + m + 1) % 8]
                           for t in range(3 * mb, 3 * mb + 3)]
                    f.write(json.dumps({'step': 0, 'stage': 'pre_dispatch', 'block': 'decoder',
                                        'layer': local, 'rank': stage, 'num_tokens': 3,
                                        'topk': 2, 'top_indices': ids}) + '\n')


def one_layer_npy():
    rng = random.Random(38)
    rows = [rng.sample(range(64), 6) for _ in range(40)]
    hdr = "{'descr': '<i8', 'fortran_order': False, 'shape': (40, 6), }"
    hdr += ' ' * (-(len(hdr) + 11) % 64) + '\n'
    with open('import/one_layer_top6.npy', 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode())
        for r in rows:
            f.write(struct.pack('<6q', *r))


def nccl_v2_9():
    src = open('nccl/all_gather_8.txt').read().splitlines()
    out = ['# nThread 1 nGpus 1 minBytes 1024 maxBytes 268435456 step: 2(factor) warmup '
           'iters: 5 iters: 20 validation: 1 ', '#', '# Using devices']
    out += [l.replace(' Group  0', '') for l in src if l.startswith('#  Rank')]
    out += ['#', '# %10s  %12s  %6s            out-of-place                       in-place'
            '          ' % ('', '', '')]
    out.append('# %10s  %12s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s' % (
        'size', 'count', 'type', 'time', 'algbw', 'busbw', 'error', 'time', 'algbw', 'busbw',
        'error'))
    out.append('# %10s  %12s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s' % (
        '(B)', '(elements)', '', '(us)', '(GB/s)', '(GB/s)', '', '(us)', '(GB/s)', '(GB/s)', ''))
    for l in src:
        f = l.split()
        if not f or not f[0].isdigit():
            continue
        row = '%12s  %12s  %6s' % (f[0], f[1], f[2])
        for t, a, b in ((f[5], f[6], f[7]), (f[9], f[10], f[11])):
            row += '  %7s  %6.2f  %6.2f  %5s' % (t, float(a), float(b), '0e+00')
        out.append(row)
    out += ['# Out of bounds values : 0 OK', '# Avg bus bandwidth    : 128.225 ', '#']
    open('nccl/all_gather_8_v2.9.txt', 'w').write('\n'.join(out) + '\n')


megatron_stages()
one_layer_npy()
nccl_v2_9()
