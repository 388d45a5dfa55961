#!/usr/bin/env python3
"""tests/data/affinity/make_fixtures.py -- rebuild the binary fixtures of the moe-affinity
tests independently of libmoecore (zlib and the layout of moe-trace(5)).

    python3 tests/data/affinity/make_fixtures.py tests/data/affinity
"""
import struct
import sys
import zlib


def member(payload, level=6):
    """One block-gzip member: gzip header with the 'MF' extra field holding its size - 1."""
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    data = co.compress(payload) + co.flush()
    total = 20 + len(data) + 8
    head = bytes([0x1F, 0x8B, 8, 4, 0, 0, 0, 0, 0, 0xFF]) + struct.pack("<H", 8)
    head += b"MF" + struct.pack("<HI", 4, total - 1)
    return head + data + struct.pack("<II", zlib.crc32(payload) & 0xFFFFFFFF, len(payload))


EOF_BLOCK = member(b"", 0)


def header(layers, experts, topk, minor=0):
    text = b"@CO\taffinity fixture\n"
    body = struct.pack("<8I", layers, experts, topk, 0, 0, 1, 0, len(text)) + text
    return b"MOEF" + b"T" + bytes([1, minor, 0]) + struct.pack("<I", len(body)) + body


def record(token, cells, extra=b""):
    ids = bytes(i for cell in cells for i in cell)
    rec = struct.pack("<QIIII", token, token // 2, token % 2, 0, 0) + ids + extra
    return struct.pack("<I", len(rec)) + rec


SMALL = [  # the hand-computed trace of small.txt (0xff = missing)
    [(0, 1), (1, 2), (2, 3)],
    [(0, 2), (1, 3), (0, 1)],
    [(1, 0), (2, 1), (3, 2)],
    [(3, 2), (0xFF, 0xFF), (0, 3)],
    [(0, 1), (0, 1), (1, 0)],
]


def write(path, blocks):
    with open(path, "wb") as f:
        for b in blocks:
            f.write(member(b))
        f.write(EOF_BLOCK)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    # small.txt as version 1.3 records with 6 extension bytes each, over two blocks
    recs = [record(t, c, b"extras") for t, c in enumerate(SMALL)]
    write(d + "/small_ext.moet", [header(3, 4, 2, minor=3) + b"".join(recs[:2]),
                                  b"".join(recs[2:])])
    # expert id 9 with 8 experts in the third record
    bad = [record(t, [(t % 8, (t + 1) % 8), (2, 3)]) for t in range(4)]
    bad[2] = record(2, [(9, 1), (2, 3)])
    write(d + "/badid.moet", [header(2, 8, 2) + b"".join(bad)])
    # a cell with one of its two ids missing
    part = [record(t, [(t % 8, (t + 1) % 8), (2, 3)]) for t in range(4)]
    part[1] = record(1, [(4, 0xFF), (2, 3)])
    write(d + "/partial.moet", [header(2, 8, 2) + b"".join(part)])


if __name__ == "__main__":
    main()
