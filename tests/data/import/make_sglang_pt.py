#!/usr/bin/env python3
# tests/data/import/make_sglang_pt.py -- writes the SGLang expert-distribution recorder samples
# (sglang_*.pt, sglang_ltk.npy) without torch or numpy: Python's standard library only.
#
# torch.save (torch/serialization.py, zipfile format) pickles the object with protocol 2 and a
# persistent_id that turns each storage into ('storage', torch.<T>Storage, key, location, numel),
# each tensor reducing to torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
# requires_grad, OrderedDict()); it writes ARCHIVE/data.pkl, ARCHIVE/byteorder,
# ARCHIVE/data/<key> (raw little-endian elements), ARCHIVE/version into a zip. Here the standard
# pickler does the pickling, with stand-in 'torch' and 'torch._utils' modules so that it names
# the same globals torch's own classes would; the zip comes from zipfile. The object is what
# SGLang's _DetailAccumulator.dump (python/sglang/srt/eplb/expert_distribution.py) saves in
# per_token mode: {'records': [...], 'last_physical_to_logical_map': (L, P)}.
#
# Run from this folder: python3 make_sglang_pt.py   (the output is deterministic)
import collections
import io
import pickle
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
torch._utils = utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = utils


def _rebuild_tensor_v2(*args):
    raise RuntimeError("never called: only pickled")


_rebuild_tensor_v2.__module__ = "torch._utils"
utils._rebuild_tensor_v2 = _rebuild_tensor_v2

FMT = {"IntStorage": "<i", "LongStorage": "<q", "FloatStorage": "<f", "ShortStorage": "<h"}
for name in FMT:
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch, name, cls)


class Storage:
    def __init__(self, kind, values):
        self.kind, self.values = kind, values


class Tensor:
    """A tensor as torch pickles it: a storage, an offset, a size and a stride."""

    def __init__(self, kind, shape, values, stride=None, offset=0, storage=None):
        self.shape = tuple(shape)
        if stride is None:
            stride, acc = [], 1
            for d in reversed(shape):
                stride.insert(0, acc)
                acc *= d
        self.stride = tuple(stride)
        self.offset = offset
        self.storage = storage or Storage(kind, values)

    def __reduce_ex__(self, proto):
        return (_rebuild_tensor_v2, (self.storage, self.offset, self.shape, self.stride, False,
                                     collections.OrderedDict()))


def save(obj, path, archive="archive", method=zipfile.ZIP_STORED, pickle_protocol=2,
         patch=None):
    storages = []

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                for i, s in enumerate(storages):
                    if s is o:
                        key = i
                        break
                else:
                    key = len(storages)
                    storages.append(o)
                numel = len(o.values) // (struct.calcsize(FMT[o.kind])
                                          if isinstance(o.values, bytes) else 1)
                return ("storage", getattr(torch, o.kind), str(key), "cpu", numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=pickle_protocol).dump(obj)
    pkl = buf.getvalue()
    if patch:
        pkl = patch(pkl)
    with zipfile.ZipFile(path, "w", compression=method) as z:
        # fixed dates: the same bytes on every run
        def put(name, data):
            info = zipfile.ZipInfo(f"{archive}/{name}", date_time=(2025, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)

        put("data.pkl", pkl)
        put("byteorder", b"little")
        for i, s in enumerate(storages):
            raw = s.values if isinstance(s.values, bytes) else b"".join(
                struct.pack(FMT[s.kind], v) for v in s.values)
            put(f"data/{i}", raw)
        put("version", b"3\n")


# ---- the per_token sample: 4 model layers (layer 0 dense), 6 physical slots over 4 experts,
# top-2 recorded in SGLang's 8 columns.
L, K, P = 4, 8, 6
# physical slot -> logical expert per layer (slots 4 and 5 are redundant copies)
PHYS2LOG = [[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 3, 2], [3, 2, 1, 0, 1, 1], [0, 1, 2, 3, 0, 0]]
PAD = -1


def cells(T, table):
    """(L, T, K) flattened: table[(l, t)] = physical ids; every other cell is padding."""
    out = []
    for l in range(L):
        for t in range(T):
            ids = table.get((l, t), [])
            out += ids + [PAD] * (K - len(ids))
    return out


# record 0: an extend pass of two requests (3 + 2 tokens)
R0 = {(l, t): [(t + l) % P, (t + 2 * l + 1) % P] for l in (1, 2, 3) for t in range(5)}
R0[(2, 4)] = [PAD, 5, PAD, 0]  # pads between ids are stripped: slots 5 and 0
R0[(3, 1)] = []  # a cell of only padding: missing
# record 1: a decode pass of 2 tokens, no extend_seq_lens
R1 = {(l, t): [(3 * t + l) % P, (t + l + 4) % P] for l in (1, 2, 3) for t in range(2)}
R1[(1, 0)] = [4]  # one id of two: missing (a trace cell holds k ids or none)


def record(pass_id, T, table, lens, mode, positions):
    return dict(
        forward_pass_id=pass_id,
        rank=0,
        gatherer_key="primary",
        input_ids=[1000 + i for i in range(T)],
        positions=positions,
        extend_seq_lens=lens,
        forward_mode=mode,
        topk_ids_of_layer=Tensor("IntStorage", (L, T, K), cells(T, table)),
        misc_objects=[],
        global_physical_count=Tensor("IntStorage", (L, P), [0] * (L * P)),
    )


def per_token(map_kind="LongStorage"):
    return dict(
        records=[
            record(7, 5, R0, [3, 2], 1, [0, 1, 2, 0, 1]),
            record(8, 2, R1, None, 2, [3, 2]),
        ],
        last_physical_to_logical_map=Tensor(map_kind, (L, P), sum(PHYS2LOG, [])),
    )


def main():
    save(per_token(), "sglang_per_token.pt",
         archive="expert_distribution_recorder_1732000000.25_0")
    save(per_token(), "sglang_deflated.pt", method=zipfile.ZIP_DEFLATED)
    # the map as a transposed view (stride (1, L)) of a (P, L) storage
    t = per_token()
    cols = [PHYS2LOG[l][p] for p in range(P) for l in range(L)]
    t["last_physical_to_logical_map"] = Tensor("IntStorage", (L, P), cols, stride=(1, L))
    save(t, "sglang_strided.pt")
    # stat mode: logical_count (steps, L, E); per_pass: global_physical_count only
    save(dict(rank=0, logical_count=Tensor("IntStorage", (2, L, 4), list(range(2 * L * 4))),
              average_utilization_rate_over_window=None), "sglang_stat.pt")
    save(dict(records=[dict(forward_pass_id=1, rank=0, gatherer_key="primary",
                            global_physical_count=Tensor("IntStorage", (L, P), [1] * (L * P)))],
              last_physical_to_logical_map=Tensor("LongStorage", (L, P), sum(PHYS2LOG, []))),
         "sglang_per_pass.pt")
    # bad files
    save(per_token(), "sglang_bad_opcode.pt", pickle_protocol=4)  # FRAME, SHORT_BINUNICODE
    bad = per_token()
    bad["records"][0]["topk_ids_of_layer"] = Tensor("FloatStorage", (L, 5, K),
                                                    [0.0] * (L * 5 * K))
    save(bad, "sglang_bad_dtype.pt")
    bad = per_token()
    bad["records"][1]["positions"] = [3, 2, 1]
    save(bad, "sglang_bad_shape.pt")
    bad = per_token()  # a tensor larger than its storage says: (L, 5000000, K) over 160 ints
    bad["records"][0]["topk_ids_of_layer"].shape = (L, 5000000, K)
    save(bad, "sglang_bad_size.pt")
    bad = per_token()
    bad["records"][0]["topk_ids_of_layer"].storage.values[3] = 9  # slot 9 of 6
    save(bad, "sglang_bad_slot.pt")
    # a deflated data.pkl whose central directory entry states 4 GiB uncompressed
    save(per_token(), "sglang_bad_zipsize.pt", method=zipfile.ZIP_DEFLATED)
    with open("sglang_bad_zipsize.pt", "r+b") as f:
        b = f.read()
        cd = b.index(b"PK\x01\x02")
        f.seek(cd + 24)
        f.write(struct.pack("<I", 0xFFFFFFF0))
    # views that repeat one element (stride 0, as torch's expand() makes): a few hundred bytes
    # that declare 2^40 tokens, with padding and with a real id, and a (4096, 65535) map
    def expanded(shape, value, kind="IntStorage"):
        return Tensor(kind, shape, [value], stride=(0,) * len(shape))

    for name, value in (("sglang_bad_stride0.pt", PAD), ("sglang_bad_stride0_id.pt", 1)):
        bad = dict(records=[dict(forward_pass_id=1, rank=0,
                                 topk_ids_of_layer=expanded((1, 1 << 40, 1), value))])
        save(bad, name)
    bad = per_token()
    bad["last_physical_to_logical_map"] = expanded((4096, 65535), 0, "LongStorage")
    save(bad, "sglang_bad_map_stride0.pt")
    # errors that must name their file among several inputs: records not a list, a map of
    # another layer count
    bad = per_token()
    bad["records"] = {"a": 1}
    save(bad, "sglang_bad_records.pt")
    bad = per_token()
    bad["last_physical_to_logical_map"] = Tensor("LongStorage", (3, P), sum(PHYS2LOG[:3], []))
    save(bad, "sglang_bad_maplayers.pt")
    # one record repeated 4000 times through the pickle's memo: 640,000 ids in a few KB
    bad = per_token()
    bad["records"] = [bad["records"][0]] * 4000
    save(bad, "sglang_bad_memo.pt")
    # SGLang's (L, T, K) array as np.save writes it: version 1.0, '<i4', C order
    T = 5
    logical = {(l, t): [PHYS2LOG[l][s] if s >= 0 else s for s in ids]
               for (l, t), ids in R0.items()}
    data = cells(T, logical)
    hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d, %d), }" % (L, T, K)
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open("sglang_ltk.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(b"".join(struct.pack("<i", v) for v in data))


if __name__ == "__main__":
    main()
