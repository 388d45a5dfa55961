#!/bin/sh
# tests/cli/costmodel_predict.sh -- moe-costmodel simulate's per-rank transfers are moe-run's: on
# 8 ranks (2 nodes x 4) replaying DeepSeek-V2-Lite routing with a moe-place placement, the
# bytes simulate --ranks says each rank sends on each link class equal those moe-run measured,
# in vanilla, coherent and hierarchical mode (forwards inside the receiving node included).
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
run_data 384
printf 'nodes 2\ngpus-per-node 4\n' >"$T/c.topo"
"$MOE_BIN/moe-costmodel" simulate --topology "$T/c.topo" --hidden 40 --ffn 16 --dtype fp32 \
    --no-layers --ranks "$T/ds.mft" "$T/p8.moep" >"$T/sim.txt" || fail "simulate failed"

for mode in vanilla coherent hierarchical; do
    begin "$mode: bytes each rank sends, by link class, equal simulate's"
    expect_exit 0 mpi 8 --mode "$mode" --trace "$T/ds.mft" --placement "$T/p8.moep" \
        --hidden 40 --ffn 16 --iters 1 --warmup 0 --json "$T/r.json"
    grep '"rank_vector_bytes"' "$T/r.json" >"$T/ranks.json"
    paste -d ' ' "$(json_list "$T/ranks.json" intra >"$T/gi"; echo "$T/gi")" \
        "$(json_list "$T/ranks.json" inter >"$T/ge"; echo "$T/ge")" >"$T/got"
    awk -F '\t' -v m="$mode" '$1 == "RANK" && $2 == m { print $4, $5 }' "$T/sim.txt" >"$T/want"
    expect_eq "$(wc -l <"$T/want" | tr -d ' ')" 8 "ranks simulated"
    same_file "$T/want" "$T/got" "intra/inter-node bytes per rank"
    expect_eq "$(awk '$1 + $2 > 0' "$T/got" | wc -l | tr -d ' ')" 8 "ranks sending bytes"
    end
done

begin "hierarchical sends fewer inter-node bytes than vanilla, more intra-node ones"
awk -F '\t' '$1 == "RANK" { i[$2] += $4; e[$2] += $5 } END {
    exit !(e["hierarchical"] < e["vanilla"] && i["hierarchical"] > i["vanilla"]) }' \
    "$T/sim.txt" || fail "hierarchical does not trade inter- for intra-node bytes"
end
finish
