#!/bin/sh
# tests/cli/run_bytes.sh -- moe-run on 8 ranks replaying DeepSeek-V2-Lite routing with a
# moe-place placement: each rank's measured hidden-state bytes (dispatch + combine) equal the
# shared accounting's transfers x H x element bytes exactly, as moe-place eval counts them.
. "${top_srcdir:-.}/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/run_lib.sh"
run_data 384

for scheme in vanilla coherent; do
    for dt in fp32:4 bf16:2; do
        begin "$scheme $dt: bytes per rank equal moe-place eval's matrix"
        eb=${dt#*:}
        expect_exit 0 mpi_noleak 8 --mode "$scheme" --trace "$T/ds.mft" --placement "$T/p8.moep" \
            --hidden 40 --ffn 16 --dtype "${dt%:*}" --iters 2 --warmup 0 --json "$T/r.json"
        "$MOE_BIN/moe-place" eval --scheme "$scheme" --hidden 40 --elem-bytes "$eb" \
            --matrix-bytes "$T/m.txt" "$T/p8.moep" "$T/ds.mft" >"$T/eval.txt" ||
            fail "moe-place eval failed"
        awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }' "$T/m.txt" >"$T/want"
        json_list "$T/r.json" sent >"$T/got"
        expect_eq "$(wc -l <"$T/got" | tr -d ' ')" 8 "ranks reported"
        same_file "$T/want" "$T/got" "bytes per rank"
        # by link class: ranks 0-3 and 4-7 are the two nodes
        awk '{ a = 0; e = 0; for (i = 1; i <= NF; i++) if (i != NR) {
                   if (int((i - 1) / 4) == int((NR - 1) / 4)) a += $i; else e += $i }
               print a, e }' "$T/m.txt" >"$T/want"
        grep '"rank_vector_bytes"' "$T/r.json" >"$T/ranks.json"
        paste -d ' ' "$(json_list "$T/ranks.json" intra >"$T/gi"; echo "$T/gi")" \
            "$(json_list "$T/ranks.json" inter >"$T/ge"; echo "$T/ge")" >"$T/got"
        same_file "$T/want" "$T/got" "intra/inter-node bytes per rank"
        # and the total is not trivially zero
        expect_eq "$(awk '$1 > 0' "$T/got" | wc -l | tr -d ' ')" 8 "ranks sending bytes"
        grep -q 'equal on every rank' "$T/out" || fail "the report does not say equal"
        if [ "$scheme" = coherent ]; then
            # ExFlow's all-gather at the end of an iteration (Table I's G N G term): every
            # rank's token ids to the 7 others, whichever rank a token ended on: 384 tokens x
            # 7 x 4 bytes an iteration whatever the dtype (issue 43, item 2: ids, not rows;
            # issue 42, item 10: removing it went unnoticed)
            expect_eq "$(json_list "$T/r.json" allgather_total)" $((384 * 7 * 4)) \
                "all-gather bytes an iteration"
        fi
        end
    done
done

begin "pipelined moves the vanilla bytes"
expect_exit 0 mpi_noleak 8 --mode pipelined --chunks 3 --trace "$T/ds.mft" \
    --placement "$T/p8.moep" --hidden 40 --ffn 16 --iters 1 --warmup 0 --json "$T/r.json"
"$MOE_BIN/moe-place" eval --scheme vanilla --hidden 40 --elem-bytes 4 \
    --matrix-bytes "$T/m.txt" "$T/p8.moep" "$T/ds.mft" >/dev/null
awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }' "$T/m.txt" >"$T/want"
json_list "$T/r.json" sent >"$T/got"
same_file "$T/want" "$T/got" "bytes per rank"
end

finish
