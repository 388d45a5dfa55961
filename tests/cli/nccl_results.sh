#!/bin/sh
# tests/cli/nccl_results.sh -- moe-costmodel fit --nccl-tests on the other shapes nccl-tests
# results come in: a table captured through mpirun --tag-output ("[1,0]<stdout>:" before each
# line, other ranks' NCCL lines among them) and the JSON file of -J (format version 3), both
# written for this test from the same numbers as tests/data/nccl/alltoall_2x8.txt, so each must
# fit exactly as the plain table does; then broken JSON files, each one line and exit 1.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-costmodel" ]; then
    echo "MOE_BIN must hold moe-costmodel (got '$MOE_BIN')" >&2
    exit 99
fi

cm() { moe_tool moe-costmodel "$@"; }
NCCL=$top_srcdir/tests/data/nccl

# fit_of FILE: the fitted topology (without the comment naming the file).
fit_of() {
    cm fit --nccl-tests "$1" --class inter >"$T/fit" 2>"$T/err" || return 1
    tail -n +2 "$T/fit"
}

fit_of "$NCCL/alltoall_2x8.txt" >"$T/plain" || { echo "cannot fit the plain table"; exit 1; }

begin "mpirun --tag-output: the same fit as the plain table"
fit_of "$NCCL/alltoall_2x8_tagged.txt" >"$T/tagged" || fail "fit: $(cat "$T/err")"
same_file "$T/plain" "$T/tagged" "tagged vs plain"
# the 16 '# Rank' lines counted behind their tags: a uniform topology of 16 GPUs
grep -q '^gpus-per-node 16$' "$T/tagged" || fail "ranks not counted: $(head -5 "$T/tagged")"
# Open MPI 5 puts a blank after the colon; a gzipped capture and standard input read alike
sed 's/^\(\[[0-9]*,[0-9]*\]<std[a-z]*>:\)/\1 /' "$NCCL/alltoall_2x8_tagged.txt" >"$T/t5.txt"
fit_of "$T/t5.txt" >"$T/t5" || fail "fit (blank after the tag): $(cat "$T/err")"
same_file "$T/plain" "$T/t5" "tagged with blanks vs plain"
gzip -c "$T/t5.txt" >"$T/t5.txt.gz"
fit_of - <"$T/t5.txt.gz" >"$T/t5z" || fail "fit (gzipped stdin): $(cat "$T/err")"
same_file "$T/plain" "$T/t5z" "gzipped tagged vs plain"
end

begin "nccl-tests -J JSON: the same fit as the plain table"
fit_of "$NCCL/alltoall_2x8.json" >"$T/json" || fail "fit: $(cat "$T/err")"
same_file "$T/plain" "$T/json" "JSON vs plain"
# value by value: the largest busbw is the class bandwidth (mean of 43.55 and 44.49 GB/s),
# the smallest size's efficiency is (0.03 + 0.03) / 2 over it, to 4 digits
expect_eq "$(sed -n 's/^link inter bandwidth \([0-9.]*\) .*/\1/p' "$T/json")" 44019999999.99999 \
    "bandwidth"
expect_eq "$(sed -n 's/^efficiency inter \([^ ]*\) .*/\1/p' "$T/json")" 1024:0.0006815 \
    "first point"
# -C reports cpu_time instead of time; an in-place-only run has "out_of_place": null
sed 's/"time":/"cpu_time":/g' "$NCCL/alltoall_2x8.json" >"$T/cpu.json"
fit_of "$T/cpu.json" >"$T/cpu" || fail "fit (cpu_time): $(cat "$T/err")"
same_file "$T/plain" "$T/cpu" "cpu_time vs plain"
sed 's/"out_of_place":{[^}]*}/"out_of_place":null/g' "$NCCL/alltoall_2x8.json" >"$T/ip.json"
fit_of "$T/ip.json" >"$T/ip" || fail "fit (in-place only): $(cat "$T/err")"
grep -q '^efficiency inter ' "$T/ip" || fail "no curve from in-place results"
end

# bad MESSAGE FILE: exit 1, one line naming the file and saying MESSAGE, no output file.
bad() {
    rm -f "$T/o.topo"
    expect_exit 1 cm fit -o "$T/o.topo" --nccl-tests "$2" --class inter
    tool_err
    expect_eq "$(wc -l <"$errf" | tr -d ' ')" 1 "stderr lines for $2"
    grep -q "^moe-costmodel: '$2'.*$1" "$errf" || fail "stderr: $(cat "$errf")"
    [ -e "$T/o.topo" ] && fail "output left behind for $2"
}

begin "broken JSON files: exit 1 with one line"
J=$NCCL/alltoall_2x8.json
head -c 900 "$J" >"$T/cut.json"
bad "malformed JSON at byte [0-9]" "$T/cut.json"
printf '{"version":3,"args":[]}' >"$T/nores.json"
bad 'no "results" list' "$T/nores.json"
printf '{"results":{"size":1}}' >"$T/resobj.json"
bad 'no "results" list' "$T/resobj.json"
printf '{"results":[]}' >"$T/empty.json"
bad "no nccl-tests result rows found" "$T/empty.json"
printf '{"results":[1024]}' >"$T/num.json"
bad "a result is not a JSON object" "$T/num.json"
sed '0,/"nwrong":0.000000/s//"nwrong":3.000000/' "$J" >"$T/wrong.json"
bad "3 wrong results at size 1024" "$T/wrong.json"
sed 's/"bus_bw":0.030000/"bus_bw":"nan"/' "$J" >"$T/nan.json"
bad 'result 0: "bus_bw" is not a non-negative number' "$T/nan.json"
sed 's/"size":1024,/"size":-1024,/' "$J" >"$T/neg.json"
bad 'result 0: "size" is not a non-negative number' "$T/neg.json"
sed 's/"size":2048,/"size":20.5,/' "$J" >"$T/frac.json"
bad "result 1: size 20.5 is not a byte count" "$T/frac.json"
sed 's/"out_of_place":{[^}]*}/"out_of_place":7/' "$J" >"$T/oop.json"
bad 'result 0: "out_of_place" is not an object' "$T/oop.json"
printf '{"results":[{"size":1024}]}' >"$T/noside.json"
bad "result 0 has neither out_of_place nor in_place" "$T/noside.json"
end

begin "a tagged table with a broken row: the line number of the file"
sed '30s/ *0$//' "$NCCL/alltoall_2x8_tagged.txt" >"$T/short.txt"
bad "line 30: expected 13 fields, found 12" "$T/short.txt"
end

finish
