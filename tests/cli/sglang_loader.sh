#!/bin/sh
# tests/cli/sglang_loader.sh -- issue 38, acceptance 1: a DeepSeek-V2-Lite-shaped trace (27
# model layers, layer 0 dense) imported with its layer mapping, fitted with replicas, exported
# as SGLang's --init-expert-location JSON and loaded by tests/data/place/sglang_loader.py, a
# restatement of SGLang's own loader (expert_location.py: compute_initial_expert_location_
# metadata, init_by_mapping, _compute_logical_to_all_physical_map, logical_to_all_physical;
# fused_moe_triton/layer.py: FusedMoE.weight_loader by its layer_id, expert_map_cpu per EP
# rank): every MoE model layer of every rank must hold what moeflow placed there, each slot
# loaded once. The export of the same placement without its model layers (what moeflow wrote
# before) must fail there. Skipped (77) without python3.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
mp() { moe_tool moe-place "$@"; }
LOADER=$DATA_DIR/place/sglang_loader.py

moe gen -L 26 -E 64 -k 6 -n 1200 -s 12 -S 5 --no-PG | moe view --no-header |
    cut -f6- | tr '\t' ' ' >"$T/ds.tokens" &&
    moe import --first-moe-layer 1 --model-layers 27 --no-PG -o "$T/ds.moet" "$T/ds.tokens" ||
    { echo "cannot make the test trace"; exit 99; }

for fit in "8 --method balanced --replicas 16" "8 --method balanced --replicas 24" \
    "4 --method affinity --starts 1 --time-limit 5" "16 --method random"; do
    # shellcheck disable=SC2086
    set -- $fit
    G=$1
    shift
    begin "trace -> fit --ranks $G $* -> SGLang JSON -> SGLang's loader"
    expect_exit 0 mp fit --no-PG --cv 0 --ranks "$G" "$@" -o "$T/f.moep" "$T/ds.moet"
    expect_exit 0 mp export --format sglang -o "$T/f.json" "$T/f.moep"
    run python3 "$LOADER" "$T/f.json" "$T/f.moep" --ep-size "$G" --layers 27 \
        --first-moe-layer 1 --experts 64
    expect_eq "$rc" 0 "SGLang's loader: $(head -n 3 "$T/out")"
    grep -q '^ok: 26 MoE layers' "$T/out" || fail "loader: $(head -n 1 "$T/out")"
    # the inline JSON form of --init-expert-location loads the same
    run python3 "$LOADER" "$(cat "$T/f.json")" "$T/f.moep" --ep-size "$G" --layers 27 \
        --first-moe-layer 1 --experts 64
    expect_eq "$rc" 0 "SGLang's loader, inline JSON"
    end
done

begin "the export without the model layers (moeflow before issue 38) fails SGLang's loader"
sed -e 's/\tmodel_layers:27\tmoe_layers:1-26//' -e 's/VN:1\.1/VN:1.0/' "$T/f.moep" \
    >"$T/plain.moep"
expect_exit 0 mp export --format sglang -o "$T/plain.json" "$T/plain.moep"
run python3 "$LOADER" "$T/plain.json" "$T/f.moep" --ep-size 16 --layers 27 \
    --first-moe-layer 1 --experts 64
expect_eq "$rc" 1 "the 26-row map"
grep -q 'layer 26 rank 0: IndexError' "$T/out" || fail "no IndexError on layer 26"
grep -q '^layer 1 rank 0: SGLang loads' "$T/out" || fail "layer 1 not shifted"
end

finish
