#!/bin/sh
# tests/cli/affinity_plots.sh -- moe-affinity's pictures: PNG files that a PNG decoder reads back
# (chunk CRCs, IHDR size and colour type, the whole image inflated and unfiltered), well-formed
# SVG, sensible sizes for 8 to 256 experts, the same picture whatever the thread count.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/affinity_lib.sh"

if [ -z "$PY" ]; then
    echo "skip: python3 (with zlib and xml.etree) is needed to decode PNG and parse SVG"
    exit 77
fi

# png_info FILE: "WIDTH HEIGHT COLOURTYPE" after decoding the whole image (zlib, PNG 1.2
# filters), or a message and status 1.
png_info() {
    "$PY" - "$1" <<'PYEOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("bad signature")
pos, chunks = 8, []
while pos < len(data):
    n, = struct.unpack(">I", data[pos:pos + 4])
    typ, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    if zlib.crc32(typ + body) & 0xffffffff != crc:
        sys.exit("CRC mismatch in " + typ.decode())
    chunks.append((typ, body))
    pos += 12 + n
if chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
    sys.exit("IHDR/IEND misplaced")
w, h, depth, ctype, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
if depth != 8 or ctype not in (2, 3) or comp or filt or lace:
    sys.exit("unexpected IHDR %r" % (chunks[0][1],))
bpp = 3 if ctype == 2 else 1
npal = 0
for typ, body in chunks:
    if typ == b"PLTE":
        npal = len(body) // 3
if ctype == 3 and not npal:
    sys.exit("indexed image without PLTE")
raw = zlib.decompress(b"".join(b for t, b in chunks if t == b"IDAT"))
stride = w * bpp
if len(raw) != h * (stride + 1):
    sys.exit("image data of %d bytes, expected %d" % (len(raw), h * (stride + 1)))
prev = bytearray(stride)
for y in range(h):
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = row[i - bpp] if i >= bpp else 0
        b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + b) & 255
        elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif f != 0: sys.exit("bad filter type %d" % f)
    if ctype == 3 and max(row) >= npal:
        sys.exit("palette index out of range")
    prev = row
print(w, h, ctype)
PYEOF
}

svg_ok() {
    if command -v xmllint >/dev/null 2>&1; then
        xmllint --noout "$1" 2>"$T/xml.err" || { cat "$T/xml.err"; return 1; }
    fi
    "$PY" -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
assert r.tag.endswith("svg"), r.tag
assert int(r.get("width")) > 0 and int(r.get("height")) > 0
print(len(list(r.iter())))' "$1"
}

# A sensible picture: decodes, and each side within [lo, hi] pixels.
check_png() { # FILE LO HI
    if ! png_info "$1" >"$T/png.info" 2>"$T/png.err"; then
        fail "$1 does not decode: $(cat "$T/png.err")"
        return
    fi
    set -- $(cat "$T/png.info") "$2" "$3"
    [ "$1" -ge "$4" ] && [ "$1" -le "$5" ] && [ "$2" -ge "$4" ] && [ "$2" -le "$5" ] ||
        fail "picture of $1 x $2 pixels, expected sides in [$4, $5]"
}

SMALL=$AFF_DATA/small.txt
moe gen -L 6 -E 64 -k 6 -n 4000 -s 40 -S 2 --no-PG -o "$T/e64.moet" || fail "gen E=64"

begin "pair heatmap: PNG and SVG of P(next | this), from one run"
run aff --png "$T/p.png" --svg "$T/p.svg" "$T/e64.moet"
expect_eq "$rc" 0 "exit status"
expect_no_stdout
check_png "$T/p.png" 300 1200
svg_ok "$T/p.svg" >/dev/null || fail "SVG not well-formed"
grep -q 'P(expert p in layer j+1 | expert i in layer j)' "$T/p.svg" || fail "no caption in SVG"
grep -q 'expert p at layer 1' "$T/p.svg" || fail "no x-axis title"
grep -q 'expert i at layer 0' "$T/p.svg" || fail "no y-axis title"
grep -q '>P(p | i)<' "$T/p.svg" || fail "no colour-scale legend"
end

begin "every kind of picture, shuffled too, for 8, 64 and 256 experts"
moe gen -L 4 -E 8 -k 2 -n 2000 -s 20 -S 3 --no-PG -o "$T/e8.moet" || fail "gen E=8"
moe gen -L 3 -E 256 -k 8 -n 2000 -s 20 -S 4 --no-PG -o "$T/e256.moet" || fail "gen E=256"
for e in 8 64 256; do
    for args in "--plot pair" "--plot pair --pair 0-1 --shuffled" "--plot grid" \
        "--plot load"; do
        # shellcheck disable=SC2086
        run aff $args --png "$T/x.png" --svg "$T/x.svg" "$T/e$e.moet"
        expect_eq "$rc" 0 "exit status of $args, $e experts"
        check_png "$T/x.png" 150 2500
        svg_ok "$T/x.svg" >/dev/null || fail "SVG of $args, $e experts"
        [ "$(file_size "$T/x.png")" -lt 400000 ] || fail "PNG of $args, $e experts too large"
    done
done
end

begin "by-step picture: loads per window and affinity per window"
moe gen -L 4 -E 16 -k 2 -n 6000 -s 60 --steps 12 -S 5 --no-PG -o "$T/steps.moet" || fail "gen"
run aff --by-step 3 --png "$T/s.png" --svg "$T/s.svg" "$T/steps.moet"
expect_eq "$rc" 0 "exit status"
check_png "$T/s.png" 200 2000
svg_ok "$T/s.svg" >/dev/null || fail "SVG not well-formed"
grep -q 'window of 3 steps' "$T/s.svg" || fail "no window axis title"
end

begin "pictures are deterministic and independent of -@"
aff --png "$T/a.png" --svg "$T/a.svg" --plot grid "$T/e64.moet"
aff -@ 3 --png "$T/b.png" --svg "$T/b.svg" --plot grid "$T/e64.moet"
same_file "$T/a.png" "$T/b.png" "PNG with -@ 3"
same_file "$T/a.svg" "$T/b.svg" "SVG with -@ 3"
end

begin "text and pictures together; a picture of the hand-computed trace"
run aff --no-PG -o "$T/t.aff" --png "$T/t.png" "$SMALL"
expect_eq "$rc" 0 "exit status"
[ -s "$T/t.aff" ] || fail "no table with -o and --png"
check_png "$T/t.png" 150 1200
run aff --summary --png "$T/t2.png" "$SMALL"
grep -q '^mean_max_conditional ' "$T/out" || fail "no summary on stdout with --png"
end

finish
