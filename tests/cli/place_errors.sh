#!/bin/sh
# tests/cli/place_errors.sh -- moe-place on bad input and bad usage: exit status 1 (2 for usage
# errors, with the "Try ... --help" hint), exactly one 'moe-place: ' line on stderr, nothing on
# stdout, and no output file, matrix file or temporary FILE.tmp* left behind.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-place" ]; then
    echo "MOE_BIN must hold moe-place (got '$MOE_BIN')" >&2
    exit 99
fi

mp() { moe_tool moe-place "$@"; }

OUT=$T/out.moep
MAT=$T/m.csv
MATB=$T/mb.txt

# expect_mp_err_line [SUBSTRING]: stderr is one line starting 'moe-place: ' (with SUBSTRING).
expect_mp_err_line() { expect_tool_err_line moe-place "$@"; }

# expect_mp_usage SUBCOMMAND [SUBSTRING]: a 'moe-place: ' line plus the hint.
expect_mp_usage() { expect_tool_usage moe-place "$@"; }

# bad STATUS SUBSTRING SUBCOMMAND ARGS...: moe-place SUBCOMMAND ARGS fails with STATUS and the
# message, leaving no output behind. Standard input is /dev/null unless redirected by the caller.
bad() {
    _st=$1 _msg=$2
    shift 2
    rm -f "$OUT" "$MAT" "$MATB"
    expect_exit "$_st" mp "$@"
    if [ "$_st" = 2 ]; then
        expect_mp_usage "$1" "$_msg"
    else
        expect_mp_err_line "$_msg"
    fi
    expect_no_stdout
    expect_no_output "$OUT"
    expect_no_output "$MAT"
    expect_no_output "$MATB"
}

# Inputs: a good trace of several blocks (vector size known), one without the vector size, a
# placement fitting each.
GOOD=$T/good.moet
moe gen -L 4 -E 16 -k 2 -n 60000 -s 16 -r 4 -S 3 --hidden 64 --elem-bytes 2 --no-PG \
    -o "$GOOD" &&
    moe gen -L 4 -E 16 -k 2 -n 500 -s 10 -r 4 -S 4 --no-PG -o "$T/novec.moet" &&
    moe gen -L 4 -E 16 -k 2 -n 500 -s 10 -r 8 -S 5 --no-PG -o "$T/r8.moet" &&
    moe gen -L 2 -E 4 -k 2 -n 50 -s 5 -S 6 --no-PG -o "$T/small.moet" &&
    mp fit --no-PG --ranks 4 --method contiguous -o "$T/p.moep" "$GOOD" &&
    mp fit --no-PG --ranks 4 --method balanced --replicas 2 -o "$T/rep.moep" "$GOOD" ||
    { echo "cannot make the test inputs"; exit 1; }
size=$(file_size "$GOOD")
head -c $((size / 2)) "$GOOD" >"$T/half.moet"
head -c $((size - 1)) "$GOOD" >"$T/minus1.moet"
head -c $((size - 30)) "$GOOD" >"$T/noeof.moet"
: >"$T/empty"
mkdir "$T/dir"

begin "the inputs are good"
expect_exit 0 mp eval -o "$OUT" --matrix "$MAT" --matrix-bytes "$MATB" "$T/p.moep" "$GOOD"
# the one stderr line: how to run nccl-tests' alltoallv_perf on --matrix (issue 18)
expect_eq "$(grep -c . "$T/err")" 1 "stderr lines"
grep -q '^moe-place: nccl-tests: .* alltoallv_perf -b' "$T/err" || fail "stderr: $(cat "$T/err")"
[ -s "$OUT" ] && [ -s "$MAT" ] && [ -s "$MATB" ] || fail "no output"
end

# ------------------------------------------------------------------ usage errors

begin "usage errors: status 2 and the hint"
bad 2 "--ranks or --topology is required" fit -o "$OUT" "$GOOD"
bad 2 "not a multiple of --gpus-per-node" fit --ranks 6 --gpus-per-node 4 -o "$OUT" "$GOOD"
bad 2 "--topk" fit --ranks 4 --topk 2 -o "$OUT" "$GOOD"
bad 2 "unknown method" fit --ranks 4 --method metis -o "$OUT" "$GOOD"
bad 2 "out of range" fit --ranks 4 --ep-size 0 -o "$OUT" "$GOOD"
bad 1 "'-' (standard input): empty input" fit --ranks 4 -o "$OUT"
bad 2 "both be standard input" eval -o "$OUT" - -
bad 2 "" eval -o "$OUT" "$T/p.moep"
bad 2 "unknown source" eval --source bogus -o "$OUT" "$T/p.moep" "$GOOD"
bad 2 "" export -o "$OUT"
bad 2 "unknown format" import --format csv -o "$OUT" "$T/p.moep"
bad 2 "" check
run mp frobnicate
expect_eq "$rc" 2 "status of an unknown command"
expect_mp_usage "" "unknown command 'frobnicate'"
end

# ------------------------------------------------------------------ bad traces

# bad_trace WHAT FILE SUBSTRING: fit and eval (with matrices) fail on the trace FILE, from the
# file with and without threads, and from standard input.
bad_trace() {
    begin "bad trace: $1"
    for th in 0 2; do
        bad 1 "$3" fit --ranks 4 -@ $th -o "$OUT" "$2"
        bad 1 "$3" fit --ranks 4 --method contiguous -@ $th -o "$OUT" "$2"
        bad 1 "$3" eval -@ $th -o "$OUT" --matrix "$MAT" --matrix-bytes "$MATB" \
            "$T/p.moep" "$2"
    done
    if [ -f "$2" ]; then
        bad 1 "$3" fit --ranks 4 -o "$OUT" - <"$2"
        bad 1 "$3" eval -o "$OUT" --matrix "$MAT" "$T/p.moep" - <"$2"
    fi
    end
}
bad_trace "nonexistent" "$T/nope.moet" "cannot open '$T/nope.moet'"
bad_trace "a directory" "$T/dir" "cannot open '$T/dir'"
bad_trace "empty" "$T/empty" "empty input"
bad_trace "truncated in the middle" "$T/half.moet" "truncated"
bad_trace "last byte missing" "$T/minus1.moet" "truncated"
bad_trace "no end-of-file block" "$T/noeof.moet" "no end-of-file block"
bad_trace "newer major version" "$top_srcdir/tests/data/trace_v2.moet" "newer than this reader"
bad_trace "not a trace" "$T/p.moep" "not a moeflow trace"

begin "empty standard input; a trace without tokens"
bad 1 "empty" fit --ranks 4 -o "$OUT" - </dev/null
bad 1 "empty" eval -o "$OUT" "$T/p.moep" - </dev/null
moe head -n 0 -o "$T/zero.moet" "$GOOD"
bad 1 "no tokens to fit" fit --ranks 4 -o "$OUT" "$T/zero.moet"
end

# ------------------------------------------------------------------ placement vs trace

begin "eval's two files swapped: each named by its kind, the order said"
bad 1 "'$GOOD' is a routing trace and '$T/p.moep' a placement: moe-place eval takes PLACEMENT TRACE" \
    eval -o "$OUT" "$GOOD" "$T/p.moep"
bad 1 "'$GOOD' is a routing trace, not a placement: moe-place eval takes PLACEMENT TRACE" \
    eval -o "$OUT" "$GOOD" "$GOOD"
end

begin "check of another system's placement points to import"
bad 1 "it looks like SGLang's expert-location JSON: convert it with 'moe-place import --format sglang'" \
    check "$top_srcdir/tests/data/place/sglang_map.json"
bad 1 "it looks like an EPLB JSON: convert it with 'moe-place import --format eplb'" \
    check "$top_srcdir/tests/data/place/eplb_global.json"
end

begin "a placement of another shape than the trace"
bad 1 "placement is for 4 layers x 16 experts, the trace has 2 x 4" \
    eval -o "$OUT" --matrix "$MAT" "$T/p.moep" "$T/small.moet"
bad 1 "the trace has 2 x 4" eval -o "$OUT" "$T/p.moep" - <"$T/small.moet"
bad 1 "top-k 3 exceeds the trace's 2" eval --topk 3 -o "$OUT" "$T/p.moep" "$GOOD"
# recorded source ranks beyond the placement's
bad 1 "source rank" eval --source recorded -o "$OUT" "$T/p.moep" "$T/r8.moet"
bad 1 "source rank" eval --source recorded -@ 2 -o "$OUT" "$T/p.moep" "$T/r8.moet"
# a topology of another size
bad 1 "has 8 ranks" eval --topology "$top_srcdir/share/topologies/h100-ndr400.topo" \
    -o "$OUT" "$T/p.moep" "$GOOD"
bad 1 "--matrix-bytes needs the vector size" \
    eval --matrix-bytes "$MATB" --matrix "$MAT" -o "$OUT" "$T/p.moep" "$T/novec.moet"
end

# ------------------------------------------------------------------ corrupt placements

H='@PL	VN:1.0	layers:1	experts:4	ranks:2	gpus_per_node:2	capacity:2'
moe gen -L 1 -E 4 -k 2 -n 50 -s 5 -S 6 --no-PG -o "$T/e4.moet"

# bad_placement WHAT SUBSTRING LINE...: a placement of those lines fails check, eval and export,
# from a file and from standard input.
bad_placement() {
    _what=$1 _msg=$2
    shift 2
    printf '%s\n' "$@" >"$T/bad.moep"
    begin "bad placement: $_what"
    bad 1 "$_msg" check "$T/bad.moep"
    # a good one before it is still reported
    run mp check "$T/p.moep" "$T/bad.moep"
    expect_eq "$rc" 1 "status of check GOOD BAD"
    expect_mp_err_line "$_msg"
    expect_eq "$(cut -c1-${#T} "$T/out")/$(wc -l <"$T/out" | tr -d ' ')" "$T/1" "check GOOD BAD stdout"
    bad 1 "$_msg" eval -o "$OUT" --matrix "$MAT" "$T/bad.moep" "$T/e4.moet"
    bad 1 "$_msg" eval -o "$OUT" - "$T/e4.moet" <"$T/bad.moep"
    for f in text exflow eplb; do
        bad 1 "$_msg" export --format $f -o "$OUT" "$T/bad.moep"
    done
    bad 1 "$_msg" export --format eplb -o "$OUT" - <"$T/bad.moep"
    end
}
begin "the corrupt placements' base is good"
printf '%s\n' "$H" "0	0	0" "0	1	0" "0	2	1" "0	3	1" >"$T/ok.moep"
expect_exit 0 mp check "$T/ok.moep"
expect_exit 0 mp eval -o "$OUT" "$T/ok.moep" "$T/e4.moet"
end
bad_placement "expert on no rank" "invalid rank list" \
    "$H" "0	0	0" "0	1	0" "0	2	1" "0	3	"
bad_placement "expert without a record" "no record for layer 0 expert 3" \
    "$H" "0	0	0" "0	1	0" "0	2	1"
bad_placement "rank over capacity" "rank 0 holds more than 2 experts" \
    "$H" "0	0	0" "0	1	0" "0	2	0" "0	3	1"
bad_placement "rank out of range" "rank 2 out of range (2 ranks)" \
    "$H" "0	0	0" "0	1	0" "0	2	2" "0	3	1"
bad_placement "duplicated rank" "rank 0 listed twice" \
    "$H" "0	0	0" "0	1	0,0" "0	2	1" "0	3	1"
bad_placement "newer major version" "newer version 2.0 of the format" \
    "$(echo "$H" | sed 's/VN:1.0/VN:2.0/')" "0	0	0" "0	1	0" "0	2	1" "0	3	1"
bad_placement "missing @PL" "no @PL line" \
    "0	0	0" "0	1	0" "0	2	1" "0	3	1"
bad_placement "empty" "" ""

begin "expert-parallel groups that do not tile the ranks"
bad 1 "--ep-size 3 must divide the 4 ranks" fit --ranks 4 --ep-size 3 -o "$OUT" "$GOOD"
bad 1 "or be a multiple of the 4 GPUs per node" fit --ranks 12 --gpus-per-node 4 --ep-size 6 \
    -o "$OUT" "$GOOD"
end

begin "replicas cannot be exported as an ExFlow CSV"
bad 1 "one GPU per expert" export --format exflow -o "$OUT" "$T/rep.moep"
end

# ------------------------------------------------------------------ tables

begin "exflow, --topk 1 and top-k fits need tables counted the matching way"
moe_aff=$MOE_BIN/moe-affinity
if [ -x "$moe_aff" ]; then
    "$moe_aff" -o "$T/topk.aff" "$GOOD" && "$moe_aff" --top1 -o "$T/top1.aff" "$GOOD" ||
        fail "moe-affinity failed"
    bad 1 "the table counts top-k sets" fit --ranks 4 --method exflow -o "$OUT" "$T/topk.aff"
    bad 1 "with --top1" fit --ranks 4 --topk 1 -o "$OUT" "$T/topk.aff"
    bad 1 "the table counts top-1 sets" fit --ranks 4 -o "$OUT" "$T/top1.aff"
    # a table on standard input fits as the file does
    expect_exit 0 mp fit --ranks 4 --no-PG -o "$T/file.moep" "$T/topk.aff"
    expect_exit 0 mp fit --ranks 4 --no-PG -o "$OUT" - <"$T/topk.aff"
    cmp -s "$T/file.moep" "$OUT" || fail "a table on stdin fits differently from the file"
    rm -f "$OUT"
    # the matching table fits
    expect_exit 0 mp fit --ranks 4 --method exflow --gpus-per-node 2 --time-limit 1 \
        -o "$OUT" "$T/top1.aff"
else
    skip_case "no moe-affinity"
fi
end

# ------------------------------------------------------------------ imports

# bad_import FORMAT WHAT SUBSTRING TEXT [OPTIONS]: import of TEXT (printf format) fails, from a
# file and from standard input.
bad_import() {
    printf "$4" >"$T/bad.in"
    begin "bad $1 import: $2"
    # shellcheck disable=SC2086
    bad 1 "$3" import --format "$1" ${5:-} -o "$OUT" "$T/bad.in"
    # shellcheck disable=SC2086
    bad 1 "$3" import --format "$1" ${5:-} -o "$OUT" - <"$T/bad.in"
    end
}
bad_import exflow "repeated id" "expert id 1 listed twice" 'Expert,Node\r\n0,0\r\n1,0\r\n1,1\r\n'
bad_import exflow "non-numeric GPU" "found '1,x'" 'Expert,Node\n0,0\n1,x\n'
bad_import exflow "no header" "no 'Expert,Node' header" 'Expert,GPU\n0,0\n'
bad_import exflow "a missing id" "expert id 1 (layer 0 expert 1) missing" \
    'Expert,Node\n0,0\n2,1\n' "--experts 2"
bad_import exflow "empty" "" ''
bad_import exflow "header only" "no experts" 'Expert,Node\r\n'
bad_import exflow "a partial layer" "in the middle of layer 1" \
    'Expert,Node\n0,0\n1,0\n2,0\n' "--experts 2"
bad_import exflow "GPU out of range" "GPU 5 out of range (2 ranks)" \
    'Expert,Node\n0,0\n1,5\n' "--experts 2 --ranks 2"
bad_import exflow "a GPU over capacity" "" \
    'Expert,Node\n0,0\n1,0\n2,0\n3,1\n' "--experts 4 --ranks 2"
bad_import eplb "malformed JSON" "malformed JSON" '{"phy2log": [[0,1],[1,0]'
bad_import eplb "not JSON" "malformed JSON" 'hello'
bad_import eplb "no rank count" "number of ranks is unknown" '[[0,1,2]]'
bad_import eplb "id out of range" "expert id 5 out of range (2 experts)" \
    '{"num_ranks":2,"phy2log":[[0,1,5,1]],"num_logical_experts":2}'
bad_import eplb "no phy2log" "no 'phy2log'" '{"num_ranks":2,"phy2log":[[0,1],[0]]}'
bad_import eplb "logcnt disagrees" "'logcnt' of layer 1 expert 0 is 2" \
    '{"num_ranks":2,"phy2log":[[0,1],[1,0]],"logcnt":[[1,1],[2,1]]}'
bad_import eplb "an expert without a slot" "expert 2 has 0 slots" \
    '{"num_ranks":2,"phy2log":[[0,1],[1,0]],"num_logical_experts":3}'
bad_import eplb "gpus_per_node disagrees" "'gpus_per_node' is 2 in the file, 1 requested" \
    '{"num_ranks":2,"gpus_per_node":2,"phy2log":[[0,1],[1,0]]}' "--gpus-per-node 1"
bad_import eplb "empty" "" ''
# issue 17 item 7: a key given twice (also when spelled with an escape) and invalid escapes
bad_import eplb "duplicate key" 'duplicate key "phy2log" at column 40' \
    '{"num_ranks":2,"phy2log":[[0,1],[1,0]],"phy2log":[[1,0],[0,1]]}'
bad_import eplb "duplicate key spelled with an escape" 'duplicate key "\u0070hy2log"' \
    '{"num_ranks":2,"phy2log":[[0,1],[1,0]],"\\u0070hy2log":[[1,0],[0,1]]}'
bad_import eplb "duplicate num_ranks" 'duplicate key "num_ranks"' \
    '{"num_ranks":2,"phy2log":[[0,1],[1,0]],\n "num_ranks":1}'
bad_import eplb "a key as UTF-8, then as a \\u escape" 'duplicate key "\u00e9" at column 23' \
    '{"num_ranks":2,"\303\251":1,"\\u00e9":2,"phy2log":[[0,1],[1,0]]}'
bad_import eplb "a key as UTF-8, then as a surrogate pair" 'duplicate key "\ud83d\ude00"' \
    '{"num_ranks":2,"\360\237\230\200":1,"\\ud83d\\ude00":2,"phy2log":[[0,1],[1,0]]}'
bad_import eplb "lone high surrogate" "malformed JSON at column 17" \
    '{"num_ranks":2, "a\\ud800":0, "phy2log":[[0,1],[1,0]]}'
bad_import eplb "high surrogate, then no low one" "malformed JSON at column 17" \
    '{"num_ranks":2, "\\ud800\\u0041":0, "phy2log":[[0,1],[1,0]]}'
bad_import eplb "lone low surrogate" "malformed JSON at column 17" \
    '{"num_ranks":2, "\\udc00":0, "phy2log":[[0,1],[1,0]]}'
bad_import eplb "escaped NUL" "malformed JSON at column 17" \
    '{"num_ranks":2, "x\\u0000":0, "phy2log":[[0,1],[1,0]]}'
bad_import eplb "short \\u escape" "malformed JSON" '{"num_ranks":2, "phy2log":"\\u12"}'
bad_import eplb "unknown escape" "malformed JSON at column 17" \
    '{"num_ranks":2, "\\x41":0, "phy2log":[[0,1],[1,0]]}'
begin "eplb import: keys decoded (\\u escapes, surrogate pairs), the same placement"
printf '{"num_ranks":2,"phy2log":[[0,1],[1,0]]}' >"$T/plain.json"
printf '{"\\u006eum_ranks":2,"note":"\\ud83d\\ude00 \\u00e9\\n",' >"$T/esc.json"
printf '"phy2\\u006C\\u006fg":[[0,1],[1,0]]}' >>"$T/esc.json"
expect_exit 0 mp import --format eplb --no-PG -o "$T/plain.moep" "$T/plain.json"
expect_exit 0 mp import --format eplb --no-PG -o "$T/esc.moep" "$T/esc.json"
grep -v '^@CO' "$T/plain.moep" >"$T/plain.body"
grep -v '^@CO' "$T/esc.moep" >"$T/esc.body"
same_file "$T/plain.body" "$T/esc.body" "escaped keys import as the plain ones"
end
begin "more than 255 copies of an expert: the message names the options given"
bad 1 "--replicas 300: up to 301 copies of an expert on 512 ranks, at most 255" \
    fit --ranks 512 --method balanced --replicas 300 -o "$OUT" "$T/small.moet"
grep -q -- "--ep-size" "$T/err" && fail "names an --ep-size that was not given"
end

begin "import of a missing file"
bad 1 "cannot open" import --format exflow -o "$OUT" "$T/nope.csv"
bad 1 "cannot open" import --format eplb -o "$OUT" "$T/dir"
end

# ------------------------------------------------------------------ outputs

begin "unwritable outputs: nothing left behind"
bad 1 "" fit --ranks 4 --method contiguous -o "$T/missing/dir/out.moep" "$GOOD"
bad 1 "" eval -o "$T/missing/out" "$T/p.moep" "$GOOD"
bad 1 "" eval --matrix "$T/missing/m.csv" -o "$OUT" "$T/p.moep" "$GOOD"
# a failed run leaves none of its outputs, the matrices included
bad 1 "" eval --matrix-bytes "$T/missing/mb.txt" --matrix "$MAT" -o "$OUT" "$T/p.moep" "$GOOD"
bad 1 "" eval --matrix "$MAT" --matrix-bytes "$MATB" -o "$T/missing/out" "$T/p.moep" "$GOOD"
bad 1 "" export --format eplb -o "$T/missing/x.json" "$T/p.moep"
if [ -w /dev/full ] && [ -c /dev/full ]; then
    bad 1 "No space left on device" fit --ranks 4 --method contiguous -o /dev/full "$GOOD"
    bad 1 "No space left on device" eval -o /dev/full "$T/p.moep" "$GOOD"
fi
ls "$T" | grep '\.tmp' >"$T/tmps" && fail "temporary files left: $(cat "$T/tmps")"
end

finish
