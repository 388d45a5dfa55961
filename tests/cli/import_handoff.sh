#!/bin/sh
# tests/cli/import_handoff.sh -- issue 38 items 2, 4 and 5, value by value: physical slots
# mapped back on import (--physical-map: SGLang's map of its routed experts, the recorder's
# ids as .npy, vLLM's with EPLB's phy2log); every form SGLang's --init-expert-location takes
# (torch.save dicts with a tensor or lists, inline JSON; the stat recorder's own dump as
# loads); a torch.save tuple of Hugging Face router logits (format torch, not sglang); vLLM's
# routed experts as its HTTP API returns them and as the SDK's numpy arrays. The samples were
# written from the producers' code: data/import/make_handoff.py (standard library) and
# data/import/make_torch_forms.py (torch.save itself, Debian's python3-torch), whose headers
# name the files and functions.
. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }
D=$DATA_DIR/import
P=$DATA_DIR/place
tab=$(printf '\t')

want() {
    _f=$1
    shift
    printf '%s\n' "$@" | tr ' ' "$tab" >"$_f"
}
# records NAME: the records (no header) of $T/NAME.txt into $T/NAME.rec.
records() { grep -v '^@' "$T/$1.txt" >"$T/$1.rec"; }

# ------------------------------------------------------------------ item 2: physical slots

# SGLang with EPLB: 4 model layers (0 and 2 dense, zeros), physical slots of the map
# sglang_routed_map.json; logical (t + l + 2k) mod 4 for token t of its request, layer l.
begin "base64: SGLang's physical slots mapped by its physical_to_logical_map"
run moe import --format base64 --shape 4,2 --dtype int32 --moe-layers 1,3 \
    --physical-map "$D/sglang_routed_map.json" --no-PG -O t -o "$T/sg.txt" \
    "$D/sglang_routed_phys.b64"
expect_eq "$rc" 0 "status"
records sg
want "$T/sg.want" \
    "0 0 0 0 0 1,3 3,1" \
    "1 0 1 0 0 2,0 0,2" \
    "2 0 2 0 0 3,1 1,3" \
    "3 1 0 0 0 1,3 3,1" \
    "4 1 1 0 0 2,0 0,2"
same_file "$T/sg.rec" "$T/sg.want" "records"
grep -q "^@CO${tab}dense: ids are physical slots, mapped to logical experts by --physical-map .*sglang_routed_map.json (6 slots, a row per input layer)\$" \
    "$T/sg.txt" || fail "no @CO line for the map"
# the same map as SGLang's --init-expert-location .pt and inline
printf '{"physical_to_logical_map": %s}' \
    "$(tr -d ' \n' <"$D/sglang_routed_map.json" | sed 's/.*:\(\[\[.*\]\]\)}/\1/')" >"$T/inl"
run moe import --format base64 --shape 4,2 --dtype int32 --moe-layers 1,3 \
    --physical-map "$(cat "$T/inl")" --no-PG -O t -o "$T/sg2.txt" "$D/sglang_routed_phys.b64"
expect_eq "$rc" 0 "inline map"
records sg2
same_file "$T/sg2.rec" "$T/sg.want" "records, inline map"
# without the map the slots stand as experts: 5 and 4 are not among 4 experts
run moe import --format base64 --shape 4,2 --dtype int32 --moe-layers 1,3 --experts 4 \
    -o "$T/x.moet" "$D/sglang_routed_phys.b64"
expect_eq "$rc" 1 "slots as experts"
expect_no_output "$T/x.moet"
end

begin "npy: the recorder's ids over every layer, --moe-layers and --physical-map"
run moe import --layout LTK --moe-layers 1,3 --physical-map "$D/sglang_routed_map.json" \
    --no-PG -O t -o "$T/ltk.txt" "$D/sglang_ltk_phys.npy"
expect_eq "$rc" 0 "status"
records ltk
head -n 3 "$T/sg.want" >"$T/ltk.want"
same_file "$T/ltk.rec" "$T/ltk.want" "records"
grep -q "^@CO${tab}dense: layers 0..1 are model layers 1,3 of 4\$" "$T/ltk.txt" ||
    fail "no model-layer line"
run moe import --layout LTK --first-moe-layer 1 --physical-map "$D/sglang_routed_map.json" \
    --no-PG -O t -o "$T/ltk2.txt" "$D/sglang_ltk_phys.npy"
expect_eq "$rc" 0 "--first-moe-layer"
grep -q "^@MT${tab}VN:1.0${tab}layers:3${tab}" "$T/ltk2.txt" || fail "layers 1..3 not kept"
end

# vLLM with EPLB: int16 [4 tokens, 2 MoE layers, 2], phy2log a row per MoE layer; token 0
# prefix-cached (-1): missing cells, not an error.
begin "raw: vLLM's physical slots mapped by EPLB's phy2log, -1 rows missing"
run moe import --format raw --shape 2,2 --dtype int16 --physical-map "$D/vllm_eplb_map.json" \
    --no-PG -O t -o "$T/vl.txt" "$D/vllm_routed_phys.raw"
expect_eq "$rc" 0 "status"
records vl
want "$T/vl.want" \
    "0 0 0 0 0 . ." \
    "1 0 1 0 0 1,3 2,0" \
    "2 0 2 0 0 2,0 3,1" \
    "3 0 3 0 0 3,1 0,2"
same_file "$T/vl.rec" "$T/vl.want" "records"
end

begin "bad physical maps and misplaced options: exit 1 or 2, one line"
run moe import --format raw --shape 2,2 --dtype int16 --physical-map "$D/sglang_routed_map.json" \
    -o "$T/x.moet" "$D/vllm_routed_phys.raw"
expect_eq "$rc" 1 "a map of 4 rows for 2 layers"
expect_err_line "--physical-map: 'physical_to_logical_map' must be [layers][slots], a row per input layer (2) or per kept layer (2): it is 4 x 6"
printf '{"phy2log": [[0, 1], [1, 0]]}\n' >"$T/small.json"
run moe import --format raw --shape 2,2 --dtype int16 --physical-map "$T/small.json" \
    -o "$T/x.moet" "$D/vllm_routed_phys.raw"
expect_eq "$rc" 1 "slots past the map"
expect_err_line "token 1, layer 0: physical slot 5 out of range (2 slots in --physical-map)"
printf '{"phy2log": [[0, 1], [1, -1]]}\n' >"$T/neg.json"
run moe import --format raw --shape 2,2 --dtype int16 --physical-map "$T/neg.json" \
    -o "$T/x.moet" "$D/vllm_routed_phys.raw"
expect_eq "$rc" 1 "a map with -1"
expect_err_line "--physical-map: row 1 slot 1: -1 is not an expert id"
run moe import --format raw --shape 2,2 --dtype int16 --physical-map "$T/none.json" \
    -o "$T/x.moet" "$D/vllm_routed_phys.raw"
expect_eq "$rc" 1 "no map file"
expect_err_line "--physical-map: cannot open"
run moe import --physical-map "$D/vllm_eplb_map.json" -o "$T/x.moet" "$DATA_DIR/import/tiny.tokens"
expect_eq "$rc" 1 "tokens format"
expect_err_line "--physical-map does not apply to the tokens format"
run moe import --topk 2 --physical-map "$D/vllm_eplb_map.json" -o "$T/x.moet" \
    "$D/hf_router_logits.pt"
expect_eq "$rc" 1 "logits"
expect_err_line "--physical-map applies to expert ids, not to router logits"
expect_no_output "$T/x.moet"
end

# ------------------------------------------------------------------ item 4: SGLang's forms

# copies FILE: a placement's records.
copies() { grep -v -e '^@' -e '^#' "$1"; }

begin "moe-place import --format sglang: .pt (tensor, lists), inline JSON, .json alike"
expect_exit 0 mp import --format sglang --ranks 4 --gpus-per-node 2 --no-PG \
    -o "$T/json.moep" "$P/sglang_map.json"
copies "$T/json.moep" >"$T/want"
for f in "$P/sglang_map.pt" "$P/sglang_map_list.pt" "$(tr -d '\n' <"$P/sglang_map.json")"; do
    expect_exit 0 mp import --format sglang --ranks 4 --gpus-per-node 2 --no-PG \
        -o "$T/f.moep" "$f"
    copies "$T/f.moep" >"$T/got"
    same_file "$T/got" "$T/want" "the placement of $f"
    head -n 1 "$T/f.moep" | grep -q "${tab}model_layers:2\$" || fail "no model_layers ($f)"
done
grep -q "^@CO${tab}source: (inline JSON) (format sglang)\$" "$T/f.moep" ||
    fail "the inline JSON is not named"
end

begin "the stat recorder's dump: loads for fit --loads, refused by import"
expect_exit 0 mp fit --ranks 2 --method balanced --no-PG --loads "$D/sglang_stat_dump.pt" \
    -o "$T/a.moep"
expect_exit 0 mp fit --ranks 2 --method balanced --no-PG --loads "$D/sglang_stat_dump.json" \
    -o "$T/b.moep"
same_file "$T/a.moep" "$T/b.moep" "fit of the .pt dump and of the same counts as JSON"
expect_exit 0 mp fit --ranks 2 --method balanced --no-PG \
    --loads "$(cat "$D/sglang_stat_dump.json")" -o "$T/c.moep"
same_file "$T/c.moep" "$T/b.moep" "fit of the counts given inline"
# the counts summed over the two steps: layer 0's total, 41, is the largest (@FT's tokens)
grep -q '^@FT.*tokens:41' "$T/a.moep" || fail "tokens of the fit: $(grep '^@FT' "$T/a.moep")"
run mp import --format sglang --ranks 2 "$D/sglang_stat_dump.pt"
expect_eq "$rc" 1 "import of the dump"
expect_tool_err_line moe-place "holds 'logical_count' (expert loads for SGLang's own rebalancing), not a placement (moe-place fit --loads reads it)"
run mp import --format sglang --ranks 2 '{"physical_to_logical_map": [[0, 1]], "ep_size": 2}'
expect_eq "$rc" 1 "two keys inline"
expect_tool_err_line moe-place "exactly one key, 'physical_to_logical_map' or 'logical_count' (2 keys here: 'ep_size')"
run mp import --format sglang --ranks 2 "$D/hf_router_logits.pt"
expect_eq "$rc" 1 "a tuple"
expect_tool_err_line moe-place "torch.save archive holds a tuple, not a dict with 'physical_to_logical_map'"
end

# Hugging Face: torch.save(out.router_logits), a tuple of 2 [5, 4] bfloat16 tensors; the top-2
# and weights as torch.topk of the softmax gives them (make_torch_forms.py's LOGITS).
begin "torch: a tuple of router logits is format torch, not sglang"
run moe import --no-PG -O t -o "$T/hf.txt" "$D/hf_router_logits.pt"
expect_eq "$rc" 1 "without --topk"
expect_err_line "router logits need --topk K"
run moe import --topk 2 --no-PG -O t -o "$T/hf.txt" "$D/hf_router_logits.pt"
expect_eq "$rc" 0 "with --topk"
records hf
want "$T/hf.want" \
    "0 0 0 0 0 2:0.8175745,0:0.18242553 3:0.7310586,2:0.26894143" \
    "1 0 1 0 0 0:0.62245935,1:0.37754068 0:0.7310586,1:0.26894143" \
    "2 0 2 0 0 3:0.9046505,1:0.09534947 0:0.53120935,1:0.46879062" \
    "3 0 3 0 0 2:0.70578504,1:0.29421496 0:0.8175745,3:0.18242553" \
    "4 0 4 0 0 0:0.7772999,3:0.22270013 3:0.7310586,1:0.26894143"
same_file "$T/hf.rec" "$T/hf.want" "records"
grep -q "^@CO${tab}source: .*hf_router_logits.pt (format torch)\$" "$T/hf.txt" ||
    fail "not the torch format"
# the tuple's layers are labelled, not selected
run moe import --topk 2 --first-moe-layer 1 --model-layers 3 --no-PG -O t -o "$T/hf2.txt" \
    "$D/hf_router_logits.pt"
expect_eq "$rc" 0 "labels"
grep -q "^@CO${tab}model-layers: layers 0..1 are model layers 1-2 of 3\$" "$T/hf2.txt" ||
    fail "no model-layers line"
end

# ------------------------------------------------------------------ item 5: vLLM

# The response: a prompt of 3 tokens (the first 2 prefix-cached: -1), choice 0 of 2 generated
# tokens, choice 1 of 1; sequences prompt, choice 0, choice 1, positions from the prompt's.
begin "vllm: the HTTP response as it comes"
run moe import --no-PG -O t -o "$T/resp.txt" "$D/vllm_response.json"
expect_eq "$rc" 0 "status"
records resp
want "$T/resp.want" \
    "0 0 0 0 0 . ." \
    "1 0 1 0 0 . ." \
    "2 0 2 0 0 1,2 3,0" \
    "3 1 3 0 0 0,1 2,3" \
    "4 1 4 0 0 3,1 1,0" \
    "5 2 3 0 0 2,0 0,2"
same_file "$T/resp.rec" "$T/resp.want" "records"
grep -q "(format vllm)\$" "$T/resp.txt" || fail "not detected as vllm"
# two responses, one per line: the second's sequences follow
{ tr -d '\n' <"$D/vllm_response.json"; echo; tr -d '\n' <"$D/vllm_response.json"; echo; } \
    >"$T/two.jsonl"
run moe import --no-PG -O t -o "$T/two.txt" "$T/two.jsonl"
expect_eq "$rc" 0 "two responses"
expect_eq "$(grep -vc '^@' "$T/two.txt")" 12 "tokens of two responses"
printf '{"choices": [{"text": "x"}]}\n{"routed_experts": 1}\n' >"$T/bad.json"
run moe import --format vllm -o "$T/x.moet" "$T/bad.json"
expect_eq "$rc" 1 "no routed experts"
expect_err_line "response 0: no routed experts (neither 'prompt_routed_experts' nor a choice's 'routed_experts': serve with --enable-return-routed-experts)"
printf '{"prompt_routed_experts": [[[1, 2]], [[3]]]}\n' >"$T/bad.json"
run moe import --format vllm -o "$T/x.moet" "$T/bad.json"
expect_eq "$rc" 1 "ragged"
expect_err_line "response 0: 'prompt_routed_experts' is not a [tokens][layers][top_k] list of expert ids"
expect_no_output "$T/x.moet"
end

# The SDK's numpy arrays: int16 [5, 3, 2] with token 0 cached (-1), uint8 and uint16 [4, 3,
# 2] (the same ids without it): (t + 3l + k) mod 8.
begin "npy: vLLM's routed experts as numpy arrays (int16, uint8, uint16)"
want "$T/np.want" \
    "0 0 0 0 0 1,2 4,5 7,0" \
    "1 0 1 0 0 2,3 5,6 0,1" \
    "2 0 2 0 0 3,4 6,7 1,2" \
    "3 0 3 0 0 4,5 7,0 2,3"
for f in u1 u2; do
    run moe import --no-PG -O t -o "$T/np.txt" "$D/vllm_routed_$f.npy"
    expect_eq "$rc" 0 "$f"
    records np
    same_file "$T/np.rec" "$T/np.want" "records ($f)"
done
run moe import --no-PG -O t -o "$T/np.txt" "$D/vllm_routed_i2.npy"
expect_eq "$rc" 0 "int16 with a cached row"
records np
sed -n 2,5p "$T/np.rec" | cut -f6- >"$T/np.got"
cut -f6- "$T/np.want" >"$T/np.w"
same_file "$T/np.got" "$T/np.w" "ids of the int16 array"
head -n 1 "$T/np.rec" | grep -q "${tab}\.${tab}\.${tab}\.\$" || fail "the cached row is not missing"
end

finish
