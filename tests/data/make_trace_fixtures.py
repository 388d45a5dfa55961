#!/usr/bin/env python3
"""tests/data/make_trace_fixtures.py -- rebuild the hand-made trace fixtures of
tests/cli/trace_errors.sh, independently of libmoecore (zlib + the layout of moe-trace(5)).

    python3 tests/data/make_trace_fixtures.py tests/data
"""
import struct
import sys
import zlib


def member(payload, level=6):
    """One block-gzip member: gzip header with the 'MF' extra field holding the member size - 1."""
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    data = co.compress(payload) + co.flush()
    total = 20 + len(data) + 8
    head = bytes([0x1F, 0x8B, 8, 4, 0, 0, 0, 0, 0, 0xFF]) + struct.pack("<H", 8)
    head += b"MF" + struct.pack("<HI", 4, total - 1)
    return head + data + struct.pack("<II", zlib.crc32(payload) & 0xFFFFFFFF, len(payload))


EOF_BLOCK = member(b"", 0)


def trace_payload(magic=b"MOEF", kind=b"T", major=1, minor=0, layers=2, experts=8, topk=2):
    text = b"@CO\thand-made fixture\n"
    body = struct.pack("<8I", layers, experts, topk, 0, 0, 1, 0, len(text)) + text
    out = magic + kind + bytes([major, minor, 0]) + struct.pack("<I", len(body)) + body
    for i in range(3):
        ids = bytes((i + c) % experts for c in range(layers * topk))
        rec = struct.pack("<QIIII", i, 0, i, 0, 0) + ids
        out += struct.pack("<I", len(rec)) + rec
    return out


def write(path, payload):
    with open(path, "wb") as f:
        f.write(member(payload) + EOF_BLOCK)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    write(d + "/trace_v2.moet", trace_payload(major=2, minor=0))
    write(d + "/trace_v1_9.moet", trace_payload(major=1, minor=9))
    write(d + "/trace_badmagic.moet", trace_payload(magic=b"MOEX"))
    write(d + "/trace_kind_p.moet", trace_payload(kind=b"P"))


if __name__ == "__main__":
    main()
