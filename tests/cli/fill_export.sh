#!/bin/sh
# tests/cli/fill_export.sh -- issue 45 acceptance 2: every fit with --memory > 1 spends every
# slot, so that it exports to SGLang's physical_to_logical_map and to EPLB's phy2log without
# an empty (-1) slot: each method that accepts the memory, at 1.5x and 2x, with and without
# --for sglang (its static replica rule), on 2 nodes x 4.
. "${top_srcdir:-.}/tests/cli/lib.sh"

mp() { moe_tool moe-place "$@"; }

moe gen --no-PG -L 3 -E 16 -k 2 -n 1500 -s 30 -r 8 -S 5 -o "$T/t.moet" ||
    { echo "cannot make the test trace"; exit 99; }

# slots_ok FILE KEY: every row of the JSON map KEY has 8 x SLOTS entries, none -1
slots_ok() {
    tr -d ' \n' <"$1" | sed -n "s/.*\"$2\":\[\(\[[^]]*\]\(,\[[^]]*\]\)*\)\].*/\1/p" |
        sed 's/\],\[/\n/g; s/[][]//g' >"$T/rows"
    [ -s "$T/rows" ] || { fail "$1: no $2 rows"; return; }
    grep -q -- '-1' "$T/rows" && fail "$1: an empty slot in $2"
    awk -F , -v n="$3" 'NF != n { bad = 1 } END { exit bad }' "$T/rows" ||
        fail "$1: a $2 row without $3 slots"
}

for mem in 1.5 2; do
    slots=$(awk -v m=$mem 'BEGIN { printf "%d", m * 16 / 8 * 8 }')
    for m in contiguous round-robin random balanced affinity; do
        for for in "" "--for sglang"; do
            begin "fit --method $m --memory $mem $for: exports with every slot filled"
            run mp fit --no-PG --ranks 8 --gpus-per-node 4 --method $m --memory $mem \
                --cv 0 --starts 2 $for -o "$T/p.moep" "$T/t.moet"
            if [ "$rc" != 0 ]; then
                # a method that cannot spend the memory says so and writes nothing
                grep -q 'hold no layout' "$T/err" || fail "fit failed: $(cat "$T/err")"
                [ -e "$T/p.moep" ] && fail "a failed fit wrote a placement"
                end
                continue
            fi
            expect_exit 0 mp export --format sglang -o "$T/s.json" "$T/p.moep"
            slots_ok "$T/s.json" physical_to_logical_map "$slots"
            expect_exit 0 mp export --format eplb -o "$T/e.json" "$T/p.moep"
            slots_ok "$T/e.json" phy2log "$slots"
            rm -f "$T/p.moep"
            end
        done
    done
done

# violations FILE GPN SIZE [P]: copies of an expert group (SIZE consecutive experts) on another
# node than the group's first copy in the same expert-parallel group of P ranks [all]
violations() {
    awk -F '\t' -v gpn="$2" -v sz="$3" -v P="${4:-0}" '!/^[@#]/ { n = split($3, r, ",")
        for (i = 1; i <= n; i++) { q = P ? r[i] % P : r[i]
            k = $1 " " int($2 / sz) " " (P ? int(r[i] / P) : 0); d = int(q / gpn)
            if (k in at && at[k] != d) bad++; at[k] = d } } END { print bad + 0 }' "$1"
}

begin "--expert-groups keeps groups whole on nodes, the memory's copies too"
moe gen --no-PG -L 3 -E 32 -k 4 -n 2000 -s 30 -r 16 -S 4 -o "$T/g.moet" || fail "gen"
expect_exit 0 mp fit --no-PG --ranks 16 --gpus-per-node 4 --cv 0 --starts 2 --memory 1.5 \
    -o "$T/free.moep" "$T/g.moet"
[ "$(violations "$T/free.moep" 4 4)" -gt 0 ] || fail "the unconstrained fit keeps groups anyway"
# --memory 2 makes two expert-parallel groups of 8 ranks (ep_size 8): groups whole in each
for mem in ":0" "--memory 1.5:0" "--memory 2:8"; do
    P=${mem#*:} mem=${mem%:*}
    expect_exit 0 mp fit --no-PG --ranks 16 --gpus-per-node 4 --cv 0 --starts 2 \
        --expert-groups 8 --for sglang $mem -o "$T/g.moep" "$T/g.moet"
    expect_eq "$(violations "$T/g.moep" 4 4 "$P")" 0 "group copies off their node ($mem)"
    expect_exit 0 mp check "$T/g.moep"
    expect_exit 0 mp export --format sglang -o "$T/s.json" "$T/g.moep"
done
slots_ok "$T/s.json" physical_to_logical_map 64
run mp fit --no-PG --ranks 16 --gpus-per-node 4 --expert-groups 6 "$T/g.moet"
expect_tool_err_line moe-place \
    "--expert-groups 6 must divide the 32 experts and be a multiple of the 4 nodes"
expect_eq "$rc" 1 "exit status"
end

begin "the fill is seeded like the fit: the same placement twice"
mp fit --no-PG --ranks 8 --gpus-per-node 4 --memory 1.5 --cv 0 --starts 2 -o "$T/a.moep" \
    "$T/t.moet" && mp fit --no-PG --ranks 8 --gpus-per-node 4 --memory 1.5 --cv 0 --starts 2 \
    -o "$T/b.moep" "$T/t.moet" || fail "fit"
same_file "$T/a.moep" "$T/b.moep" "two fits"
end

finish
