#!/bin/sh
# tests/cli/faults.sh -- fault injection: an interrupted run (SIGINT, SIGTERM, SIGHUP) leaves no
# output file, no temporary file and no import spool behind; writes to a full device and reads
# of unreadable inputs fail cleanly.
. "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/cli/lib.sh"

if [ -n "$MOE_VALGRIND" ]; then
    echo "skip: signal timing is not meaningful under valgrind"
    exit 77
fi

# interrupt SIGNAL ARGS...: start moe-trace ARGS (or $prog ARGS, standard input from $stdin)
# in the background (exec'd, so $! is the program itself), signal it once it has begun writing,
# and check that it died of the signal.
interrupt() {
    _sig=$1
    shift
    (exec "$MOE_BIN/${prog:-moe-trace}" "$@" <"${stdin:-/dev/null}" 2>"$T/err") &
    _pid=$!
    # Wait until the command has created its temporary output (at most ~5 s).
    _i=0
    while [ $_i -lt 100 ] && ! ls "$T"/out.moet.tmp* "$T"/spool/* >/dev/null 2>&1; do
        sleep 0.05
        _i=$((_i + 1))
    done
    sleep 0.2
    kill "-$_sig" "$_pid" 2>/dev/null
    wait "$_pid"
    rc=$?
    [ "$rc" -gt 128 ] || fail "$*: exit $rc after SIG$_sig, expected death by the signal"
}

for sig in INT TERM HUP; do
    begin "gen interrupted by SIG$sig: no output, no temporary file"
    interrupt "$sig" gen -L 8 -E 64 -k 4 -n 50M -o "$T/out.moet"
    expect_no_output "$T/out.moet"
    end
done

mkdir -p "$T/spool"
moe gen -L 8 -E 64 -k 4 -n 50k -s 50 -O t --no-PG -o "$T/big.txt"
awk '!/^@/ { s = $6; for (i = 7; i <= NF; i++) s = s " " $i; print s }' "$T/big.txt" \
    >"$T/big.tokens"
mkfifo "$T/fifo"
for sig in INT TERM; do
    begin "import interrupted by SIG$sig: no output, spool removed"
    # The input pipe stays open: import has spooled everything and waits for more when
    # signalled.
    { cat "$T/big.tokens"; exec sleep 30; } >"$T/fifo" &
    feeder=$!
    TMPDIR=$T/spool interrupt $sig import --format tokens -o "$T/out.moet" "$T/fifo"
    kill "$feeder" 2>/dev/null
    expect_no_output "$T/out.moet"
    [ -z "$(ls "$T/spool")" ] || fail "spool left behind: $(ls "$T/spool")"
    end
done

for sig in INT TERM; do
    begin "moe-place fit of standard input interrupted by SIG$sig: the input's spool removed"
    # fit copies standard input into TMPDIR (it reads its input twice) and, with the pipe still
    # open, is copying when signalled.
    { cat "$T/big.txt"; exec sleep 30; } >"$T/fifo" &
    feeder=$!
    prog=moe-place stdin=$T/fifo TMPDIR=$T/spool interrupt $sig fit --ranks 4 -o "$T/out.moep"
    kill "$feeder" 2>/dev/null
    expect_no_output "$T/out.moep"
    [ -z "$(ls "$T/spool")" ] || fail "spool left behind: $(ls "$T/spool")"
    end
done
unset prog stdin

begin "import completes: spool removed, output equal to the text view's ids"
TMPDIR=$T/spool run moe import --format tokens --no-PG -o "$T/imp.moet" "$T/big.tokens"
expect_eq "$rc" 0 "import status"
[ -z "$(ls "$T/spool")" ] || fail "spool left behind: $(ls "$T/spool")"
moe view --no-header "$T/imp.moet" | cut -f 6- | tr '\t' ' ' >"$T/imp.ids"
same_file "$T/imp.ids" "$T/big.tokens" "imported ids"
end

begin "output into a missing directory: one line, status 1"
expect_exit 1 moe gen -n 10 -s 1 -o "$T/no/such/dir/x.moet"
expect_err_line "cannot create"
end

if [ -w /dev/full ]; then
    begin "stats, view, gen and import to /dev/full: status 1, one line"
    for cmd in "stats $T/imp.moet" "view $T/imp.moet" "gen -n 100k -f" \
        "import --format tokens -f $T/big.tokens"; do
        # shellcheck disable=SC2086
        run moe $cmd -o /dev/full
        expect_eq "$rc" 1 "status of $cmd -o /dev/full"
        expect_err_line "No space left on device"
    done
    end
fi

finish
