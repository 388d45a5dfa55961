#!/bin/sh
# tests/cli/costmodel_errors.sh -- moe-costmodel on bad input and bad usage: exit status 1 (2 for
# usage errors, with the "Try ... --help" hint), exactly one 'moe-costmodel: ' line on stderr,
# nothing on stdout, and no output file left behind.

. "$(dirname "$0")/lib.sh"

if [ ! -x "$MOE_BIN/moe-costmodel" ]; then
    echo "MOE_BIN must hold moe-costmodel (got '$MOE_BIN')" >&2
    exit 99
fi

cm() { moe_tool moe-costmodel "$@"; }

MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
OUT=$T/out.txt

# err1 SUBSTRING CMD...: exit 1, one 'moe-costmodel: ' line containing SUBSTRING, no stdout,
# no output file.
err1() {
    _emsg=$1
    shift
    expect_exit 1 "$@"
    expect_tool_err_line moe-costmodel "$_emsg"
    expect_no_stdout
    expect_no_output "$OUT"
}

# err2 SUB CMD...: exit 2 with the usage hint of SUB ('' for the tool).
err2() {
    _sub=$1
    shift
    expect_exit 2 "$@"
    expect_tool_usage moe-costmodel "$_sub"
    expect_no_stdout
    expect_no_output "$OUT"
}

MB="--volume=256M --tp=8 --ep=2 --bw-intra=200G --bw-hbm=1.6T"

begin "usage errors"
err2 "" cm
err2 "" cm nosuch
err2 monta cm monta --seq=abc --hidden=8192
err2 monta cm monta --r1=1.5 --volume=1M
err2 monta cm monta --r1=32M:0.5,8M:0.4 --volume=1M
err2 monta cm monta --r1=0.5,8M:0.4 --volume=1M
err2 monta cm monta --bw-inter=fast --volume=1M
err2 monta cm monta --activation=half --volume=1M
err2 monta cm monta --trace=x.moet
err2 monta cm monta extra
err2 "monta plan" cm monta plan
err2 exflow cm exflow --ranks=8
err2 exflow cm exflow --trace=x.moet
err2 exflow cm exflow --trace=x --placement=y --p=0.5
err2 exflow cm exflow --p=1.5 --p-star=0.1 --ranks=1 --tokens-per-rank=1 --layers=1
err2 janus cm janus --batch=1 --seq=1
err2 janus cm janus --batch=1 --seq=1 --hidden=8 --nodes=2 --experts=4 --experts-per-worker=1
err2 janus cm janus --batch=1 --seq=1 --hidden=8 --nodes=2 --experts-per-worker=1,2 --blocks=3
err2 mpmoe cm mpmoe --tokens=1
err2 mpmoe cm mpmoe --alpha=comm,comm=0.5
err2 mpmoe cm mpmoe --alpha=comm,comp=2
err2 mpmoe cm mpmoe --reuse=S9
err2 mpmoe cm mpmoe --min-partitions=4 --max-partitions=2 --tokens=1 --hidden=1 --ffn=1
err2 mpmoe cm mpmoe --partitions=8 --tokens=3 --hidden=1 --ffn=1
end

begin "runtime and data errors"
# shellcheck disable=SC2086
err1 "inter-node (B1, --bw-inter) bandwidth is unknown" cm monta $MB -o "$OUT"
err1 "cannot open 'nosuch-preset'" cm monta --topology=nosuch-preset --volume=1M -o "$OUT"
err1 "cannot open '$T/none.conf'" cm monta --config="$T/none.conf" -o "$OUT"
printf 'volume = 1M\nchunkz = 4\n' >"$T/bad.conf"
err1 "line 2: unknown key 'chunkz'" cm monta --config="$T/bad.conf" -o "$OUT"
printf 'volume = 1M\nplacement = p.moep\n' >"$T/bad2.conf"
err1 "line 2: unknown key 'placement' for monta" cm monta --config="$T/bad2.conf" -o "$OUT"
printf 'volume = lots\n' >"$T/bad3.conf"
err1 "line 1: invalid volume 'lots'" cm monta --config="$T/bad3.conf" -o "$OUT"
printf 'config = %s\n' "$T/loop.conf" >"$T/loop.conf"
err1 "nested too deeply" cm monta --config="$T/loop.conf" -o "$OUT"
printf 'topology x\nnodes 1\n' >"$T/bad.topo"
err1 "bad.topo" cm monta --topology="$T/bad.topo" --volume=1M -o "$OUT"
err1 "cannot open '$T/none.moet'" cm exflow --trace="$T/none.moet" \
    --placement="$top_srcdir/tests/data/placement/small.moep" -o "$OUT"
err1 "compute rate is unknown" cm mpmoe --tokens=4096 --hidden=1024 --ffn=4096 \
    --bw-intra=100G --bw-host=32G --gpus-per-node=8 -o "$OUT"
printf 'S1 1024 2\n' >"$T/bad.prof"
err1 "line 1: expected 'S B n seconds'" cm mpmoe --tokens=4096 --hidden=1024 --ffn=4096 \
    --topology=mpmoe-a100 --profile="$T/bad.prof" -o "$OUT"
err1 "one replica needs 32 nodes, only 8 available" cm monta plan --seq=128Ki --nodes=8 \
    -o "$OUT"
err1 "cannot create" cm janus --batch=1 --seq=1 --hidden=8 --nodes=2 -o "$T/nodir/x.txt"
end

begin "D1: janus without a topology or a host bandwidth, and --bw-host=0"
# --bw-inter alone once passed an unset (NaN) host bandwidth to the writer, which ended with
# "write error on '-': Success"; --bw-host=0 (no host path, as moe-costmodel(1) says) was
# refused as an invalid bandwidth
for h in "" "--bw-host=0"; do
    # shellcheck disable=SC2086
    expect_exit 0 cm janus --batch=32 --seq=256 --hidden=512 --experts=16 --nodes=2 \
        --bw-inter=25G $h
    expect_no_stderr
    has_line '^time over 8 x 25 GB/s: E\.C\. 0\.6711 ms, D\.C\. 0\.3355 ms'
    has_line '^D\.C\. pulls over the network only \(no host bandwidth\)'
done
end

finish
