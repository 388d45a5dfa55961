#!/bin/sh
# tests/cli/import_real.sh -- moe-trace import on the real router logs of ../shared/traces.
#
# Environment (set by make check): MOE_BIN (folder of moe-trace), MOE_SHARED (the shared folder
# beside the checkout), top_srcdir; MOE_VALGRIND optionally wraps each tool run. Skips (77)
# when the traces are not there. Expected counts were computed independently with Python from
# the same files.
set -eu

: "${MOE_BIN:?MOE_BIN must name the folder holding moe-trace}"
: "${MOE_SHARED:?MOE_SHARED must name the shared folder}"
TR=$MOE_SHARED/traces
if [ ! -d "$TR" ]; then
    echo "import_real: $TR not found: skipped"
    exit 77
fi
DS=$TR/deepseek-v2-lite-chat
MX=$TR/mixtral-8x7b-instruct-fp8

tmp=$(mktemp -d "${TMPDIR:-/tmp}/import_real.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
LC_ALL=C
export LC_ALL

fail() {
    echo "import_real: FAIL: $*" >&2
    exit 1
}

moe() {
    ${MOE_VALGRIND:-} "$MOE_BIN/moe-trace" "$@"
}

# expect_stat FILE KEY VALUE: the "KEY VALUE" line of moe-trace stats.
expect_stat() {
    got=$(grep "^$2 " "$1" | head -n 1 | cut -d' ' -f2)
    [ "$got" = "$3" ] || fail "$1: $2 is '$got', expected '$3'"
}

# The id columns of a view (6..), space-separated as in tokens.txt, weights stripped.
ids_only() {
    cut -f6- | tr '\t' ' ' | sed 's/:[^, ]*//g'
}

# Non-comment lines of a gzipped text file.
rows() {
    gzip -dc "$1" | grep -v '^#'
}

# ---------------------------------------------------------------- DeepSeek canonical tokens
moe import --no-PG --meta "$DS/tokens.meta.txt.gz" -o "$tmp/ds.moet" "$DS/tokens.txt.gz" \
    2>"$tmp/ds.err" || fail "DeepSeek tokens import: $(cat "$tmp/ds.err")"
moe stats "$tmp/ds.moet" >"$tmp/ds.stats" || fail "stats of the DeepSeek trace"
expect_stat "$tmp/ds.stats" tokens 94165
expect_stat "$tmp/ds.stats" sequences 999
expect_stat "$tmp/ds.stats" layers 26
expect_stat "$tmp/ds.stats" experts 64
expect_stat "$tmp/ds.stats" topk 6
expect_stat "$tmp/ds.stats" weights no
expect_stat "$tmp/ds.stats" missing_cells 0
moe view --no-header "$tmp/ds.moet" >"$tmp/ds.view" || fail "view of the DeepSeek trace"
rows "$DS/tokens.txt.gz" >"$tmp/ds.txt"
rows "$DS/tokens.meta.txt.gz" >"$tmp/ds.meta"
for n in 1 2 100 47000 94164 94165; do
    a=$(sed -n "${n}p" "$tmp/ds.view" | ids_only)
    b=$(sed -n "${n}p" "$tmp/ds.txt")
    [ "$a" = "$b" ] || fail "DeepSeek row $n: ids '$a', expected '$b'"
    a=$(sed -n "${n}p" "$tmp/ds.view" | cut -f2,3 | tr '\t' ' ')
    b=$(sed -n "${n}p" "$tmp/ds.meta" | cut -d' ' -f1,3)
    [ "$a" = "$b" ] || fail "DeepSeek row $n: seq pos '$a', expected '$b'"
done
a=$(cut -f1 "$tmp/ds.view" | sed -n '1p;$p' | tr '\n' ' ')
[ "$a" = "0 94164 " ] || fail "DeepSeek token ids run '$a', expected 0 .. 94164"

# ---------------------------------------------------------------- DeepSeek raw CSVs, 1..40
csvs=
i=1
while [ $i -le 40 ]; do
    csvs="$csvs $DS/raw-csv/prompt_${i}_data.csv"
    i=$((i + 1))
done
# shellcheck disable=SC2086 # the paths hold no blanks, word splitting is wanted
moe import --no-PG --format csv -o "$tmp/csv.moet" $csvs 2>"$tmp/csv.err" ||
    fail "CSV import: $(cat "$tmp/csv.err")"
moe stats "$tmp/csv.moet" >"$tmp/csv.stats"
expect_stat "$tmp/csv.stats" tokens 2665
expect_stat "$tmp/csv.stats" sequences 40
expect_stat "$tmp/csv.stats" layers 26
expect_stat "$tmp/csv.stats" topk 6
expect_stat "$tmp/csv.stats" missing_cells 0
moe view --no-header "$tmp/csv.moet" >"$tmp/csv.view"
# Same ids in the same order as the canonical rows of prompts 1..40, and seq = prompt number.
ids_only <"$tmp/csv.view" >"$tmp/csv.ids"
head -n 2665 "$tmp/ds.txt" >"$tmp/ds40.ids"
cmp -s "$tmp/csv.ids" "$tmp/ds40.ids" || fail "raw CSV ids differ from tokens.txt rows 1..2665"
cut -f2,3 "$tmp/csv.view" | tr '\t' ' ' >"$tmp/csv.seqpos"
head -n 2665 "$tmp/ds.meta" | cut -d' ' -f1,3 >"$tmp/ds40.seqpos"
cmp -s "$tmp/csv.seqpos" "$tmp/ds40.seqpos" || fail "raw CSV seq/pos differ from tokens.meta"
# Auto-detection on a CSV (the shell glob order differs; the per-prompt content must not).
moe import --no-PG -o "$tmp/p12.moet" "$DS/raw-csv/prompt_12_data.csv" 2>"$tmp/p12.err" ||
    fail "CSV auto-detected import: $(cat "$tmp/p12.err")"
moe view --no-header "$tmp/p12.moet" | ids_only >"$tmp/p12.ids"
awk -F'\t' '$2 == 12' "$tmp/csv.view" | ids_only >"$tmp/p12.want"
cmp -s "$tmp/p12.ids" "$tmp/p12.want" || fail "prompt_12 alone differs from prompt 12 in the set"

# ---------------------------------------------------------------- Mixtral canonical + weights
moe import --no-PG --meta "$MX/tokens.meta.txt.gz" --weights "$MX/tokens.weights.txt.gz" \
    -o "$tmp/mx.moet" "$MX/tokens.txt.gz" 2>"$tmp/mx.err" ||
    fail "Mixtral tokens import: $(cat "$tmp/mx.err")"
moe stats "$tmp/mx.moet" >"$tmp/mx.stats"
expect_stat "$tmp/mx.stats" tokens 134
expect_stat "$tmp/mx.stats" sequences 1
expect_stat "$tmp/mx.stats" layers 32
expect_stat "$tmp/mx.stats" experts 8
expect_stat "$tmp/mx.stats" topk 2
expect_stat "$tmp/mx.stats" weights yes
moe view --no-header "$tmp/mx.moet" >"$tmp/mx.view"
a=$(sed -n 1p "$tmp/mx.view" | cut -f1-6)
[ "$a" = "$(printf '0\t0\t0\t0\t0\t5:0.778313,2:0.221687')" ] ||
    fail "Mixtral row 1: '$a', expected layer 0 = 5:0.778313,2:0.221687 at seq 0 pos 0"
a=$(sed -n 134p "$tmp/mx.view" | cut -f2,3,37)
b=$(rows "$MX/tokens.txt.gz" | sed -n 134p | cut -d' ' -f32)
c=$(rows "$MX/tokens.weights.txt.gz" | sed -n 134p | cut -d' ' -f32)
d=$(rows "$MX/tokens.meta.txt.gz" | sed -n 134p | cut -d' ' -f3)
e=$(printf '%s\n' "$a" | cut -f3 | sed 's/:[^,]*//g')
[ "$e" = "$b" ] || fail "Mixtral row 134 layer 31: ids '$e', expected '$b'"
printf '%s\n' "$a" | cut -f3 | awk -F'[:,]' -v w="$c" '
    { split(w, x, ","); if ((($2 - x[1]) ^ 2) > 1e-12 || (($4 - x[2]) ^ 2) > 1e-12) exit 1 }' ||
    fail "Mixtral row 134 layer 31: weights '$a', expected '$c'"
[ "$(printf '%s\n' "$a" | cut -f1,2 | tr '\t' ' ')" = "0 $d" ] ||
    fail "Mixtral row 134: seq/pos '$a', expected seq 0 pos $d"

# ------------------------------------------ Mixtral raw JSONL (speculative-moe vLLM patch)
# humaneval_2_routing.jsonl (grouped by layer): 10779 records, problems 0 and 1, 338 tokens,
# 333 with all 32 layers, 37 missing cells.
J=$MX/raw-jsonl
moe import --no-PG -o "$tmp/he.moet" "$J/humaneval_2_routing.jsonl" 2>"$tmp/he.err" ||
    fail "humaneval_2 import: $(cat "$tmp/he.err")"
moe stats "$tmp/he.moet" >"$tmp/he.stats"
expect_stat "$tmp/he.stats" tokens 338
expect_stat "$tmp/he.stats" sequences 2
expect_stat "$tmp/he.stats" layers 32
expect_stat "$tmp/he.stats" experts 8
expect_stat "$tmp/he.stats" topk 2
expect_stat "$tmp/he.stats" weights yes
expect_stat "$tmp/he.stats" incomplete_tokens 5
expect_stat "$tmp/he.stats" missing_cells 37
grep -q '^moe-trace: import: 338 tokens (5 incomplete, 37 missing cells, 0 dropped)$' \
    "$tmp/he.err" || fail "humaneval_2 report: '$(cat "$tmp/he.err")'"
moe import --no-PG --drop-incomplete -o "$tmp/he2.moet" "$J/humaneval_2_routing.jsonl" \
    2>/dev/null || fail "humaneval_2 import --drop-incomplete"
moe stats "$tmp/he2.moet" >"$tmp/he2.stats"
expect_stat "$tmp/he2.stats" tokens 333
expect_stat "$tmp/he2.stats" missing_cells 0

# routing_raw.jsonl (execution order): 6777 records, a prefill pass of 135 tokens (59 with all
# layers) then 83 decode passes: 218 tokens, 94 complete, 124 incomplete, 199 missing cells.
moe import --no-PG -o "$tmp/raw.moet" "$J/routing_raw.jsonl" 2>"$tmp/raw.err" ||
    fail "routing_raw import: $(cat "$tmp/raw.err")"
moe stats "$tmp/raw.moet" >"$tmp/raw.stats"
expect_stat "$tmp/raw.stats" tokens 218
expect_stat "$tmp/raw.stats" sequences 1
expect_stat "$tmp/raw.stats" layers 32
expect_stat "$tmp/raw.stats" incomplete_tokens 124
expect_stat "$tmp/raw.stats" missing_cells 199
moe import --no-PG --drop-incomplete -o "$tmp/raw2.moet" "$J/routing_raw.jsonl" 2>/dev/null ||
    fail "routing_raw import --drop-incomplete"
moe view --no-header "$tmp/raw2.moet" >"$tmp/raw2.view"
[ "$(wc -l <"$tmp/raw2.view" | tr -d ' ')" = 94 ] || fail "routing_raw: complete tokens != 94"
# The complete prefill tokens are the canonical prefill rows: same ids and positions.
awk -F'\t' '$3 < 135' "$tmp/raw2.view" >"$tmp/pre.view"
ids_only <"$tmp/pre.view" >"$tmp/pre.ids"
rows "$MX/tokens.txt.gz" | head -n 59 >"$tmp/pre.want"
cmp -s "$tmp/pre.ids" "$tmp/pre.want" || fail "routing_raw prefill ids differ from tokens.txt"
cut -f3 "$tmp/pre.view" >"$tmp/pre.pos"
rows "$MX/tokens.meta.txt.gz" | head -n 59 | cut -d' ' -f3 >"$tmp/pre.pwant"
cmp -s "$tmp/pre.pos" "$tmp/pre.pwant" || fail "routing_raw prefill positions differ from meta"

# ---------------------------------------------------------------- errors on real inputs
if moe import --no-PG --format jsonl -o "$tmp/bad.moet" "$DS/tokens.txt.gz" 2>"$tmp/bad.err"
then
    fail "tokens.txt.gz imported as JSONL"
fi
grep -q 'line 9: malformed JSON at column 1' "$tmp/bad.err" ||
    fail "wrong message for tokens read as JSONL: '$(cat "$tmp/bad.err")'"
[ ! -e "$tmp/bad.moet" ] || fail "a failed import left its output behind"
if moe import --no-PG --meta "$MX/tokens.meta.txt.gz" -o "$tmp/bad.moet" "$DS/tokens.txt.gz" \
    2>"$tmp/bad.err"; then
    fail "a meta file of 134 rows accepted for 94165 tokens"
fi
grep -q "meta '$MX/tokens.meta.txt.gz': 134 rows, the input has more" "$tmp/bad.err" ||
    fail "wrong message for a short meta file: '$(cat "$tmp/bad.err")'"
exit 0
