#!/bin/sh
# tests/cli/outputs.sh -- what a command may not do to its files (issue 17 items 2 and 4):
# `sample -n N` holds at most the tokens it read, however large N; no two outputs of a command,
# nor an output and an input, may name the same file (usage error, nothing written).

. "$(dirname "$0")/lib.sh"

moe gen -n 500 -s 5 -L 2 -E 4 -k 2 -r 4 -S 3 --no-PG -o "$T/in.moet" ||
    { echo "cannot make the test trace"; exit 1; }
moe view -O t --no-PG "$T/in.moet" | grep -v '^@' >"$T/in.rec"

# ---------------------------------------------------------------- sample -n: memory
# The old reader reserved N records up front: 4.8 GB for -n 1e8, 48 TB for -n 1e12.
begin "sample -n far above the trace's length, in 1 GB of address space"
if [ -n "$MOE_VALGRIND" ] || ! (ulimit -v 1048576 && "$MOE_BIN/moe-trace" --version) \
    >/dev/null 2>&1; then
    skip_case "cannot run under ulimit -v here (valgrind or a sanitizer build)"
else
    for n in 100000000 1000000000000 18446744073709551614; do
        (ulimit -v 1048576 && exec "$MOE_BIN/moe-trace" sample -n $n -S 9 -O t --no-PG \
            "$T/in.moet") >"$T/out" 2>"$T/err"
        rc=$?
        expect_eq "$rc" 0 "exit status of sample -n $n"
        expect_no_stderr
        grep -v '^@' "$T/out" >"$T/got"
        same_file "$T/in.rec" "$T/got" "sample -n $n: the whole trace in input order"
    done
    end
fi

begin "sample -n below the trace's length: the same tokens for the same seed"
moe sample -n 37 -S 5 --no-PG -o "$T/s1.moet" "$T/in.moet"
moe sample -n 37 -S 5 --no-PG -O u "$T/in.moet" | moe view -O b --no-PG -o "$T/s2.moet" -
same_file "$T/s1.moet" "$T/s2.moet" "sample -n 37 twice"
expect_eq "$(moe view -O t "$T/s1.moet" | grep -vc '^@')" 37 "tokens kept"
end

# ---------------------------------------------------------------- the same file twice
# expect_same_file_error TOOL SUB ARGS... (SUB "" for none): exit 2, the usage error naming
# the same file, no output made or changed (in.moet stays intact).
expect_same_file_error() {
    _tool=$1
    _sub=$2
    shift 2
    cp "$T/in.moet" "$T/keep.moet"
    run moe_tool "$_tool" ${_sub:+"$_sub"} "$@"
    if [ "$rc" != 2 ]; then
        fail "exit $rc, expected 2: $_tool $_sub $*"
        sed 's/^/    stderr: /' "$T/err" | head -5
    fi
    expect_tool_usage "$_tool" "$_sub" " name the same file '"
    same_file "$T/keep.moet" "$T/in.moet" "the input after $_tool $_sub $*"
    for _f in "$T"/x.* "$T"/d/x.*; do
        [ -e "$_f" ] && fail "output written: $_f" && rm -f "$_f"
    done
}

begin "split: --train and --test the same file"
expect_same_file_error moe-trace split --ratio 0.5 --train "$T/x.moet" --test "$T/x.moet" \
    "$T/in.moet"
mkdir -p "$T/d"
expect_same_file_error moe-trace split --ids 0-2 --train "$T/d/../x.moet" --test "$T/x.moet" \
    "$T/in.moet"
(cd "$T" && run moe split --ratio 0.5 --train x.moet --test ./d/../x.moet in.moet)
[ -e "$T/x.moet" ] && fail "relative names: output written"
expect_same_file_error moe-trace split --ratio 0.5 --train - --test - "$T/in.moet"
ln -s in.moet "$T/link.moet"
expect_same_file_error moe-trace split --ratio 0.5 --train "$T/x.moet" --test "$T/link.moet" \
    "$T/in.moet"
expect_same_file_error moe-trace split --ratio 0.5 --train "$T/in.moet" --test "$T/x.moet" \
    "$T/in.moet"
end

begin "split: distinct files still work; /dev/null may take both parts"
expect_exit 0 moe split --ratio 0.5 --train "$T/tr.moet" --test "$T/te.moet" --no-PG "$T/in.moet"
ntr=$(moe view -O t "$T/tr.moet" | grep -vc '^@')
nte=$(moe view -O t "$T/te.moet" | grep -vc '^@')
expect_eq "$((ntr + nte))" 500 "tokens in the two parts"
expect_exit 0 moe split --ratio 0.5 --train /dev/null --test /dev/null "$T/in.moet"
end

if [ -x "$MOE_BIN/moe-place" ]; then
    begin "moe-place eval: report and matrices"
    moe_tool moe-place fit --ranks 4 --method contiguous --no-PG -o "$T/p.moep" "$T/in.moet"
    cp "$T/p.moep" "$T/p.keep"
    expect_same_file_error moe-place eval -o "$T/x.csv" --matrix "$T/x.csv" "$T/p.moep" \
        "$T/in.moet"
    expect_same_file_error moe-place eval --matrix "$T/x.csv" --matrix-bytes "$T/x.csv" \
        --hidden 16 --elem-bytes 2 "$T/p.moep" "$T/in.moet"
    expect_same_file_error moe-place eval --matrix "$T/in.moet" "$T/p.moep" "$T/in.moet"
    expect_same_file_error moe-place eval -o "$T/p.moep" "$T/p.moep" "$T/in.moet"
    same_file "$T/p.keep" "$T/p.moep" "the placement after eval"
    expect_exit 0 moe_tool moe-place eval -o "$T/r.txt" --matrix "$T/m.csv" "$T/p.moep" \
        "$T/in.moet"
    end
fi

if [ -x "$MOE_BIN/moe-affinity" ]; then
    begin "moe-affinity: table and pictures"
    expect_same_file_error moe-affinity "" --png "$T/x.png" --svg "$T/x.png" "$T/in.moet"
    expect_same_file_error moe-affinity "" -o "$T/x.svg" --svg "$T/x.svg" "$T/in.moet"
    expect_same_file_error moe-affinity "" -o "$T/in.moet" "$T/in.moet"
    expect_exit 0 moe_tool moe-affinity --svg "$T/a.svg" -o "$T/a.tsv" "$T/in.moet"
    end
fi

if [ -x "$MOE_BIN/moe-costmodel" ]; then
    begin "moe-costmodel: report and plot"
    expect_same_file_error moe-costmodel monta -o "$T/x.svg" --plot "$T/x.svg" \
        --topology h100-ndr400
    expect_same_file_error moe-costmodel simulate --topology h100-ndr400 --plot "$T/in.moet" \
        "$T/in.moet" "$T/p.moep"
    end
fi

finish
