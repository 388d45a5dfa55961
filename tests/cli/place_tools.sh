#!/bin/sh
# tests/cli/place_tools.sh -- moe-place on small seeded traces: every method fits and checks,
# eval of a tiny hand-made trace and placement against golden output (numbers worked out by hand
# in the comments below), -@ and repeated runs byte-identical, ExFlow CSV and EPLB JSON round
# trips, pipes equal files, the traffic matrices' shapes and sums, and the JSON output.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-place" ]; then
    echo "MOE_BIN must hold moe-place (got '$MOE_BIN')" >&2
    exit 99
fi

# mp ARGS...: run moe-place (through $MOE_VALGRIND when set).
mp() { moe_tool moe-place "$@"; }

# records FILE: the @PL line and the records of a placement (no @CO/@FT/@PG, no comments).
records() {
    grep -v -e '^@CO' -e '^@FT' -e '^@PG' -e '^#' "$1"
}

# scheme_of FILE SCHEME COLUMN: a column of eval's SCHEME line (3 = per_token_layer).
scheme_of() {
    awk -v s="$2" -v c="$3" '$1 == "SCHEME" && $2 == s { print $c }' "$1"
}

G1=$T/g1.moet   # 4 layers x 16 experts, top-2, 4 recorded ranks, vector 16 x 2 bytes
G2=$T/g2.moet   # 4 layers x 8 experts, top-2, weights (exflow solves it to optimality fast)
moe gen -L 4 -E 16 -k 2 -n 3000 -s 30 -r 4 -S 3 --hidden 16 --elem-bytes 2 --no-PG -o "$G1" &&
    moe gen -L 4 -E 8 -k 2 -n 2000 -s 20 -r 4 -w -S 4 --no-PG -o "$G2" ||
    { echo "cannot make the test traces"; exit 1; }

# ------------------------------------------------------------------ --help

begin "each subcommand's --help lists each option once"
for sub in "" fit eval export import check; do
    # shellcheck disable=SC2086
    run mp $sub --help
    expect_eq "$rc" 0 "moe-place $sub --help"
    dup=$(grep -o -- '^ *\(-[a-zA-Z@], \)\{0,1\}--[a-zA-Z][-a-zA-Z]*' "$T/out" |
        sed 's/.*--/--/' | sort | uniq -d | tr '\n' ' ')
    [ -z "$dup" ] || fail "moe-place $sub --help lists these options twice: $dup"
done
end

begin "fit reads standard input when no input is named, as moe-trace does"
mp fit --no-PG --ranks 4 --method contiguous -o "$T/named.moep" "$G1" &&
    mp fit --no-PG --ranks 4 --method contiguous -o "$T/piped.moep" <"$G1" ||
    fail "fit from a named file and from a pipe"
cmp -s "$T/named.moep" "$T/piped.moep" || fail "fit from standard input differs from the file"
end

begin "fit --progress shows the fit's own meter, and changes nothing written"
mp fit --no-PG --ranks 4 --progress -o "$T/prog.moep" "$G1" 2>"$T/prog.err" &&
    mp fit --no-PG --ranks 4 -o "$T/noprog.moep" "$G1" ||
    fail "fit with and without --progress"
tr '\r' '\n' <"$T/prog.err" | grep -q '^fit \[=*  *\]\|^fit \[=*\] 100' ||
    fail "fit --progress printed no 'fit [...]' meter: $(tr '\r' '\n' <"$T/prog.err" | tail -n 3)"
cmp -s "$T/prog.moep" "$T/noprog.moep" || fail "--progress changed the placement"
end

# ------------------------------------------------------------------ every method

begin "every method fits on one and two nodes, and check accepts the result"
# the ASan build (memory errors, the same code paths) on one layout of each kind
topos='"--ranks 4" "--ranks 8 --gpus-per-node 4" "--ranks 4 --gpus-per-node 2"'
ldd "${top_builddir:-.}/lib/.libs/libmoecore.so" 2>/dev/null | grep -q libasan &&
    topos='"--ranks 4" "--ranks 4 --gpus-per-node 2"'
for method in contiguous round-robin random balanced exflow affinity; do
    eval "set -- $topos"
    for topo in "$@"; do
        tl=
        [ "$method" = exflow ] && tl="--time-limit 2"
        out=$T/fit.moep
        # shellcheck disable=SC2086
        expect_exit 0 mp fit $topo --method "$method" $tl -o "$out" "$G1"
        expect_no_stderr
        expect_no_stdout
        run mp check "$out"
        expect_eq "$rc" 0 "check of $method ($topo)"
        grep -q "^$T/fit.moep: ok: 4 layers x 16 experts" "$T/out" ||
            fail "check of $method ($topo): $(cat "$T/out")"
        grep -q "^@FT	method:$method	" "$out" || fail "$method: no @FT line naming the method"
        grep -q "^@PG	.*CL:.*moe-place fit" "$out" || fail "$method: no @PG line"
        [ "$(grep -c '^[0-9]' "$out")" = 64 ] || fail "$method: not 64 records"
        run mp eval --no-layers "$out" "$G1"
        expect_eq "$rc" 0 "eval of $method ($topo)"
    done
done
end

begin "top-1 fits, replicas, vanilla objective"
for args in "--topk 1" "--topk 1 --method exflow --ranks 4 --gpus-per-node 2" \
    "--replicas 4" "--replicas 4 --method balanced" "--scheme vanilla" "--max-imbalance 0" \
    "--topk 1 --max-imbalance 0 --ranks 2"; do
    # shellcheck disable=SC2086
    run mp fit --ranks 4 $args -o "$T/f.moep" "$G2"
    expect_eq "$rc" 0 "exit status of fit $args"
    expect_no_stderr
    run mp check "$T/f.moep"
    expect_eq "$rc" 0 "check after fit $args"
done
# four replicas on 4 ranks: capacity ceil((8 + 4) / 4) = 3
mp fit --ranks 4 --replicas 4 --method balanced -o "$T/f.moep" "$G2"
grep -q "^@PL	VN:1.0	layers:4	experts:8	ranks:4	gpus_per_node:4	capacity:3$" "$T/f.moep" ||
    fail "replicas: unexpected @PL line: $(head -n 1 "$T/f.moep")"
end

# ft_value FILE KEY: a value of the @FT line.
ft_value() {
    grep '^@FT' "$1" | tr '\t' '\n' | sed -n "s/^$2://p"
}

# --ep-size 2 on 4 ranks: groups {0, 1} and {2, 3}, each holding all 16 experts of G1 (8 slots
# a rank), expert on rank q of the fit also on q + 2. A top-1 token needs one rank a layer and
# any group's copy costs the same, so with sources by sequence (rank seq mod 4, position seq
# mod 2 in its group) the transfers per token equal those of the one-group placement on 2 ranks
# (ranks mod 2), in both schemes. On 2 nodes of 2 each group is a node and tokens take the copy
# on their own node: no inter-node transfer at all.
begin "--ep-size: every expert in each group; top-1 transfers those of one group"
for method in contiguous balanced affinity "affinity --replicas 2"; do
    # shellcheck disable=SC2086
    run mp fit --ranks 4 --ep-size 2 --method $method --no-PG -o "$T/ep.moep" "$G1"
    expect_eq "$rc" 0 "fit --ep-size 2 --method $method"
    grep -q "^@PL	VN:1.0	layers:4	experts:16	ranks:4	gpus_per_node:4	capacity:$(
        [ "$method" = "affinity --replicas 2" ] && echo 9 || echo 8)\$" "$T/ep.moep" ||
        fail "$method: unexpected @PL line: $(head -n 1 "$T/ep.moep")"
    [ "$(ft_value "$T/ep.moep" ep_size)" = 2 ] || fail "$method: no ep_size:2 in the @FT line"
    bad=$(awk -F '\t' '/^[0-9]/ { n = split($3, r, ","); c = 0
            for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) c += r[j] == (r[i] + 2) % 4
            if (c != n) print }' "$T/ep.moep" | head -n 1)
    [ -z "$bad" ] || fail "$method: an expert not in both groups: $bad"
    awk -F '\t' 'BEGIN { OFS = "\t" }
        /^@PL/ { sub(/ranks:4/, "ranks:2"); sub(/gpus_per_node:4/, "gpus_per_node:2") }
        /^[0-9]/ { n = split($3, r, ","); s = ""; delete seen
            for (i = 1; i <= n; i++) if (!((r[i] % 2) in seen)) {
                seen[r[i] % 2]; s = s (s == "" ? "" : ",") r[i] % 2 }
            $3 = s }
        !/^@[FP][TG]/' "$T/ep.moep" >"$T/ep1.moep"
    mp eval --no-layers --topk 1 --source sequence -o "$T/full" "$T/ep.moep" "$G1" &&
        mp eval --no-layers --topk 1 --source sequence -o "$T/one" "$T/ep1.moep" "$G1" ||
        fail "$method: eval of the groups or of one group failed"
    for s in vanilla coherent; do
        expect_eq "$(scheme_of "$T/full" $s 3)" "$(scheme_of "$T/one" $s 3)" \
            "$method: $s top-1 transfers of the groups and of one group"
    done
    # shellcheck disable=SC2086
    mp fit --ranks 4 --gpus-per-node 2 --ep-size 2 --method $method -o "$T/ep.moep" "$G1" &&
        mp eval --no-layers -o "$T/full" "$T/ep.moep" "$G1" || fail "$method: 2x2 fit or eval"
    for s in vanilla coherent; do
        expect_eq "$(scheme_of "$T/full" $s 7)" 0.0000 "$method: $s inter-node transfers on 2x2"
    done
done
end

# moe-place(1): "For top-1 paths with one expert per rank on one node ... solved exactly ... the
# result is optimal and equals the lower bound." 8 experts on 8 ranks of one node, from a file
# and from standard input: the recorded objective equals the bound, and so do the top-1 hops per
# layer pair that eval counts (hops_per_token over the 3 pairs of 4 layers).
begin "top-1, one expert per rank, one node: optimal, objective = bound = eval's hops"
for src in file stdin; do
    if [ $src = file ]; then
        run mp fit --ranks 8 --topk 1 --no-PG -o "$T/f.moep" "$G2"
    else
        run mp fit --ranks 8 --topk 1 --no-PG -o "$T/f.moep" - <"$G2"
    fi
    expect_eq "$rc" 0 "exit status ($src)"
    grep -q '^@FT	.*sets:top1.*status:optimal.*objective:.*bound:' "$T/f.moep" ||
        fail "top-1 @FT line ($src): $(grep '^@FT' "$T/f.moep")"
    obj=$(ft_value "$T/f.moep" objective)
    bnd=$(ft_value "$T/f.moep" bound)
    expect_eq "$obj" "$bnd" "objective vs bound of an exact fit ($src)"
    hops=$(mp eval --topk 1 --no-layers "$T/f.moep" "$G2" | awk '$2 == "coherent" { print $11 }')
    awk -v h="$hops" -v b="$bnd" 'BEGIN { exit !(h / 3 >= b - 0.0001 && h / 3 <= b + 0.0001) }' ||
        fail "top-1 hops per layer pair $hops / 3 vs bound $bnd ($src)"
done
end

# ------------------------------------------------------------------ eval golden

# A hand-made trace (2 layers, 4 experts, top-2 with weights, recorded on 4 ranks, vector 8 x 2
# bytes) and placement (4 ranks, 2 nodes of 2, capacity 2; layer 1 expert 3 on ranks 2 and 0).
#   token 0 from 0: L0 {0,1} ranks {0,1}: vanilla 1+1 intra; coherent 1+1 intra, home kept 0.
#                   L1 {2,3}: 2 on 3, 3's copy on 0 (home): 1+1 inter either way.
#   token 1 from 1: L0 {2,3} ranks {2,3}: vanilla 2+2 inter; coherent 2 inter, equal weights:
#                   home 2 (lowest), combine 3->2 intra. L1 missing.
#   token 2 from 2: L0 {1,2}: 1+1 inter, coherent keeps 2. L1 {0 .2, 1 .8} on {1, 0}: vanilla
#                   2+2 inter; coherent 2 inter, home 0 (heavier), combine 1->0 intra.
#   token 3 from 3: L0 {3,0}: 1+1 inter, home kept. L1 {3,2}: 3's copy on 2 (home's node),
#                   2 on 3: 1+1 intra either way.
# vanilla 18 transfers over 7 cells = 2.5714 (intra 4, inter 14), 72 bytes per token;
# coherent 9 + 7 = 16 = 2.2857 (intra 6, inter 10), stay_rank 5/7, 64 bytes per token;
# layer 1 load (2,1,1,2): max/mean 1.3333.
cd "$T" || exit 99
printf '@MT\tVN:1.0\tlayers:2\texperts:4\ttopk:2\thidden:8\telem_bytes:2\tranks:4\tweights:1\n%s\n%s\n%s\n%s\n' \
    "0	0	0	0	0	0:0.6,1:0.4	2:0.7,3:0.3" \
    "1	0	1	0	1	2:0.5,3:0.5	." \
    "2	1	0	0	2	1:0.9,2:0.1	0:0.2,1:0.8" \
    "3	1	1	0	3	3:0.6,0:0.4	3:0.55,2:0.45" >tiny.txt
cat >tiny.moep <<'EOF'
@PL	VN:1.0	layers:2	experts:4	ranks:4	gpus_per_node:2	capacity:2
@CO	tiny placement
0	0	0
0	1	1
0	2	2
0	3	3
1	0	1
1	1	0
1	2	3
1	3	2,0
EOF

begin "eval golden: tiny trace and placement"
run mp eval tiny.moep tiny.txt
golden place_eval_tiny
expect_no_stderr
expect_eq "$(scheme_of "$T/out" vanilla 3)" 2.5714 "vanilla per_token_layer"
expect_eq "$(scheme_of "$T/out" coherent 3)" 2.2857 "coherent per_token_layer"
expect_eq "$(scheme_of "$T/out" coherent 9)" 0.7143 "coherent stay_rank"
expect_eq "$(scheme_of "$T/out" vanilla 13)" 72.0 "vanilla bytes per token"
expect_eq "$(scheme_of "$T/out" coherent 13)" 64.0 "coherent bytes per token"
end

begin "eval golden: top-1, no layers, vector size given"
run mp eval --topk 1 --no-layers --hidden 4 --elem-bytes 4 tiny.moep tiny.txt
golden place_eval_tiny_top1
expect_no_stderr
end

begin "eval golden: matrices of both schemes"
for s in coherent vanilla; do
    run mp eval --scheme "$s" --matrix "m_$s.csv" --matrix-bytes "mb_$s.txt" tiny.moep tiny.txt
    expect_eq "$rc" 0 "exit status ($s)"
    { echo "# --matrix"; cat "m_$s.csv"; echo "# --matrix-bytes"; cat "mb_$s.txt"; } >"$T/out"
    golden "place_matrix_$s"
done
# hand-counted coherent bytes (16 per transfer): row 0 sends 0->1 once and 0->3 twice
# --matrix is one of the 2 layers x 2 phases exchanges to 16 bytes, halves up: 32 -> 16, 16 -> 0
expect_eq "$(head -n 1 mb_coherent.txt)" "0 16 0 32" "coherent bytes from rank 0"
# vanilla: 0->1 and 0->3 for token 0, combines 0->2 (token 2) and 0->3 (token 3)
expect_eq "$(head -n 1 mb_vanilla.txt)" "0 16 16 32" "vanilla bytes from rank 0"
end
cd / || exit 99

# ------------------------------------------------------------------ determinism

begin "-@ 0 and -@ 1 (and -@ 3) give byte-identical fits and evals"
for method in random balanced affinity "affinity --topk 1" "affinity --replicas 3" \
    "exflow --gpus-per-node 2"; do
    # shellcheck disable=SC2086
    mp fit --no-PG --ranks 4 --method $method -@ 0 -o "$T/t0.moep" "$G2" &&
        mp fit --no-PG --ranks 4 --method $method -@ 1 -o "$T/t1.moep" "$G2" &&
        mp fit --no-PG --ranks 4 --method $method -@ 3 -o "$T/t3.moep" "$G2" ||
        fail "fit --method $method"
    same_file "$T/t0.moep" "$T/t1.moep" "fit --method $method -@ 0 vs -@ 1"
    same_file "$T/t0.moep" "$T/t3.moep" "fit --method $method -@ 0 vs -@ 3"
done
mp fit --no-PG --ranks 4 -o "$T/a.moep" "$G1"
for args in "" "--topk 1" "--json" "--source token" "--scheme vanilla"; do
    # shellcheck disable=SC2086
    mp eval $args --matrix-bytes "$T/mb0" -@ 0 "$T/a.moep" "$G1" >"$T/e0" &&
        mp eval $args --matrix-bytes "$T/mb1" -@ 1 "$T/a.moep" "$G1" >"$T/e1" &&
        mp eval $args --matrix-bytes "$T/mb3" -@ 3 "$T/a.moep" "$G1" >"$T/e3" ||
        fail "eval $args"
    same_file "$T/e0" "$T/e1" "eval $args -@ 0 vs -@ 1"
    same_file "$T/e0" "$T/e3" "eval $args -@ 0 vs -@ 3"
    same_file "$T/mb0" "$T/mb1" "eval $args --matrix-bytes -@ 0 vs -@ 1"
done
end

begin "the same seed twice gives the same bytes; another seed another layout"
for method in random affinity; do
    mp fit --no-PG --ranks 8 --gpus-per-node 4 --method "$method" --seed 7 -o "$T/s1.moep" "$G1"
    mp fit --no-PG --ranks 8 --gpus-per-node 4 --method "$method" --seed 7 -o "$T/s2.moep" "$G1"
    mp fit --no-PG --ranks 8 --gpus-per-node 4 --method "$method" --seed 8 -o "$T/s3.moep" "$G1"
    same_file "$T/s1.moep" "$T/s2.moep" "$method with seed 7 twice"
    grep '^[0-9]' "$T/s1.moep" >"$T/r1"
    grep '^[0-9]' "$T/s3.moep" >"$T/r3"
    differ_file "$T/r1" "$T/r3" "$method with seeds 7 and 8"
done
end

# ------------------------------------------------------------------ export and import

begin "ExFlow CSV and EPLB JSON round trips"
for fitargs in "--ranks 4" "--ranks 8 --gpus-per-node 4" "--ranks 4 --gpus-per-node 2 --method random"; do
    # shellcheck disable=SC2086
    mp fit --no-PG $fitargs -o "$T/p.moep" "$G1" || fail "fit $fitargs"
    ranks=$(sed -n '1s/.*ranks:\([0-9]*\).*/\1/p' "$T/p.moep")
    gpn=$(sed -n '1s/.*gpus_per_node:\([0-9]*\).*/\1/p' "$T/p.moep")
    run mp export --format exflow -o "$T/p.csv" "$T/p.moep"
    expect_eq "$rc" 0 "export exflow ($fitargs)"
    expect_eq "$(head -n 1 "$T/p.csv" | tr -d '\r')" "Expert,Node" "CSV header"
    expect_eq "$(wc -l <"$T/p.csv" | tr -d ' ')" 65 "CSV rows"
    run mp import --no-PG --format exflow --experts 16 --ranks "$ranks" --gpus-per-node "$gpn" \
        -o "$T/q.moep" "$T/p.csv"
    expect_eq "$rc" 0 "import exflow ($fitargs)"
    grep -q "^@CO	source: $T/p.csv (format exflow)$" "$T/q.moep" || fail "no @CO source line"
    records "$T/p.moep" >"$T/pr"
    records "$T/q.moep" >"$T/qr"
    same_file "$T/pr" "$T/qr" "ExFlow CSV round trip ($fitargs)"
    # and the CSV back, byte for byte
    mp export --format exflow "$T/q.moep" >"$T/q.csv"
    same_file "$T/p.csv" "$T/q.csv" "ExFlow CSV re-exported"

    run mp export --format eplb -o "$T/p.json" "$T/p.moep"
    expect_eq "$rc" 0 "export eplb ($fitargs)"
    run mp import --no-PG --format eplb -o "$T/q.moep" "$T/p.json"
    expect_eq "$rc" 0 "import eplb ($fitargs)"
    records "$T/q.moep" >"$T/qr"
    same_file "$T/pr" "$T/qr" "EPLB JSON round trip ($fitargs)"
done
# replicas survive EPLB, not ExFlow
mp fit --no-PG --ranks 4 --replicas 4 --method balanced -o "$T/r.moep" "$G1"
mp export --format eplb "$T/r.moep" | mp import --no-PG --format eplb - >"$T/rq.moep"
records "$T/r.moep" >"$T/pr"
records "$T/rq.moep" >"$T/qr"
same_file "$T/pr" "$T/qr" "EPLB round trip with replicas"
grep -q ',' "$T/pr" || fail "the balanced fit has no replicas"
run mp export --format exflow -o "$T/r.csv" "$T/r.moep"
expect_eq "$rc" 1 "exflow export of replicas"
expect_no_output "$T/r.csv"
# text export is the placement itself
mp export --format text "$T/r.moep" >"$T/rt.moep"
same_file "$T/r.moep" "$T/rt.moep" "text export"
end

begin "an imported placement evaluates like the original"
mp fit --no-PG --ranks 4 -o "$T/p.moep" "$G1"
mp export --format exflow "$T/p.moep" | mp import --format exflow --experts 16 - >"$T/q.moep"
mp eval "$T/p.moep" "$G1" | grep -v '^# placement' >"$T/ep"
mp eval "$T/q.moep" "$G1" | grep -v '^# placement' >"$T/eq"
same_file "$T/ep" "$T/eq" "eval of the CSV round trip"
end

# ------------------------------------------------------------------ pipes

# STYLE.md: "pipe path equals file path" (fit copies standard input to a temporary file).
begin "pipes: fit from stdin to stdout into eval, export from stdin"
mp fit --no-PG --ranks 4 -o "$T/file.moep" "$G1"
for method in contiguous balanced random exflow affinity; do
    mp fit --no-PG --ranks 4 --gpus-per-node 2 --method $method -o "$T/mf.moep" "$G2"
    mp fit --no-PG --ranks 4 --gpus-per-node 2 --method $method - <"$G2" >"$T/mp.moep"
    same_file "$T/mf.moep" "$T/mp.moep" "fit --method $method of stdin vs file"
done
mp fit --no-PG --ranks 4 -o - "$G1" >"$T/dash.moep"
same_file "$T/file.moep" "$T/dash.moep" "fit -o - vs -o FILE"
mp eval "$T/file.moep" "$G1" | grep -v '^# placement' >"$T/e_file"
mp fit --no-PG --ranks 4 "$G1" | mp eval - "$G1" | grep -v '^# placement' >"$T/e_pipe"
same_file "$T/e_file" "$T/e_pipe" "fit | eval - TRACE"
mp eval "$T/file.moep" - <"$G1" | grep -v '^# ' >"$T/e_tin"
grep -v '^# ' "$T/e_file" >"$T/e_f2"
same_file "$T/e_f2" "$T/e_tin" "eval PLACEMENT - (trace on stdin)"
moe view --no-PG "$G1" | mp eval "$T/file.moep" - | grep -v '^# ' >"$T/e_text"
same_file "$T/e_f2" "$T/e_text" "eval of the text view on stdin"
for f in exflow eplb text; do
    mp export --format "$f" "$T/file.moep" >"$T/x_file"
    mp export --format "$f" - <"$T/file.moep" >"$T/x_pipe"
    same_file "$T/x_file" "$T/x_pipe" "export --format $f from stdin"
done
gzip -c "$T/file.moep" >"$T/file.moep.gz"
mp eval "$T/file.moep.gz" "$G1" | grep -v '^# placement' >"$T/e_gz"
same_file "$T/e_file" "$T/e_gz" "eval of a gzipped placement"
mp fit --no-PG --ranks 4 -O z -o "$T/z.moep" "$G1"
gzip -dc "$T/z.moep" >"$T/z.txt"
same_file "$T/file.moep" "$T/z.txt" "fit -O z"
end

# ------------------------------------------------------------------ matrices

begin "--matrix and --matrix-bytes: G rows of G values; bytes sum to bytes per token x tokens"
for topo in "--ranks 4" "--ranks 8 --gpus-per-node 4"; do
    # shellcheck disable=SC2086
    mp fit --no-PG $topo -o "$T/m.moep" "$G1"
    G=$(sed -n '1s/.*	ranks:\([0-9]*\).*/\1/p' "$T/m.moep")
    for s in coherent vanilla; do
        run mp eval --scheme "$s" --matrix "$T/m.csv" --matrix-bytes "$T/mb.txt" "$T/m.moep" "$G1"
        expect_eq "$rc" 0 "eval --matrix ($s, $G ranks)"
        expect_eq "$(wc -l <"$T/m.csv" | tr -d ' ')" "$G" "rows of --matrix"
        expect_eq "$(wc -l <"$T/mb.txt" | tr -d ' ')" "$G" "rows of --matrix-bytes"
        awk -v g="$G" 'NF != g { bad = 1 } END { exit bad }' "$T/m.csv" ||
            fail "--matrix rows without $G values"
        awk -v g="$G" 'NF != g { bad = 1 } END { exit bad }' "$T/mb.txt" ||
            fail "--matrix-bytes rows without $G values"
        # one mean exchange (4 layers x 2 phases) in multiples of 16 bytes, 0 on the diagonal
        # (tests/cli/nccl_matrix.sh checks it against nccl-tests' reader)
        paste "$T/m.csv" "$T/mb.txt" | awk -v g="$G" '{ for (i = 1; i <= g; i++) {
                d = $i - $(i + g) / 8
                if (d > 8 || d < -8 || $i % 16 || (i == NR && $i != 0)) bad = 1 }
            } END { exit bad }' ||
            fail "--matrix entries are not the mean exchange's bytes"
        sum=$(awk '{ for (i = 1; i <= NF; i++) s += $i } END { printf "%.0f", s }' "$T/mb.txt")
        bpt=$(scheme_of "$T/out" "$s" 13)
        tok=$(sed -n 's/^# trace: [^:]*: \([0-9]*\) tokens.*/\1/p' "$T/out")
        expect_eq "$tok" 3000 "tokens"
        # bytes_per_token is printed to 0.1: the sum must round to it
        awk -v s="$sum" -v b="$bpt" -v n="$tok" 'BEGIN { exit !(s / n >= b - 0.05 && s / n <= b + 0.05) }' ||
            fail "$s: matrix bytes $sum over $tok tokens, bytes_per_token $bpt"
        # and it is 32 bytes per transfer: per_token_layer x cells x 32
        ptl=$(scheme_of "$T/out" "$s" 3)
        awk -v s="$sum" -v p="$ptl" 'BEGIN { x = s / 32 / (3000 * 4); exit !(x >= p - 0.00005 && x <= p + 0.00005) }' ||
            fail "$s: matrix bytes $sum vs per_token_layer $ptl"
    done
done
end

# ------------------------------------------------------------------ JSON

begin "--json parses and agrees with the table"
if have python3; then
    run mp eval --json "$T/file.moep" "$G1"
    expect_eq "$rc" 0 "exit status"
    python3 -m json.tool "$T/out" >/dev/null 2>"$T/jerr" ||
        fail "eval --json does not parse: $(head -n 2 "$T/jerr")"
    mp eval "$T/file.moep" "$G1" >"$T/table"
    python3 - "$T/out" "$T/table" <<'EOF' || fail "JSON and table disagree"
import json, sys
j = json.load(open(sys.argv[1]))
rows = {l.split("\t")[1]: l.split("\t") for l in open(sys.argv[2]) if l.startswith("SCHEME")}
assert j["tokens"] == 3000 and j["ranks"] == 4 and j["layers"] == 4, j
for s in ("vanilla", "coherent"):
    assert abs(j["schemes"][s]["per_token_layer"] - float(rows[s][2])) < 1e-4, s
    assert len(j["schemes"][s]["layers"]) == 4, s
EOF
    run mp eval --json --topk 1 --no-layers "$T/file.moep" "$G1"
    expect_eq "$rc" 0 "exit status"
    python3 -m json.tool "$T/out" >/dev/null 2>&1 ||
        fail "eval --json --topk 1 --no-layers does not parse"
    run mp eval --json "$T/file.moep" - <"$G1"
    python3 -m json.tool "$T/out" >/dev/null 2>&1 || fail "eval --json of stdin does not parse"
else
    skip_case "no python3"
fi
end

finish
