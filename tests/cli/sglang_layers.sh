#!/bin/sh
# tests/cli/sglang_layers.sh -- issue 38 item 1: SGLang indexes physical_to_logical_map and
# logical_count by model layer, dense layers included (python/sglang/srt/eplb/
# expert_location.py: ModelConfigForExpertLocation.num_layers = num_hidden_layers;
# FusedMoE.weight_loader asks logical_to_all_physical(self.layer_id, ...), layer_id the decoder
# layer's). The model layers travel from the trace's @CO lines (moe-trace import
# --first-moe-layer/--moe-layers/--model-layers, or the importers' own lines) through moe-place
# fit into moe-place(5)'s @PL (model_layers, moe_layers), and out as a row per model layer, the
# dense rows as SGLang's init_trivial lays them out; SGLang's own maps evaluate on the trace of
# the MoE layers alone. tests/cli/sglang_loader.sh checks the export with SGLang's loader.
. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }
D=$DATA_DIR/place
tab=$(printf '\t')

# A DeepSeek-V2-Lite-shaped trace in the tokens format, as the Hugging Face hook writes it: 26
# MoE layers (model layers 1..26 of 27; layer 0 dense), 64 experts, top-6.
moe gen -L 26 -E 64 -k 6 -n 1200 -s 12 -S 5 --no-PG | moe view --no-header |
    cut -f6- | tr '\t' ' ' >"$T/ds.tokens" || { echo "cannot make the test trace"; exit 99; }

begin "import --first-moe-layer --model-layers records the model layers"
expect_exit 0 moe import --first-moe-layer 1 --model-layers 27 --no-PG -o "$T/ds.moet" \
    "$T/ds.tokens"
moe view "$T/ds.moet" | grep '^@CO' >"$T/co"
grep -qx "@CO${tab}model-layers: layers 0..25 are model layers 1-26 of 27" "$T/co" ||
    fail "no model-layers line: $(cat "$T/co")"
# the same with the list of MoE layers
expect_exit 0 moe import --moe-layers 1-26 --model-layers 27 --no-PG -o "$T/ds2.moet" \
    "$T/ds.tokens"
moe view "$T/ds2.moet" | grep -qx "@CO${tab}model-layers: layers 0..25 are model layers 1-26 of 27" ||
    fail "--moe-layers: no model-layers line"
# wrong labels: one line, exit 1
run moe import --moe-layers 1-25 -o "$T/bad.moet" "$T/ds.tokens"
expect_eq "$rc" 1 "a list of 25 for 26 layers"
expect_err_line "the list of MoE layers names 25 layers, the input has 26"
expect_no_output "$T/bad.moet"
run moe import --first-moe-layer 2 --model-layers 27 -o "$T/bad.moet" "$T/ds.tokens"
expect_eq "$rc" 1 "layers 2..27 of 27"
expect_err_line "model layer 27 out of range (27 model layers)"
run moe import --first-moe-layer 1 --moe-layers 1-26 -o "$T/bad.moet" "$T/ds.tokens"
expect_eq "$rc" 1 "both options"
expect_err_line "give the first MoE layer or the list of MoE layers, not both"
end

begin "fit carries the model layers into @PL; the text form round-trips"
expect_exit 0 mp fit --no-PG --ranks 8 --method balanced --replicas 16 --cv 0 \
    -o "$T/ds.moep" "$T/ds.moet"
head -n 1 "$T/ds.moep" >"$T/pl"
printf '@PL\tVN:1.1\tlayers:26\texperts:64\tranks:8\tgpus_per_node:8\tcapacity:10\tmodel_layers:27\tmoe_layers:1-26\n' \
    >"$T/want"
same_file "$T/pl" "$T/want" "@PL of the fit"
expect_exit 0 mp export -o "$T/rt.moep" "$T/ds.moep"
same_file "$T/rt.moep" "$T/ds.moep" "text export of a 1.1 placement"
expect_exit 0 mp check "$T/ds.moep"
# without a mapping the file stays 1.0, byte for byte what it was
moe gen -L 3 -E 8 -k 2 -n 500 -s 5 -S 2 --no-PG -o "$T/g.moet"
expect_exit 0 mp fit --no-PG --ranks 4 --method contiguous -o "$T/g.moep" "$T/g.moet"
head -n 1 "$T/g.moep" | grep -q "^@PL${tab}VN:1.0${tab}" || fail "a plain placement is not 1.0"
grep -q 'model_layers' "$T/g.moep" && fail "a plain placement names model layers"
end

# rows FILE: the rows of a physical_to_logical_map or logical_count export, one per line.
rows() { sed -e '1d' -e '$d' "$1"; }

begin "export --format sglang: a row per model layer, the dense row SGLang's trivial one"
expect_exit 0 mp export --format sglang -o "$T/ds.json" "$T/ds.moep"
expect_eq "$(rows "$T/ds.json" | wc -l | tr -d ' ')" 27 "rows"
# model layer 0: init_trivial's slot p -> p mod 64 over the 80 slots
awk 'BEGIN { s = "["; for (p = 0; p < 80; p++) s = s (p ? "," : "") p % 64; print s "],"
             }' >"$T/row0"
rows "$T/ds.json" | sed -n 1p >"$T/got0"
same_file "$T/got0" "$T/row0" "the dense row"
# model layers 1..26 are the placement's layers 0..25 (the layout of the export without them)
sed -e 's/\tmodel_layers:27\tmoe_layers:1-26//' -e 's/VN:1\.1/VN:1.0/' "$T/ds.moep" \
    >"$T/plain.moep"
expect_exit 0 mp export --format sglang -o "$T/plain.json" "$T/plain.moep"
expect_eq "$(rows "$T/plain.json" | wc -l | tr -d ' ')" 26 "rows without the mapping"
rows "$T/ds.json" | sed 1d | sed '$s/$/,/' >"$T/moe_rows"
rows "$T/plain.json" | sed '$s/$/,/' >"$T/plain_rows"
same_file "$T/moe_rows" "$T/plain_rows" "the MoE rows"
# the options give the mapping to a placement without one, and agree with one that has it
expect_exit 0 mp export --format sglang --first-moe-layer 1 --model-layers 27 \
    -o "$T/opt.json" "$T/plain.moep"
same_file "$T/opt.json" "$T/ds.json" "export with --first-moe-layer 1 --model-layers 27"
expect_exit 0 mp export --format sglang --model-layers 27 -o "$T/opt2.json" "$T/ds.moep"
same_file "$T/opt2.json" "$T/ds.json" "export with the --model-layers it records"
end

begin "export refuses, with one line, a layer mapping it cannot complete"
run mp export --format sglang --model-layers 27 -o "$T/bad.json" "$T/plain.moep"
expect_eq "$rc" 1 "26 layers of 27, which dense unknown"
expect_tool_err_line moe-place "26 MoE layers of 27 model layers: which are dense is unknown"
expect_no_output "$T/bad.json"
# the model layers known, their count not (a Megatron trace records ids only)
sed 's/\tmodel_layers:27//' "$T/ds.moep" >"$T/ids.moep"
run mp export --format sglang -o "$T/bad.json" "$T/ids.moep"
expect_eq "$rc" 1 "ids without the count"
expect_tool_err_line moe-place "the model's layer count is unknown; SGLang's map has a row for every model layer (give --model-layers)"
expect_no_output "$T/bad.json"
run mp export --format sglang --first-moe-layer 2 -o "$T/bad.json" "$T/ds.moep"
expect_eq "$rc" 1 "options against the file"
expect_tool_err_line moe-place "are not the model layers the input records (1-26)"
end

begin "bad @PL model fields: exit 1, one line"
bad_pl() {
    sed "1s/\$/$2/" "$T/g.moep" | sed '1s/VN:1.0/VN:1.1/' >"$T/b.moep"
    run mp check "$T/b.moep"
    expect_eq "$rc" 1 "check of $2"
    expect_tool_err_line moe-place "$1"
}
bad_pl "@PL model_layers/moe_layers: 3 MoE layers of 4 model layers: which are dense is unknown" \
    '\tmodel_layers:4'
bad_pl "@PL model_layers/moe_layers: the list of MoE layers names 2 layers, the input has 3" \
    '\tmoe_layers:1-2'
bad_pl "@PL model_layers/moe_layers: invalid list of MoE layers '2,1,3'" '\tmoe_layers:2,1,3'
bad_pl "@PL model_layers/moe_layers: model layer 4 out of range (4 model layers)" \
    '\tmodel_layers:4\tmoe_layers:2-4'
bad_pl "@PL model_layers/moe_layers: 3 MoE layers in a model of 2 layers" '\tmodel_layers:2'
bad_pl "invalid @PL field 'model_layers:x'" '\tmodel_layers:x'
bad_pl "@PL field 'moe_layers' given twice" '\tmoe_layers:0-2\tmoe_layers:0-2'
end

begin "stats --format sglang: logical_count by model layer, dense rows zero"
expect_exit 0 moe stats --format sglang -o "$T/lc.json" "$T/ds.moet"
expect_eq "$(rows "$T/lc.json" | wc -l | tr -d ' ')" 27 "rows"
rows "$T/lc.json" | sed -n 1p | tr -d '[],\n' | grep -q '^0*$' || fail "row 0 is not zero"
moe stats --loads "$T/ds.moet" | awk '$1 == "load" { $1 = ""; $2 = ""; print }' |
    sed 's/^ *//' >"$T/loads"
rows "$T/lc.json" | sed 1d | tr -d '[]' | sed 's/,$//' | tr ',' ' ' >"$T/lc"
same_file "$T/lc" "$T/loads" "rows 1..26 against stats --loads"
run moe stats --format sglang --model-layers 28 "$T/ds.moet"
expect_eq "$rc" 1 "--model-layers against the trace's"
expect_err_line "28 model layers given, the input records 27"
run moe stats --model-layers 27 "$T/ds.moet"
expect_eq "$rc" 2 "model-layer options without --format=sglang"
end

begin "slice names the model layers of the layers it keeps"
expect_exit 0 moe slice --layers 3-5 --no-PG -o "$T/s.moet" "$T/ds.moet"
moe view "$T/s.moet" | grep -qx "@CO${tab}model-layers: layers 0..2 are model layers 4-6 of 27" ||
    fail "no model-layers line for the slice"
expect_exit 0 moe stats --format sglang -o "$T/s.json" "$T/s.moet"
expect_eq "$(rows "$T/s.json" | wc -l | tr -d ' ')" 27 "rows of the slice's logical_count"
end

begin "SGLang's own 4-row map evaluates on the 3-layer trace of SGLang's own dump"
# the map of make_sglang_pt.py's per_token sample (tests/data/import): 4 model layers, 6
# slots on 2 ranks; the dump's trace holds model layers 1..3
printf '{"physical_to_logical_map": [[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 3, 2], [3, 2, 1, 0, 1, 1], [0, 1, 2, 3, 0, 0]]}\n' \
    >"$T/map4.json"
expect_exit 0 moe import --no-PG -o "$T/sg.moet" "$DATA_DIR/import/sglang_per_token.pt"
expect_exit 0 mp import --format sglang --ranks 2 --no-PG -o "$T/map4.moep" "$T/map4.json"
head -n 1 "$T/map4.moep" | grep -q "${tab}layers:4${tab}.*${tab}model_layers:4\$" ||
    fail "the import does not record 4 model layers: $(head -n 1 "$T/map4.moep")"
expect_exit 0 mp eval --json "$T/map4.moep" "$T/sg.moet"
cp "$T/out" "$T/e4.json"
# the same as a hand-cut placement of rows 1..3
{ printf '@PL\tVN:1.1\tlayers:3\texperts:4\tranks:2\tgpus_per_node:2\tcapacity:3\n'
  grep -v '^[@#]' "$T/map4.moep" | awk -F'\t' '$1 > 0 { $1 = $1 - 1; print }' OFS='\t'
} >"$T/rows13.moep"
expect_exit 0 mp eval --json "$T/rows13.moep" "$T/sg.moet"
sed 's/"placement": "[^"]*", //' "$T/out" >"$T/e3"
sed 's/"placement": "[^"]*", //' "$T/e4.json" >"$T/e4"
same_file "$T/e4" "$T/e3" "eval of the 4-row map and of its rows 1..3"
grep -q '"layers": 3' "$T/e4" || fail "eval did not account 3 layers"
# a trace of a model layer the map does not hold is refused with one line
moe gen -L 3 -E 4 -k 2 -n 100 -s 2 -S 3 --no-PG | moe view --no-header | cut -f6- |
    tr '\t' ' ' >"$T/far.tokens"
expect_exit 0 moe import --first-moe-layer 2 --model-layers 5 --experts 4 --no-PG \
    -o "$T/far.moet" "$T/far.tokens"
run mp eval "$T/map4.moep" "$T/far.moet"
expect_eq "$rc" 1 "eval of a trace beyond the map"
expect_tool_err_line moe-place "trace layer 2 is model layer 4, which the placement (4 layers) does not place"
end

finish
