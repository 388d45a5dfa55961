#!/bin/sh
# tests/cli/import_errors.sh -- bad import inputs: one line naming the input, status 1, no
# output file left behind.
. "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

OUT=$T/out.moet

# bad_import WHAT SUBSTRING FILE [OPTIONS...]: import fails cleanly.
bad_import() {
    _what=$1 _sub=$2 _file=$3
    shift 3
    begin "import: $_what"
    expect_exit 1 moe import "$@" -o "$OUT" "$_file"
    expect_err_line "$_sub"
    expect_no_output "$OUT"
    end
}

printf '1,2 3,4\n5,6 7,8\n' >"$T/good.tokens"
printf '1,2 3,4\n5,6\n' >"$T/ragged.tokens"
printf '1,2 3,4\n5,6 7,8,9\n' >"$T/ragged_k.tokens"
printf '1,2 3,4\n5,x6 7,8\n' >"$T/nonnum.tokens"
printf '# only a comment\n' >"$T/comment_only.tokens"
: >"$T/empty.txt"
printf 'hello world\nthis is not a router log\n' >"$T/prose.txt"
printf '{"layer": 0, "experts": [1, 2], "token_idx": 0\n' >"$T/broken.jsonl"
printf 'Layer ID,Batch Number,Token,Activated Expert IDs\n1,0,"unterminated,"[1, 2]"\n' \
    >"$T/broken.csv"
printf '\223NUMPY\001\000' >"$T/cut.npy"

bad_import "ragged rows (layers)" "groups, expected" "$T/ragged.tokens" --format tokens
bad_import "ragged rows (top-k)" "expected" "$T/ragged_k.tokens" --format tokens
bad_import "non-numeric id" "x6" "$T/nonnum.tokens" --format tokens
bad_import "expert id >= --experts" "out of range" "$T/good.tokens" --experts 8
bad_import "comments only" "no tokens" "$T/comment_only.tokens" --format tokens
bad_import "empty file" "empty.txt" "$T/empty.txt"
bad_import "undetectable format" "prose.txt': cannot detect" "$T/prose.txt"
bad_import "malformed JSON" "broken.jsonl" "$T/broken.jsonl" --format jsonl
bad_import "malformed CSV" "broken.csv" "$T/broken.csv" --format csv
bad_import "truncated npy header" "cut.npy" "$T/cut.npy" --format npy
bad_import "nonexistent file" "No such file or directory" "$T/missing.tokens"
# a torch.save file of PyTorch before 1.6: pickle.dump(MAGIC_NUMBER, f, protocol=2) first
# (torch/serialization.py, _legacy_save), then the protocol version (1001), then the object
printf '\200\002\212\012\154\374\234\106\371\040\152\250\120\031.\200\002M\351\003.' \
    >"$T/legacy.pt"
bad_import "legacy torch.save (before 1.6)" "a legacy torch.save file (PyTorch before 1.6" \
    "$T/legacy.pt"
# lenient shapes once accepted (issue 42, item 9): a .npy shape without commas, a --shape with a
# trailing comma or a zero size
h="{'descr': '<i2', 'fortran_order': False, 'shape': (2 2), }"
h=$(printf '%s%*s' "$h" $((63 - (10 + ${#h}) % 64)) '')
{ printf '\223NUMPY\001\000%b' "\\0$(printf '%o' $((${#h} + 1)))\\0"; printf '%s\n' "$h"
  printf '\001\000\002\000\003\000\004\000'; } >"$T/nocomma.npy"
bad_import ".npy shape without commas" "shape must be (tokens, layers)" "$T/nocomma.npy"
printf '\001\000\002\000\003\000\004\000' >"$T/four.raw"
bad_import "--shape with a trailing comma" "invalid --shape '2,2,'" "$T/four.raw" \
    --format raw --shape 2,2, --dtype int16
bad_import "--shape of zero tokens" "invalid --shape '0,2,1'" "$T/four.raw" \
    --format raw --shape 0,2,1 --dtype int16
bad_import "meta with another format" "tokens format only" "$T/broken.jsonl" \
    --format jsonl --meta "$T/good.tokens"

begin "import: shapes of several inputs must agree"
printf '1,2 3,4 5,6\n' >"$T/three.tokens"
expect_exit 1 moe import --format tokens -o "$OUT" "$T/good.tokens" "$T/three.tokens"
expect_err_line "3 layers"
expect_no_output "$OUT"
end

begin "import: several inputs get distinct token ids"
run moe import --format tokens --no-PG -o "$OUT" "$T/good.tokens" "$T/good.tokens"
expect_eq "$rc" 0 "status"
expect_eq "$(moe view --no-header "$OUT" | cut -f 1 | tr '\n' ' ')" "0 1 2 3 " "token ids"
end

# With --experts the records go straight to the output; it follows -O like the spooled import
# (it was always binary before).
begin "import: --experts follows -O"
run moe import --format tokens --no-PG --experts 16 -O t -o "$T/direct.txt" "$T/good.tokens"
expect_eq "$rc" 0 "status"
run moe import --format tokens --no-PG -O t -o "$T/spooled.txt" "$T/good.tokens"
expect_eq "$(head -c 3 "$T/direct.txt")" "@MT" "text output"
expect_eq "$(grep -v '^@' "$T/direct.txt")" "$(grep -v '^@' "$T/spooled.txt")" "same records"
end

finish
