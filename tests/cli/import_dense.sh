#!/bin/sh
# tests/cli/import_dense.sh -- dense arrays: safetensors files of expert ids and of Hugging
# Face router logits (--topk: top-k and softmax gate weights), SGLang's base64 "return routed
# experts" with dense layers (--moe-layers) and vLLM's raw int16 arrays, from files, pipes and
# gzip; malformed files fail with one line. The samples were written by
# tests/data/import/make_dense.py (Python standard library only, from the formats' documented
# layouts); the gate weights are checked against a softmax computed here in awk.
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

# records NAME: the records (no header) of the text output $T/NAME.txt into $T/NAME.rec.
records() { grep -v '^@' "$T/$1.txt" >"$T/$1.rec"; }

# The ids of st_ids.safetensors: [4 tokens, 3 layers, top-2], (t*5 + l*3 + k*7) mod 8, and
# token 2's layer 1 holding a -1 (a missing cell, '.').
want "$T/ids.want" \
    "0 0 0 0 0 0,7 3,2 6,5" \
    "1 0 1 0 0 5,4 0,7 3,2" \
    "2 0 2 0 0 2,1 . 0,7" \
    "3 0 3 0 0 7,6 2,1 5,4"

begin "safetensors: an int32 [tokens, layers, k] tensor, value by value"
run moe import --no-PG -O t -o "$T/ids.txt" "$D/st_ids.safetensors"
expect_eq "$rc" 0 "status"
expect_err_line "4 tokens (1 incomplete, 1 missing cells, 0 dropped)"
records ids
same_file "$T/ids.want" "$T/ids.rec" "records"
expect_eq "$(grep -c "^@CO${tab}safetensors: tensor 'topk_ids', I32 \[4, 3, 2\]" "$T/ids.txt")" 1 \
    "tensor named in the header"
expect_eq "$(grep -c '^@MT.*layers:3	experts:8	topk:2	' "$T/ids.txt")" 1 "shape"
end

begin "safetensors: --layout LTK reads an int64 [layers, tokens, k] tensor"
run moe import --layout LTK --no-PG -O t -o "$T/ltk.txt" "$D/st_ids_ltk.safetensors"
expect_eq "$rc" 0 "status"
records ltk
same_file "$T/ids.want" "$T/ltk.rec" "records"
end

begin "safetensors: from a pipe, gzipped, and from a pipe with a tensor per layer"
run sh -c "cat '$D/st_ids.safetensors' | '$MOE_BIN/moe-trace' import --no-PG -O t -o '$T/p.txt' -"
expect_eq "$rc" 0 "status (pipe)"
records p
same_file "$T/ids.want" "$T/p.rec" "records (pipe)"
gzip -c "$D/st_ids.safetensors" >"$T/ids.safetensors.gz"
run moe import --no-PG -O t -o "$T/gz.txt" "$T/ids.safetensors.gz"
expect_eq "$rc" 0 "status (gzip)"
records gz
same_file "$T/ids.want" "$T/gz.rec" "records (gzip)"
run moe import --topk 2 --tensor 'router_logits.*' --no-PG -O t -o "$T/lf.txt" \
    "$D/st_logits.safetensors"
run sh -c "cat '$D/st_logits.safetensors' | '$MOE_BIN/moe-trace' import --topk 2 \
    --tensor 'router_logits.*' --no-PG -O t -o '$T/lp.txt' -"
expect_eq "$rc" 0 "status (logits from a pipe)"
records lf
records lp
same_file "$T/lf.rec" "$T/lp.rec" "records (logits from a pipe)"
end

begin "safetensors: several tensors need --tensor; the error lists them"
expect_exit 1 moe import -o "$OUT" "$D/st_multi.safetensors"
expect_err_line "2 tensors: b, a (pick one with --tensor NAME"
expect_no_output "$OUT"
run moe import --tensor b --no-PG -O t -o "$T/b.txt" "$D/st_multi.safetensors"
expect_eq "$rc" 0 "status"
records b
want "$T/b.want" "0 0 0 0 0 1 2" "1 0 1 0 0 3 4" "2 0 2 0 0 5 6"
same_file "$T/b.want" "$T/b.rec" "records of int16 [3, 2, 1]"
# A 2-D id tensor is [tokens, layers], top-1 (uint8 here).
run moe import --tensor a --no-PG -O t -o "$T/a.txt" "$D/st_multi.safetensors"
records a
want "$T/a.want" "0 0 0 0 0 7 6" "1 0 1 0 0 5 4"
same_file "$T/a.want" "$T/a.rec" "records of uint8 [2, 2]"
expect_exit 1 moe import --tensor c -o "$OUT" "$D/st_multi.safetensors"
expect_err_line "no tensor 'c' in the safetensors file (it holds 2 tensors: b, a)"
end

# check_logits REC K RENORM LAYERS...: every record of REC against the top-K of the logits in
# st_logits.txt (rows: layer 1's tokens 0..2, layer 2's, layer 10's), ties to the lower id,
# weights the softmax (RENORM 1: over the K) to 1e-6. Prints the mismatches.
check_logits() {
    awk -v K="$2" -v RN="$3" -v LAYERS="$4" '
    FNR == NR { for (e = 1; e <= NF; e++) x[NR - 1, e - 1] = $e; E = NF; next }
    {
        t = $3; nl = split(LAYERS, ls, ",")
        if (NF != 5 + nl) { print "record " FNR ": " NF " fields"; next }
        for (j = 1; j <= nl; j++) {
            row = ls[j] * 3 + t; m = -1e300
            for (e = 0; e < E; e++) { used[e] = 0; if (x[row, e] > m) m = x[row, e] }
            z = 0; for (e = 0; e < E; e++) z += exp(x[row, e] - m)
            zk = 0
            for (k = 0; k < K; k++) {
                b = -1
                for (e = 0; e < E; e++)
                    if (!used[e] && (b < 0 || x[row, e] > x[row, b])) b = e
                used[b] = 1; id[k] = b; zk += exp(x[row, b] - m)
            }
            n = split($(5 + j), cell, ",")
            for (k = 0; k < K; k++) {
                split(cell[k + 1], iw, ":")
                w = exp(x[row, id[k]] - m) / (RN ? zk : z)
                d = iw[2] - w; if (d < 0) d = -d
                if (n != K || iw[1] != id[k] || d > 1e-6)
                    print "token " t " layer " j - 1 ": got " $(5 + j) ", want " id[k] ":" w
            }
        }
    }' "$D/st_logits.txt" "$1"
}

begin "logits: a float32 tensor per layer, --topk 2, softmax renormalised over the k"
run moe import --topk 2 --tensor 'router_logits.*' --no-PG -O t -o "$T/lg.txt" \
    "$D/st_logits.safetensors"
expect_eq "$rc" 0 "status"
expect_no_stderr
records lg
expect_eq "$(wc -l <"$T/lg.rec" | tr -d ' ')" 3 "tokens"
expect_eq "$(check_logits "$T/lg.rec" 2 1 0,1,2)" "" "ids and weights (layers 1, 2, 10)"
expect_eq "$(grep -c '^@MT.*layers:3	experts:5	topk:2	.*weights:1$' "$T/lg.txt")" 1 "shape"
# Token 1 of layer 2 ties experts 1 and 3 (2.5): the lower id comes first.
expect_eq "$(sed -n 2p "$T/lg.rec" | cut -f7)" "1:0.5,3:0.5" "tie to the lower id"
end

begin "logits: --no-renorm keeps the softmax over all experts; --topk 3"
run moe import --topk 3 --no-renorm --tensor 'router_logits.*' --no-PG -O t -o "$T/nr.txt" \
    "$D/st_logits.safetensors"
expect_eq "$rc" 0 "status"
records nr
expect_eq "$(check_logits "$T/nr.rec" 3 0 0,1,2)" "" "ids and weights"
end

begin "logits: bfloat16 [layers, tokens, experts] (--layout LTK) and float16 [tokens, experts]"
run moe import --topk 2 --layout LTK --no-PG -O t -o "$T/bf.txt" "$D/st_logits_bf16.safetensors"
expect_eq "$rc" 0 "status"
records bf
expect_eq "$(check_logits "$T/bf.rec" 2 1 0,1)" "" "bf16 ids and weights"
run moe import --topk 2 --no-PG -O t -o "$T/hf.txt" "$D/st_logits_f16.safetensors"
records hf
expect_eq "$(check_logits "$T/hf.rec" 2 1 0)" "" "f16 ids and weights"
end

begin "logits: .npy float32 [layers, tokens, experts] (file, pipe) and float16 [tokens, experts]"
run moe import --topk 2 --layout LTK --no-PG -O t -o "$T/nl.txt" "$D/logits_ltk.npy"
expect_eq "$rc" 0 "status"
records nl
expect_eq "$(check_logits "$T/nl.rec" 2 1 0,1,2)" "" "ids and weights"
run sh -c "cat '$D/logits_ltk.npy' | '$MOE_BIN/moe-trace' import --topk 2 --layout LTK --no-PG \
    -O t -o '$T/np.txt' -"
expect_eq "$rc" 0 "status (pipe)"
records np
same_file "$T/nl.rec" "$T/np.rec" "records (pipe)"
run moe import --topk 2 --no-renorm --no-PG -O t -o "$T/n2.txt" "$D/logits_f2.npy"
records n2
expect_eq "$(check_logits "$T/n2.rec" 2 0 0)" "" "f16 ids and weights"
# big-endian float32 ('>f4'): the same tokens as the little-endian file (issue 42, item 8)
run moe import --topk 2 --layout LTK --no-PG -O t -o "$T/nb.txt" "$D/logits_be.npy"
expect_eq "$rc" 0 "status (big endian)"
records nb
same_file "$T/nl.rec" "$T/nb.rec" "records (big endian)"
end

begin "logits and ids: --topk only with floats, floats only with --topk"
expect_exit 1 moe import --topk 2 -o "$OUT" "$D/st_ids.safetensors"
expect_err_line "--topk applies to float router logits"
expect_exit 1 moe import -o "$OUT" "$D/st_logits_f16.safetensors"
expect_err_line "router logits need --topk K"
expect_exit 1 moe import --topk 6 -o "$OUT" "$D/st_logits_f16.safetensors"
expect_err_line "--topk 6 exceeds the 5 experts"
expect_no_output "$OUT"
end

# SGLang: two requests (3 and 2 tokens) of 4 model layers, 1 and 3 MoE, (seed + t*3 + l +
# k*5) mod 16 with seeds 1 and 7; the dense layers 0 and 2 hold zeros.
begin "base64: SGLang's routed experts, one request per line, dense layers dropped"
run moe import --format base64 --shape 4,2 --dtype int32 --moe-layers 1,3 --no-PG -O t \
    -o "$T/sg.txt" "$D/sglang_routed.b64"
expect_eq "$rc" 0 "status"
expect_no_stderr
records sg
want "$T/sg.want" \
    "0 0 0 0 0 2,7 4,9" \
    "1 0 1 0 0 5,10 7,12" \
    "2 0 2 0 0 8,13 10,15" \
    "3 1 0 0 0 8,13 10,15" \
    "4 1 1 0 0 11,0 13,2"
same_file "$T/sg.want" "$T/sg.rec" "records"
expect_eq "$(grep -c "^@CO${tab}dense: layers 0..1 are model layers 1,3 of 4$" "$T/sg.txt")" 1 \
    "model layer ids in the header"
# Without --moe-layers the dense layers' zeros are no top-2 (expert 0 twice): refused, not
# read as routing to expert 0 (issue 38, item 2).
run moe import --format base64 --shape 4,2 --dtype int32 --no-PG -O t -o "$T/sga.txt" \
    "$D/sglang_routed.b64"
expect_eq "$rc" 1 "status without --moe-layers"
expect_err_line "token 0, layer 0: expert 0 twice in one cell (a dense layer? SGLang's and vLLM's routed experts leave dense layers 0: keep the MoE layers with --moe-layers or --first-moe-layer)"
expect_no_output "$T/sga.txt"
end

begin "raw: vLLM's int16 [tokens, MoE layers, k], T inferred or given, file or pipe"
want "$T/vl.want" "0 0 0 0 0 0,1 2,3" "1 0 1 0 0 7,8 9,0" "2 0 2 0 0 4,5 6,7"
run moe import --format raw --shape 2,2 --dtype int16 --no-PG -O t -o "$T/vl.txt" \
    "$D/vllm_routed.raw"
expect_eq "$rc" 0 "status"
records vl
same_file "$T/vl.want" "$T/vl.rec" "records"
run sh -c "cat '$D/vllm_routed.raw' | '$MOE_BIN/moe-trace' import --format raw --shape 3,2,2 \
    --dtype int16 --no-PG -O t -o '$T/vp.txt' -"
expect_eq "$rc" 0 "status (pipe, T given)"
records vp
same_file "$T/vl.want" "$T/vp.rec" "records (pipe)"
base64 -w0 "$D/vllm_routed.raw" >"$T/vl.b64"
echo >>"$T/vl.b64"
run moe import --format base64 --shape 2,2 --dtype int16 --no-PG -O t -o "$T/vb.txt" \
    "$T/vl.b64"
records vb
same_file "$T/vl.want" "$T/vb.rec" "records (base64 of the same bytes)"
end

# bad_import WHAT SUBSTRING FILE [OPTIONS...]: import fails with one line, no output.
bad_import() {
    _what=$1 _sub=$2 _file=$3
    shift 3
    begin "bad input: $_what"
    expect_exit 1 moe import "$@" -o "$OUT" "$_file"
    expect_err_line "$_sub"
    expect_no_output "$OUT"
    end
}

head -c 150 "$D/st_ids.safetensors" >"$T/cut.safetensors"
head -c 100 "$D/st_ids.safetensors" >"$T/cuthdr.safetensors"
printf '\377\377\000\000\000\000\000\000{}' >"$T/long.safetensors"
printf '\000\000\000\020\000\000\000\000{}' >"$T/huge.safetensors"
printf '\002\000\000\000\000\000\000\000{}' >"$T/empty.safetensors"
printf 'AAAAAA==\nAA*A\n' >"$T/bad.b64"
printf 'AAAAAAA=\n' >"$T/odd.b64"
head -c 22 "$D/vllm_routed.raw" >"$T/cut.raw"
bad_import "truncated safetensors data" "safetensors file has 150 bytes, its header describes 216" \
    "$T/cut.safetensors"
begin "bad input: truncated safetensors data (pipe)"
run sh -c "cat '$T/cut.safetensors' | '$MOE_BIN/moe-trace' import -o '$OUT' -"
expect_eq "$rc" 1 "status"
expect_err_line "truncated data"
expect_no_output "$OUT"
end
bad_import "truncated safetensors header" "header length 112 goes beyond the end of the file" \
    "$T/cuthdr.safetensors"
bad_import "header length beyond the file" "header length 65535 goes beyond the end" \
    "$T/long.safetensors"
bad_import "header length over the format's limit" "exceeds the format's limit" \
    "$T/huge.safetensors"
bad_import "no tensor" "holds no tensor" "$T/empty.safetensors"
bad_import "overlapping data_offsets" "tensor 'y': data overlaps" "$D/st_bad_overlap.safetensors"
bad_import "a hole in the buffer" "tensor 'x': leaves a hole" "$D/st_bad_hole.safetensors"
bad_import "unknown dtype" "tensor 'x': unknown dtype 'Q4'" "$D/st_bad_dtype.safetensors"
bad_import "shape product and bytes disagree" \
    "shape holds 3 I32 elements, but data_offsets give 8" "$D/st_bad_shape.safetensors"
bad_import "bytes after the data" "has 92 bytes, its header describes 88" \
    "$D/st_bad_trailing.safetensors"
bad_import "a name given twice" "tensor 'x': given twice" "$D/st_bad_dup.safetensors"
bad_import "shape x dtype past 2^64 bits" "tensor 'x': shape too large" \
    "$D/st_bad_overflow.safetensors"
bad_import "--moe-layers past the layers" "--moe-layers names layer 4, but the input has 4" \
    "$D/sglang_routed.b64" --format base64 --shape 4,2 --dtype int32 --moe-layers 1,3-4
bad_import "bad base64" "line 2: bad base64 at column 3" "$T/bad.b64" --format base64 \
    --shape 1,1 --dtype int32
bad_import "base64 of part of a token" "line 1: 5 bytes are not whole tokens of 4 bytes" \
    "$T/odd.b64" --format base64 --shape 1,1 --dtype int32
bad_import "raw data ending inside a token" "the data ends inside token 2" "$T/cut.raw" \
    --format raw --shape 2,2 --dtype int16
bad_import "raw data shorter than --shape" "truncated data: token 3 of 4" \
    "$D/vllm_routed.raw" --format raw --shape 4,2,2 --dtype int16
bad_import "raw without --dtype" "needs --shape [T,]L,K and --dtype" "$D/vllm_routed.raw" \
    --format raw --shape 2,2
bad_import "--tensor with another format" "--tensor does not apply to the tokens format" \
    "$D/tiny.tokens" --tensor x
bad_import "--shape with safetensors" "--shape and --dtype do not apply to the safetensors" \
    "$D/st_ids.safetensors" --shape 1,2 --dtype int8
bad_import "--topk with text" "--topk does not apply to the tokens format" "$D/tiny.tokens" \
    --topk 2

finish
