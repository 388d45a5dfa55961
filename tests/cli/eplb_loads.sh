#!/bin/sh
# tests/cli/eplb_loads.sh -- vLLM's EPLB load window and SGLang's logical_count as expert loads:
# moe-trace stats --format vllm (export) and moe-place fit --loads (import, --physical-map).
#
# The layout is vLLM's EplbState.expert_load_window, (window_size, num_moe_layers,
# num_physical_experts) token counts, as a user saves it with safetensors' save_file (one
# tensor "expert_load_window"); the hand-made files below are written with printf from the
# safetensors layout (8-byte little-endian header length, the JSON header, the data): no
# third-party file is copied.

. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }
D=$DATA_DIR/place

# records FILE: a placement's records (no @ lines, no comments).
records() {
    grep -v -e '^@' -e '^#' "$1"
}

# st_file OUT JSON DATA: a safetensors file of header JSON (under 256 bytes) and the bytes the
# printf format DATA writes.
st_file() {
    _n=$(printf '%s' "$2" | wc -c | tr -d ' ')
    printf "\\$(printf '%03o' "$_n")\\0\\0\\0\\0\\0\\0\\0" >"$1"
    printf '%s' "$2" >>"$1"
    printf "$3" >>"$1"
}

TR=$T/g.moet   # 3 layers x 8 experts, top-2, 3000 tokens
moe gen -L 3 -E 8 -k 2 -n 3000 -S 5 --no-PG -o "$TR" || { echo "cannot make the trace"; exit 1; }

begin "stats --format vllm writes the per-layer loads value by value"
expect_exit 0 moe stats --format vllm -o "$T/w.st" "$TR"
expect_exit 0 moe stats --format json --loads "$TR"
cp "$T/out" "$T/stats.json"
if have python3; then
    python3 - "$T/w.st" "$T/stats.json" <<'PY' || fail "load window differs from stats"
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
t = h['expert_load_window']
assert list(h) == ['expert_load_window'] and t['dtype'] == 'I64', h
assert t['shape'] == [1, 3, 8] and t['data_offsets'] == [0, 192], t
assert len(b) == 8 + n + 192 and n % 8 == 0
v = struct.unpack('<24q', b[8 + n:])
s = json.load(open(sys.argv[2]))
want = [x for l in s['per_layer'] for x in l['loads']]
assert list(v) == want, (v, want)
PY
else
    skip_case "no python3"
fi
end

begin "stats --format vllm --window N: windows of N tokens in trace order"
expect_exit 0 moe stats --format vllm --window 700 -o "$T/w5.st" "$TR"
if have python3; then
    python3 - "$T/w5.st" "$T/w.st" <<'PY' || fail "windows do not add up"
import json, struct, sys
def read(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    t = json.loads(b[8:8 + n])['expert_load_window']
    return t['shape'], struct.unpack('<%dq' % ((len(b) - 8 - n) // 8), b[8 + n:])
(W, L, E), v = read(sys.argv[1])
_, tot = read(sys.argv[2])
assert (W, L, E) == (5, 3, 8)
for w in range(W):  # 700 tokens (the last 200), top-2, every cell present
    for l in range(L):
        assert sum(v[(w * L + l) * E:(w * L + l + 1) * E]) == 2 * (700 if w < 4 else 200)
assert [sum(v[w * 24 + i] for w in range(W)) for i in range(24)] == list(tot)
PY
fi
end

begin "fit --loads of the exported window equals the fit of the trace"
expect_exit 0 mp fit --ranks 4 --method balanced "$TR"
records "$T/out" >"$T/want"
expect_exit 0 mp fit --ranks 4 --method balanced --loads "$T/w.st"
records "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "balanced fit from the load window"
expect_exit 0 mp fit --ranks 4 --method balanced --loads "$T/w5.st"
records "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "balanced fit from five windows"
end

begin "fit --loads of SGLang's logical_count equals the fit of the trace"
expect_exit 0 moe stats --format sglang -o "$T/lc.json" "$TR"
expect_exit 0 mp fit --ranks 4 --method balanced --loads "$T/lc.json"
records "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "balanced fit from logical_count"
end

begin "a physical map with redundant slots sums each expert's slots"
# 2 layers x 6 slots, I32: phy2log [[0,0,1,0,2,3],[3,1,1,2,3,0]] (eplb_two_slots.json) gives
# layer 0: e0 = 10+20+40, e1 = 30, e2 = 50, e3 = 60; layer 1: e0 = 6, e1 = 2+3, e2 = 4, e3 = 1+5
l0='\012\0\0\0\024\0\0\0\036\0\0\0\050\0\0\0\062\0\0\0\074\0\0\0'  # 10 20 30 40 50 60
l1='\001\0\0\0\002\0\0\0\003\0\0\0\004\0\0\0\005\0\0\0\006\0\0\0'  # 1 2 3 4 5 6
st_file "$T/r.st" '{"expert_load_window":{"dtype":"I32","shape":[1,2,6],"data_offsets":[0,48]}}' \
    "$l0$l1"
printf '{"logical_count":[[70,30,50,60],[6,5,4,6]]}\n' >"$T/sum.json"
expect_exit 0 mp fit --ranks 2 --method balanced --loads "$T/sum.json"
records "$T/out" >"$T/want"
expect_exit 0 mp fit --ranks 2 --method balanced --loads "$T/r.st" --physical-map \
    "$D/eplb_two_slots.json"
records "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "fit through the EPLB map"
expect_exit 0 mp fit --ranks 2 --method balanced --loads "$T/r.st" --physical-map \
    "$D/eplb_two_slots.json" --experts 4
records "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "fit through the map with --experts"
# the sums differ from the slots read as experts: the map is not ignored
expect_exit 0 mp fit --ranks 2 --method balanced --loads "$T/r.st"
records "$T/out" >"$T/got"
grep -q '^0	5	' "$T/got" || fail "six slots without a map are six experts"
end

begin "bad loads files exit 1 with one line"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/r.st" --experts 4
expect_tool_err_line moe-place "physical map"
head -c 40 "$T/r.st" >"$T/trunc.st"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/trunc.st"
expect_tool_err_line moe-place "trunc.st"
st_file "$T/x.st" '{"other":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},'\
'"b":{"dtype":"I32","shape":[0],"data_offsets":[8,8]}}' '\0\0\0\0\0\0\0\0'
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/x.st"
expect_tool_err_line moe-place "no tensor 'expert_load_window'"
st_file "$T/neg.st" '{"expert_load_window":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]}}' \
    '\377\377\377\377\0\0\0\0'
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/neg.st"
expect_tool_err_line moe-place "is not a count"
# 3000 steps of 8e15 (each below 2^53): the sum over the steps passes 2^64 (issue 42, item 9)
awk 'BEGIN { printf "{\"logical_count\":["; for (i = 0; i < 3000; i++)
    printf "%s[[8000000000000000,1]]", i ? "," : ""; print "]}" }' >"$T/wrap.json"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/wrap.json"
expect_tool_err_line moe-place "load summed over the windows and slots passes 2^64"
printf '{"logical_count":[[\n\n]]}\n' >"$T/empty.json" # found by the fuzzer (UBSan)
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/empty.json"
expect_tool_err_line moe-place "out of range"
printf '{"logical_count": 3}\n' >"$T/k.json"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/k.json"
expect_tool_err_line moe-place "logical_count"
printf '{"logical_count": [[1,2],[3' >"$T/cut.json"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/cut.json"
expect_tool_err_line moe-place "malformed JSON"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/r.st" --physical-map \
    "$D/sglang_map.json"
expect_tool_err_line moe-place "sglang_map.json"
: >"$T/empty"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/empty"
expect_tool_err_line moe-place "empty file"
st_file "$T/none.st" '{"__metadata__":{}}' ''
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/none.st"
expect_tool_err_line moe-place "holds no tensor"
expect_exit 1 mp fit --ranks 2 --method balanced --loads "$T/missing"
expect_tool_err_line moe-place "missing"
expect_no_stdout
end

begin "loads options are usage errors where they do not apply"
expect_exit 2 mp fit --ranks 2 --loads "$T/sum.json"
expect_tool_usage moe-place fit "--loads"
expect_exit 2 mp fit --ranks 2 --method balanced --loads "$T/sum.json" "$TR"
expect_tool_usage moe-place fit "--loads"
expect_exit 2 mp fit --ranks 2 --method balanced --topk 1 --loads "$T/sum.json"
expect_tool_usage moe-place fit "--topk"
expect_exit 2 mp fit --ranks 2 --method balanced --physical-map "$T/sum.json" "$TR"
expect_tool_usage moe-place fit "--physical-map"
expect_exit 2 moe stats --window 10 "$TR"
expect_usage_error stats
expect_exit 1 moe stats --format vllm -o "$T/never.st" "$T/missing"
expect_err_line "missing"
[ -e "$T/never.st" ] && fail "output left after a failure"
end

finish
