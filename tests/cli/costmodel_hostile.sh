#!/bin/sh
# tests/cli/costmodel_hostile.sh -- moe-costmodel refuses impossible inputs (issue 17 item 8):
# each case exits 1 (2 for a usage error) with one 'moe-costmodel: ' line naming the cause,
# and writes nothing.

. "$(dirname "$0")/lib.sh"

cm() { moe_tool moe-costmodel "$@"; }
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
OUT=$T/out.txt

# refused STATUS SUBSTRING ARGS...: the status, the message's first line, no output.
refused() {
    _st=$1 _msg=$2
    shift 2
    rm -f "$OUT"
    expect_exit "$_st" cm "$@" -o "$OUT"
    case $(head -n 1 "$T/err") in
    "moe-costmodel: "*"$_msg"*) ;;
    *) fail "stderr lacks 'moe-costmodel: ...$_msg': $(head -n 1 "$T/err")" ;;
    esac
    expect_no_output "$OUT"
}

begin "janus: top-k above the experts of a block"
refused 2 "top-k 33 exceeds the 32 experts" janus --topk=33 --experts=32 --batch=8 --seq=64 \
    --hidden=64 --nodes=2
end

begin "mpmoe: zero experts"
refused 2 "invalid expert count '0'" mpmoe --experts=0 --tokens=4096 --hidden=1024 \
    --ffn=4096 --topology=mpmoe-a100
end

begin "sizes beyond any model print no 300-digit numbers"
refused 2 "sequence length '1e300' out of range" monta --seq=1e300 --hidden=8192 \
    --topology=monta-a800
refused 2 "token count '1e300' out of range" mpmoe --tokens=1e300 --hidden=1024 --ffn=4096 \
    --topology=mpmoe-a100
refused 2 "out of range" janus --batch=8 --seq=1e300 --hidden=1024 --nodes=2
end

begin "topology rates of 1e-300"
sed 's/^link inter bandwidth .*/link inter bandwidth 1e-300/' \
    "$top_srcdir/share/topologies/monta-a800.topo" >"$T/slow.topo"
grep -q '1e-300' "$T/slow.topo" || fail "no inter link line to change"
refused 1 "below 0.001" monta --seq=8Ki --hidden=8192 --topology="$T/slow.topo" --nodes=2
printf 'topology t\nnodes 1\ngpus-per-node 8\nflops 1e-300\n' >"$T/flops.topo"
refused 1 "below 0.001" mpmoe --tokens=4096 --hidden=1024 --ffn=4096 --topology="$T/flops.topo"
end

begin "mpmoe profiles: B=inf, a long comment, NUL"
M="mpmoe --tokens=4096 --hidden=1024 --ffn=4096 --topology=mpmoe-a100 --partitions=2"
printf 'S1 inf 2 0.001\n' >"$T/inf.prof"
# shellcheck disable=SC2086
refused 1 "line 1: expected 'S B n seconds'" $M --profile="$T/inf.prof"
{ printf '# '; i=0; while [ $i -lt 40 ]; do printf '%050d' 0; i=$((i + 1)); done
  printf '\nS1 4096 2 bad\n'; } >"$T/long.prof"
# shellcheck disable=SC2086
refused 1 "line 2: expected" $M --profile="$T/long.prof"
{ printf '# '; i=0; while [ $i -lt 40 ]; do printf '%050d' 0; i=$((i + 1)); done
  printf '\nS1 4096 2 0.0021\n'; } >"$T/ok.prof"
# shellcheck disable=SC2086
expect_exit 0 cm $M --profile="$T/ok.prof" -o "$OUT"
printf 'S1 4096 2 0.0021\nS1 4096\0 4 0.003\n' >"$T/nul.prof"
# shellcheck disable=SC2086
refused 1 "line 2" $M --profile="$T/nul.prof"
end

begin "nccl-tests tables: size 0 and sizes from 2^64"
A2A=$top_srcdir/tests/data/nccl/alltoall_2x8.txt
sed 's/^        1024           256/           0           256/' "$A2A" >"$T/zero.txt"
refused 1 "size '0'" fit --nccl-tests="$T/zero.txt" --class=inter
sed 's/^        1024           256/18446744073709551616 256/' "$A2A" >"$T/huge.txt"
refused 1 "size '18446744073709551616'" fit --nccl-tests="$T/huge.txt" --class=inter
end

begin "config files: a NUL byte is no long line"
printf 'seq = 8Ki\nhid\0den = 8192\n' >"$T/nul.conf"
refused 1 "line 2: NUL byte in line" monta --config="$T/nul.conf" --topology=monta-a800
printf 'nodes = 0\n' >"$T/nodes.conf"
refused 1 "line 1: node count '0' out of range" monta --config="$T/nodes.conf" --seq=8Ki \
    --hidden=8192 --topology=monta-a800
end

finish
