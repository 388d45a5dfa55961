#!/bin/sh
# tests/cli/import_sglang.sh -- SGLang's expert-distribution recorder: the per_token .pt dumps
# (torch.save zip + pickle) and its (layers, tokens, k) array as .npy (--layout LTK). The
# samples are written by tests/data/import/make_sglang_pt.py (Python's standard library only,
# no torch: see its header); each imported trace is compared value by value with the physical
# ids that script records, mapped through its PHYS2LOG table.
. "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

D=$DATA_DIR/import
OUT=$T/out.moet
tab=$(printf '\t')

# want FILE LINE...: FILE holds the lines, with ' ' for the text view's tabs.
want() {
    _f=$1
    shift
    printf '%s\n' "$@" | tr ' ' "$tab" >"$_f"
}

# The script's R0 (an extend pass of requests of 3 and 2 tokens, forward pass 7, positions
# 0 1 2 0 1) and R1 (a decode pass of 2 tokens, pass 8, positions 3 2) over model layers 1..3
# (layer 0 is dense: all -1), slot (t + l) % 6 and (t + 2l + 1) % 6 resp. (3t + l) % 6 and
# (t + l + 4) % 6, mapped per layer by PHYS2LOG; R0 token 4 layer 2 is [-1, 5, -1, 0] (pads
# stripped), R0 token 1 layer 3 only padding and R1 token 0 layer 1 one id of two: missing.
want "$T/pt.want" \
    "0 0 0 7 0 1,3 1,1 3,1" \
    "1 0 1 7 0 2,3 0,3 ." \
    "2 0 2 7 0 3,2 1,2 0,3" \
    "3 1 0 7 0 3,0 1,1 0,0" \
    "4 1 1 7 0 2,1 1,3 1,0" \
    "5 2 3 8 0 . 1,3 3,1" \
    "6 2 2 8 0 3,0 1,2 0,2"

for f in per_token deflated strided; do
    begin "sglang: $f .pt: detected, physical slots mapped, pads stripped, dense layer left out"
    run moe import --no-PG -O t -o "$T/$f.txt" "$D/sglang_$f.pt"
    expect_eq "$rc" 0 "status"
    expect_err_line "7 tokens (2 incomplete, 2 missing cells, 0 dropped)"
    grep -v '^@' "$T/$f.txt" >"$T/$f.rec"
    same_file "$T/pt.want" "$T/$f.rec" "records"
    expect_eq "$(grep -c '^@MT.*layers:3	experts:4	topk:2	' "$T/$f.txt")" 1 "shape"
    expect_eq "$(grep -c '^@CO	sglang: model layers 1-3 of 4 ' "$T/$f.txt")" 1 \
        "model layers in the header"
    expect_eq "$(grep -c '^@CO	sglang: -1 padding: top-2 of 8 recorded columns$' \
        "$T/$f.txt")" 1 "k narrowed"
    expect_eq "$(grep -c 'physical slots (6 per layer) mapped' "$T/$f.txt")" 1 "mapping noted"
    end
done

begin "sglang: a gzipped dump, from a file and from standard input"
gzip -c "$D/sglang_deflated.pt" >"$T/d.pt.gz"
run moe import --no-PG -O t -o "$T/gz.txt" "$T/d.pt.gz"
expect_eq "$rc" 0 "status"
grep -v '^@' "$T/gz.txt" >"$T/gz.rec"
same_file "$T/pt.want" "$T/gz.rec" "records from the file"
moe import --no-PG -O t -o "$T/stdin.txt" - <"$T/d.pt.gz" 2>/dev/null
grep -v '^@' "$T/stdin.txt" >"$T/stdin.rec"
same_file "$T/pt.want" "$T/stdin.rec" "records from standard input"
end

begin "sglang: the archive folder is the saved file's base name"
expect_eq "$(grep -c "archive 'expert_distribution_recorder_1732000000.25_0': 2 records" \
    "$T/per_token.txt")" 1 "archive name"
end

begin "sglang: --format sglang, --experts and --drop-incomplete"
run moe import --format sglang --experts 4 --drop-incomplete --no-PG -o "$T/drop.moet" \
    "$D/sglang_per_token.pt"
expect_eq "$rc" 0 "status"
expect_eq "$(moe view --no-header "$T/drop.moet" | cut -f 1-3 | tr '\t\n' ', ')" \
    "0,0,0 1,0,2 2,1,0 3,1,1 4,2,2 " "tokens kept"
end

begin "npy --layout LTK: SGLang's (L, T, K) array with -1 pads"
run moe import --layout LTK --no-PG -O t -o "$T/ltk.txt" "$D/sglang_ltk.npy"
expect_eq "$rc" 0 "status"
grep -v '^@' "$T/ltk.txt" >"$T/ltk.rec"
# R0 already mapped to logical ids; the dense layer 0 stays (all missing): npy keeps layers.
want "$T/ltk.want" \
    "0 0 0 0 0 . 1,3 1,1 3,1" \
    "1 0 1 0 0 . 2,3 0,3 ." \
    "2 0 2 0 0 . 3,2 1,2 0,3" \
    "3 0 3 0 0 . 3,0 1,1 0,0" \
    "4 0 4 0 0 . 2,1 1,3 1,0"
same_file "$T/ltk.want" "$T/ltk.rec" "records"
expect_eq "$(grep -c '^@MT.*layers:4	experts:4	topk:2	' "$T/ltk.txt")" 1 "shape"
end

begin "npy default layout TLK reads the same file as 4 tokens of 5 layers"
run moe import --no-PG -O t -o "$T/tlk.txt" "$D/sglang_ltk.npy"
expect_eq "$rc" 0 "status"
expect_eq "$(grep -c '^@MT.*layers:5	' "$T/tlk.txt")" 1 "shape"
end

# bad_import WHAT SUBSTRING FILE [OPTIONS...]: import fails cleanly with one line.
bad_import() {
    _what=$1 _sub=$2 _file=$3
    shift 3
    begin "sglang: $_what"
    expect_exit 1 moe import -o "$OUT" "$_file" "$@"
    expect_err_line "$_sub"
    expect_no_output "$OUT"
    end
}

head -c 2000 "$D/sglang_per_token.pt" >"$T/cut.pt"
{ head -c 300 "$D/sglang_per_token.pt"; printf 'Z'; tail -c +302 "$D/sglang_per_token.pt"; } \
    >"$T/crc.pt"
{ head -c 2000 "$D/sglang_deflated.pt"; printf 'ZZZZ'; } >"$T/tail.pt"
# a zip local header of a member 'x.txt': not a torch.save archive
z4='\000\000\000\000'
printf "PK\\003\\004\\024\\000$z4$z4$z4$z4$z4\\005\\000\\000\\000x.txt" >"$T/notpt.zip"

bad_import "stat mode" "stat-mode dump: 'logical_count' holds expert counts" \
    "$D/sglang_stat.pt"
bad_import "per_pass mode" "per_pass dump: its records hold expert counts" \
    "$D/sglang_per_pass.pt"
bad_import "truncated zip" "zip end record not found" "$T/cut.pt" --format sglang
bad_import "garbage after the zip" "zip end record not found" "$T/tail.pt" --format sglang
bad_import "bad CRC" "CRC-32 mismatch" "$T/crc.pt"
bad_import "unknown opcode" "unsupported pickle opcode 0x95 (FRAME)" "$D/sglang_bad_opcode.pt"
bad_import "wrong dtype" "topk_ids_of_layer is float32, not an integer tensor" \
    "$D/sglang_bad_dtype.pt"
bad_import "shape mismatch" "'positions' has length 3, but topk_ids_of_layer has 2 tokens" \
    "$D/sglang_bad_shape.pt"
bad_import "tensor larger than its storage" "tensor reaches past its storage of 160 elements" \
    "$D/sglang_bad_size.pt"
bad_import "huge declared member size" "states an impossible uncompressed size" \
    "$D/sglang_bad_zipsize.pt"
bad_import "physical slot past the map" "physical slot 9 out of range (6 slots" \
    "$D/sglang_bad_slot.pt"
bad_import "--experts below the ids" "expert id 3 out of range" "$D/sglang_per_token.pt" \
    --experts 3
bad_import "--layout LTK on a .pt" "--layout does not apply to the sglang format" \
    "$D/sglang_per_token.pt" --layout LTK
bad_import "zip that is no torch.save file" "cannot detect" "$T/notpt.zip"

# Issue 42 item 1: work bounded by the bytes the file holds, not the shape it declares. A
# stride-0 view (torch's expand()) of one element declares 2^40 tokens in 712 bytes; a map
# (4096, 65535) over one element; one record repeated 4000 times through the pickle's memo.
# Each is refused at once (the case's time is printed; before, the first ran for hours).
# bounded_import WHAT SUBSTRING FILE: bad_import within 30 s (60 under valgrind).
bounded_import() {
    begin "sglang: $1"
    _secs=30
    [ -z "$MOE_VALGRIND" ] || _secs=60
    expect_exit 1 moe_within "$_secs" import -o "$OUT" "$3"
    expect_err_line "$2"
    expect_no_output "$OUT"
    end
}
for f in stride0 stride0_id map_stride0; do
    bounded_import "a view repeating its storage ($f)" "tensor view of more elements than its \
storage of 1 (a stride-0 or overlapping view, as expand() makes)" "$D/sglang_bad_$f.pt"
done
bounded_import "a record repeated through the memo" "the records declare more expert ids than \
the file has bytes (10206)" "$D/sglang_bad_memo.pt"

# Issue 42 item 9: SGLang's (layers, tokens, k) array of -1 padding only is refused as the .pt
# reader refuses it, not read as tokens that route nowhere. '<i4' (2, 3, 4): 24 values of -1.
h="{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4), }"
h=$(printf '%s%*s' "$h" $((63 - (10 + ${#h}) % 64)) '')
{ printf '\223NUMPY\001\000%b' "\\0$(printf '%o' $((${#h} + 1)))\\0"; printf '%s\n' "$h"
  i=0; while [ $i -lt 24 ]; do printf '\377\377\377\377'; i=$((i + 1)); done; } >"$T/pad.npy"
bad_import ".npy LTK of padding only" "no tokens in input (every id is -1 padding)" \
    "$T/pad.npy" --layout LTK

# Issue 42 item 7: among several inputs, the message names the bad one.
bad_import "records not a list, second input" "'$D/sglang_bad_records.pt': 'records' is a \
dict, not a list" "$D/sglang_per_token.pt" "$D/sglang_bad_records.pt"
bad_import "a map of another layer count, first input" "'$D/sglang_bad_maplayers.pt': \
'last_physical_to_logical_map' has 3 layers, the records 4" "$D/sglang_bad_maplayers.pt" \
    "$D/sglang_per_token.pt"
{ head -c 2000 "$D/sglang_per_token.pt"; } >"$T/cut2.pt"
bad_import "a cut archive, second input" "'$T/cut2.pt': zip end record not found" \
    "$D/sglang_per_token.pt" "$T/cut2.pt" --format sglang

begin "sglang: --layout takes TLK or LTK"
expect_exit 2 moe import --layout KLT -o "$OUT" "$D/sglang_ltk.npy"
expect_usage_error import
end

finish
