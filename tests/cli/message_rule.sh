#!/bin/sh
# tests/cli/message_rule.sh -- doc/ARCHITECTURE's message rule: a message about a file names it
# first, in one of the forms "'PATH': why", "'PATH' line N: why" or "cannot VERB 'PATH': why",
# and exactly one layer writes the name, the library's reader of that file (the tools add none,
# so no message names its file twice or not at all). Bad inputs of every reader, through the
# tools, at every depth a reader fails at: opening, detection, header, a record (the sequential
# reader, the parallel map and a worker thread), an import among several inputs.

. "$(dirname "$0")/lib.sh"

# named WANT TOOL ARGS...: TOOL fails with status 1 and one line naming WANT by the rule.
named() {
    nr_want=$1 nr_tool=$2
    shift 2
    begin "$nr_tool $*: the message names '$nr_want' once, first"
    expect_exit 1 moe_tool "$nr_tool" "$@"
    expect_tool_err_line "$nr_tool"
    nr_line=$(head -n 1 "$T/err")
    nr_rest=${nr_line#"$nr_tool: "}
    case $nr_rest in
    "'$nr_want': "* | "'$nr_want' line "[0-9]*": "* | "cannot "*" '$nr_want': "*) ;;
    *) fail "not by the rule: $nr_line" ;;
    esac
    # named once: the path does not come again in what follows it
    nr_after=${nr_rest#*"'$nr_want'"}
    case $nr_after in *"'$nr_want'"*) fail "names the file twice: $nr_line" ;; esac
    end
}

printf 'garbage\n' >"$T/g.txt"
moe gen -n 50 -s 2 -L 2 -E 4 -k 1 --no-PG -o "$T/t.moet"
moe view -O t --no-PG -o "$T/t.txt" "$T/t.moet"
sed '3s/	[0-9]*$/	9/' "$T/t.txt" >"$T/badid.txt"        # a record's id past E
head -c 200 "$T/t.moet" >"$T/cut.moet"                     # a cut block
moe view -O u -f --no-PG -o "$T/u.moet" "$T/badid.txt" 2>/dev/null ||
    moe view -O u -f --no-PG -o "$T/u.moet" "$T/t.moet"
"$MOE_BIN/moe-place" fit --ranks 2 --method contiguous --no-PG -o "$T/p.moep" "$T/t.moet"
printf '1,2 3\n' >"$T/ragged.tokens"

# traces: detection, truncation, a bad record in a text view (sequential reader and map)
named "$T/g.txt" moe-trace stats "$T/g.txt"
named "$T/cut.moet" moe-trace stats "$T/cut.moet"
named "$T/cut.moet" moe-trace stats -@ 1 "$T/cut.moet"
named "$T/badid.txt" moe-trace stats "$T/badid.txt"
named "$T/badid.txt" moe-trace view -O b -f -o "$T/o.moet" "$T/badid.txt"
named "$T/missing.moet" moe-trace view "$T/missing.moet"
named "$T/badid.txt" moe-affinity -o "$T/o.aff" "$T/badid.txt"
named "$T/cut.moet" moe-place eval "$T/p.moep" "$T/cut.moet"
named "$T/badid.txt" moe-place fit --ranks 2 -o "$T/o.moep" "$T/badid.txt"
# imports: one input, the second of two
named "$T/g.txt" moe-trace import -o "$T/o.moet" "$T/g.txt"
named "$T/ragged.tokens" moe-trace import --format tokens -o "$T/o.moet" "$T/ragged.tokens"
printf '1,2 3,4\n' >"$T/good.tokens"
named "$T/ragged.tokens" moe-trace import --format tokens -o "$T/o.moet" "$T/good.tokens" \
    "$T/ragged.tokens"
named "$T/g.txt" moe-place fit --ranks 2 --method balanced --loads "$T/g.txt"
# placements, topologies, configs
named "$T/g.txt" moe-place eval "$T/g.txt" "$T/t.moet"
named "$T/g.txt" moe-place check "$T/g.txt"
named "$T/g.txt" moe-place import --format eplb "$T/g.txt"
named "$T/g.txt" moe-place import --format exflow "$T/g.txt"
named "$T/g.txt" moe-costmodel simulate --topology "$T/g.txt" --hidden 8 "$T/t.moet" \
    "$T/p.moep"
named "$T/g.txt" moe-costmodel monta --config "$T/g.txt"
named "$T/g.txt" moe-costmodel fit --nccl-tests "$T/g.txt" --class inter
finish
