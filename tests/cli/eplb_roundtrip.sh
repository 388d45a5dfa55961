#!/bin/sh
# tests/cli/eplb_roundtrip.sh -- issue 38 item 3 and acceptance 2: DeepSeek's rebalance_experts
# (github.com/deepseek-ai/EPLB, eplb.py) puts two slots of one expert on one GPU; EPLB ->
# moeflow -> EPLB must give the same (layer, GPU) slot multisets, logcnt and no empty (-1) slot,
# and SGLang's map of the same placement every slot. The samples tests/data/place/eplb_*.json
# are rebalance_experts' own output, written by make_eplb.py there under Debian's python3-torch:
# 26 x 64 experts on 80 slots of 8 GPUs (DeepSeek-V2-Lite), the hierarchical policy (4 groups,
# 2 nodes, 8 GPUs) and the global one (3 groups, 2 nodes, 4 GPUs).
. "$(dirname "$0")/lib.sh"

mp() { moe_tool moe-place "$@"; }
D=$DATA_DIR/place

# gpu_sets FILE G: "layer gpu id id ..." (ids sorted) of the phy2log array of an EPLB JSON file
# (the samples' one line, or the export's one row per line), G GPUs.
gpu_sets() {
    tr -d ' \n' <"$1" | sed -e 's/.*"phy2log":\[\[//' -e 's/\]\].*//' | tr -s ']' '\n' |
        sed -e 's/^,\[//' -e 's/^\[//' | awk -F, -v G="$2" '
        NF { C = NF / G
             for (g = 0; g < G; g++) {
                 n = 0
                 for (k = 1; k <= C; k++) v[++n] = $(g * C + k) + 0
                 for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) {
                     x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
                 s = (NR - 1) " " g; for (i = 1; i <= n; i++) s = s " " v[i]; print s } }'
}

# logcnt FILE: the logcnt array's numbers, one line.
logcnt() {
    tr -d ' \n' <"$1" | sed -e 's/.*"logcnt":\[\[//' -e 's/\]\].*//' | tr -s '[],' '   '
}

for c in dsv2lite:8 hier:8 global:4; do
    name=${c%:*}
    G=${c#*:}
    begin "rebalance_experts ($name, $G GPUs) -> import -> export: the same slots per GPU"
    expect_exit 0 mp import --format eplb --ranks "$G" --no-PG -o "$T/$name.moep" \
        "$D/eplb_$name.json"
    expect_exit 0 mp export --format eplb -o "$T/$name.json" "$T/$name.moep"
    gpu_sets "$D/eplb_$name.json" "$G" >"$T/want"
    gpu_sets "$T/$name.json" "$G" >"$T/got"
    [ -s "$T/want" ] || fail "no slots read from the sample"
    same_file "$T/got" "$T/want" "(layer, GPU) slot multisets"
    grep -q ' -1' "$T/got" && fail "an empty slot in the export's phy2log"
    logcnt "$D/eplb_$name.json" >"$T/cw"
    logcnt "$T/$name.json" >"$T/cg"
    same_file "$T/cg" "$T/cw" "logcnt"
    # and again: the text form of the re-import is the first one's
    expect_exit 0 mp import --format eplb --no-PG -o "$T/$name.2.moep" "$T/$name.json"
    grep -v '^@CO' "$T/$name.moep" >"$T/p1"
    grep -v '^@CO' "$T/$name.2.moep" >"$T/p2"
    same_file "$T/p2" "$T/p1" "EPLB -> moeflow -> EPLB -> moeflow"
    # every slot is filled, so SGLang takes the same placement
    expect_exit 0 mp export --format sglang -o "$T/$name.sg.json" "$T/$name.moep"
    sed 's/physical_to_logical_map/phy2log/' "$T/$name.sg.json" >"$T/sg.json"
    gpu_sets "$T/sg.json" "$G" >"$T/sg"
    same_file "$T/sg" "$T/want" "SGLang's slots per GPU"
    end
done

begin "the samples hold what the round trip must keep"
# some expert has two slots on one GPU in some layer (the case that merged before issue 38)
gpu_sets "$D/eplb_dsv2lite.json" 8 | awk '{ for (i = 4; i <= NF; i++) if ($i == $(i - 1)) n++ }
    END { print n + 0 }' >"$T/n"
[ "$(cat "$T/n")" -gt 0 ] || fail "no expert with two slots on one GPU in eplb_dsv2lite.json"
grep -q '	[0-9,]*	[0-9]*,' "$T/dsv2lite.moep" || fail "the import keeps no slots"
expect_exit 0 mp check "$T/dsv2lite.moep"
grep -q ', capacity 10, 416 replicas$' "$T/out" || fail "check: $(cat "$T/out")"
end

finish
