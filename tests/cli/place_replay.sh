#!/bin/sh
# tests/cli/place_replay.sh -- moe-place replay (dynamic re-placement): the figures and the
# migration bytes of a tiny trace whose routing changes after a third, worked out by hand below;
# the threshold rule; --initial; unknown bytes; byte-identical output for -@0 and -@1 and
# repeated runs; standard input; JSON; bad input (one line, exit 1, no output left) and usage
# errors (exit 2).

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-place" ]; then
    echo "MOE_BIN must hold moe-place (got '$MOE_BIN')" >&2
    exit 99
fi

mp() { moe_tool moe-place "$@"; }

# rows FILE: the INTERVAL and SUMMARY lines of a report, without the '#' header.
rows() { grep -e '^INTERVAL' -e '^SUMMARY' "$1"; }

# The hand-made trace: 2 layers x 4 experts, top-1, 30 tokens of prompt 8 (source rank 8 mod 2 = 0
# of 2), the same expert in both layers. Tokens 0-9 (pattern A) route experts 0,1,2,3 to 4,3,2,1
# tokens; tokens 10-29 (pattern B) route 1,0,2,3 to 4,3,2,1 tokens.
# The balanced method packs experts by descending load, each onto the least loaded rank (ties:
# the lower rank): A gives e0->r0, e1->r1, e2->r1 (3 < 4), e3->r0 (4 < 5): r0 {0,3}, r1 {1,2};
# B gives e1->r0, e0->r1, e2->r1, e3->r0: r0 {1,3}, r1 {0,2}.
# With --window 10 --every 10: interval 0 (tokens 0-9) runs under A, fitted on them; the re-fit
# at token 10 sees tokens 0-9 again (A: 0 copies); the one at 20 sees tokens 10-19 (B): per
# layer, expert 1 on r0 and expert 0 on r1 are new, 2 copies, 4 over the 2 layers, each
# 3 x H x F x B = 3 x 16 x 32 x 2 = 3072 bytes (SwiGLU experts, the default: gate, up and down;
# --expert silu: 2 x, 2048 bytes).
# Figures: a token whose expert is off its source rank r0 costs vanilla 2 transfers per layer
# (dispatch and combine) and coherent 1 for the whole token (dispatch at layer 0; then it lives
# on that rank, and layer 1 uses the same expert there). Off r0 under A: experts 1, 2; under B:
# 0, 2. A tokens under A: 5 of 10 off (vanilla 20 / 20 cells = 1.0, coherent 5 / 20 = 0.25);
# B tokens under A: 6 off (1.2, 0.3); B tokens under B: 5 off (1.0, 0.25). Loads: A tokens
# under A: r0 4+1, r1 3+2 -> 1.0; B under A: r0 3+1, r1 4+2 -> 6/5 = 1.2; B under B: 5, 5 -> 1.0.
# Summary over the 60 cells: coherent 16/60 and 17/60, vanilla 64/60 and 68/60, load
# (1.0 + 1.2 + 1.0) / 3 and (1.0 + 1.2 + 1.2) / 3.
copy=$((3 * 16 * 32 * 2))
moved=$((4 * copy))
{
    for i in 1 2 3 4; do echo "0 0"; done
    for i in 1 2 3; do echo "1 1"; done
    echo "2 2"; echo "2 2"; echo "3 3"
    for _ in 1 2; do
        for i in 1 2 3 4; do echo "1 1"; done
        for i in 1 2 3; do echo "0 0"; done
        echo "2 2"; echo "2 2"; echo "3 3"
    done
} >"$T/tok.txt"
i=0
while [ $i -lt 30 ]; do echo "8 prefill $i"; i=$((i + 1)); done >"$T/meta.txt"
H=$T/hand.moet
moe import --no-PG -q --format tokens --experts 4 --meta "$T/meta.txt" -o "$H" "$T/tok.txt" ||
    { echo "cannot make the hand-made trace"; exit 1; }

REPLAY="replay --ranks 2 --method balanced --window 10 --every 10 --hidden 16 --ffn 32
    --elem-bytes 2"
cat >"$T/want" <<EOF
INTERVAL	0	0	10	initial	0.2500	0.2500	1.0000	1.0000	1.0000	1.0000	0	0
INTERVAL	1	10	10	yes	0.3000	0.3000	1.2000	1.2000	1.2000	1.2000	0	0
INTERVAL	2	20	10	yes	0.2500	0.3000	1.0000	1.2000	1.0000	1.2000	4	$moved
SUMMARY	30	3	2	0.2667	0.2833	1.0667	1.1333	1.0667	1.1333	4	$moved
EOF

begin "hand-made trace: figures and migration bytes (4 copies x 3 x H x F x B)"
# shellcheck disable=SC2086
expect_exit 0 mp $REPLAY "$H"
expect_no_stderr
rows "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "replay rows"
grep -qx "# copy: $copy bytes (3 x hidden 16 x ffn 32 x 2 bytes, swiglu)" "$T/out" ||
    fail "copy size line: $(grep '^# copy' "$T/out")"
end

begin "--expert silu: a copy is two matrices (4 copies x 2 x H x F x B)"
# shellcheck disable=SC2086
expect_exit 0 mp $REPLAY --expert silu "$H"
grep -qx "# copy: 2048 bytes (2 x hidden 16 x ffn 32 x 2 bytes, silu)" "$T/out" ||
    fail "copy size line: $(grep '^# copy' "$T/out")"
awk -F '\t' '$1 == "SUMMARY" && $12 != 8192 { exit 1 }' "$T/out" ||
    fail "moved bytes with --expert silu: $(grep '^SUMMARY' "$T/out")"
# shellcheck disable=SC2086
expect_exit 2 mp $REPLAY --expert gelu "$H"
expect_tool_usage moe-place replay "unknown expert 'gelu'"
end

begin "--threshold: re-fit only past the measured load since the last fit"
# At token 10 the load of A since its fit is 1.0 (no re-fit); at 20 it is, per layer,
# r0 5+4, r1 5+6: 11/10 = 1.1 > 1.05, so B is fitted then (the same 4 copies).
# shellcheck disable=SC2086
expect_exit 0 mp $REPLAY --threshold 1.05 "$H"
rows "$T/out" >"$T/got"
sed -e '2s/	yes	/	no	/' -e '4s/	2	0/	1	0/' "$T/want" >"$T/want.thr"
same_file "$T/got" "$T/want.thr" "threshold 1.05 rows"
# 1.1 is not past 1.15: never re-fitted, dynamic equals static, nothing moved
# shellcheck disable=SC2086
expect_exit 0 mp $REPLAY --threshold 1.15 "$H"
expect_eq "$(awk -F '\t' '$1 == "SUMMARY" { print $4, $5 == $6, $9 == $10, $11, $12 }' \
    "$T/out")" "0 1 1 0 0" "threshold 1.15: re-fits, dynamic = static, copies, bytes"
end

begin "--initial: starting from the placement fitted on the first window gives the same rows"
moe head -n 10 --no-PG -o "$T/first.moet" "$H"
expect_exit 0 mp fit --ranks 2 --method balanced -o "$T/a.moep" "$T/first.moet"
# shellcheck disable=SC2086
expect_exit 0 mp $REPLAY --initial "$T/a.moep" "$H"
rows "$T/out" >"$T/got"
same_file "$T/got" "$T/want" "replay --initial rows"
grep -q "^# static: $T/a.moep, never re-fitted" "$T/out" || fail "static line names --initial"
end

begin "without --ffn: copies counted, bytes unknown (NA)"
expect_exit 0 mp replay --ranks 2 --method balanced --window 10 --every 10 "$H"
expect_eq "$(awk -F '\t' '$1 == "SUMMARY" { print $11, $12 }' "$T/out")" "4 NA" "copies, bytes"
grep -q '^# copy: unknown' "$T/out" || fail "no 'copy: unknown' line"
end

# ------------------------------------------------------------------ determinism

G1=$T/g1.moet
moe gen -L 4 -E 16 -k 2 -n 3000 -s 30 -r 4 -S 3 --hidden 16 --elem-bytes 2 --no-PG -o "$G1" ||
    { echo "cannot make the seeded trace"; exit 1; }
ARGS="replay --ranks 4 --gpus-per-node 2 --window 600 --every 700 --starts 2 --ffn 64"

begin "affinity re-fits: -@0, -@1 and a second run byte-identical"
# shellcheck disable=SC2086
expect_exit 0 mp $ARGS -@ 0 -o "$T/r0.txt" "$G1"
# shellcheck disable=SC2086
expect_exit 0 mp $ARGS -@ 1 -o "$T/r1.txt" "$G1"
# shellcheck disable=SC2086
expect_exit 0 mp $ARGS -@ 0 -o "$T/r2.txt" "$G1"
same_file "$T/r0.txt" "$T/r1.txt" "-@0 vs -@1"
same_file "$T/r0.txt" "$T/r2.txt" "two runs"
expect_eq "$(awk -F '\t' '$1 == "SUMMARY" { print $2, $3, $4 }' "$T/r0.txt")" "3000 5 4" \
    "tokens, intervals, re-fits"
# shellcheck disable=SC2086
expect_exit 0 mp $ARGS - <"$G1"
rows "$T/out" >"$T/stdin.rows"
rows "$T/r0.txt" >"$T/file.rows"
same_file "$T/stdin.rows" "$T/file.rows" "standard input vs file"
end

begin "--json: one object with the intervals and the summary"
# shellcheck disable=SC2086
expect_exit 0 mp $ARGS --json "$G1"
head -c 1 "$T/out" | grep -q '{' || fail "JSON does not start with {"
expect_eq "$(grep -c '"interval": ' "$T/out")" 5 "JSON intervals"
grep -q '"summary": {"tokens": 3000, "intervals": 5, "refits": 4' "$T/out" ||
    fail "JSON summary: $(grep summary "$T/out")"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/out" ||
        fail "python3 cannot parse the JSON"
fi
end

# ------------------------------------------------------------------ bad input, usage

OUT=$T/rep.txt
# bad STATUS SUBSTRING ARGS...: moe-place replay ARGS fails with STATUS, one line (plus the
# hint for usage errors), nothing on stdout, no output left behind.
bad() {
    _st=$1 _msg=$2
    shift 2
    rm -f "$OUT"
    expect_exit "$_st" mp replay "$@"
    if [ "$_st" = 2 ]; then
        expect_tool_usage moe-place replay "$_msg"
    else
        expect_tool_err_line moe-place "$_msg"
    fi
    expect_no_stdout
    expect_no_output "$OUT"
}

begin "bad input: exit 1, one line, no output left"
printf 'not a trace\n' >"$T/junk"
bad 1 "junk" --ranks 2 -o "$OUT" "$T/junk"
bad 1 "missing.moet" --ranks 2 -o "$OUT" "$T/missing.moet"
head -c 300 "$G1" >"$T/trunc.moet"
bad 1 "" --ranks 4 -o "$OUT" "$T/trunc.moet"
bad 1 "layers" --initial "$T/a.moep" -o "$OUT" "$G1"
bad 1 "--replicas needs" --ranks 2 --method contiguous --replicas 2 -o "$OUT" "$H"
end

begin "usage errors: exit 2 with the hint"
bad 2 "expected one trace" --ranks 2
bad 2 "" --ranks 2 --every 0 "$H"
bad 2 "" --ranks 2 --window 0 "$H"
bad 2 "" --ranks 2 --threshold 0.5 "$H"
bad 2 "--topk" --ranks 2 --topk 2 "$H"
bad 2 "does not apply" --ranks 2 --matrix "$T/m" "$H"
bad 2 "--ranks or --topology" "$H"
end

finish
