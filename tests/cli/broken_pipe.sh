#!/bin/sh
# tests/cli/broken_pipe.sh -- a reader that goes away (`tool | head`, `tool | true`) ends every
# tool that writes text quietly: status 0 and nothing on stderr (the one rule of cmd/cli.c,
# moe_cli_write_failed). Each command runs twice: once into a reader that has already left,
# once into `head -c1` with more output than a pipe holds.

. "$(dirname "$0")/lib.sh"

MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
# A trace whose reports run to megabytes: 256 layers on 16 ranks of 2 nodes.
moe gen -n 600 -s 4 -L 256 -E 64 -k 2 -r 16 --no-PG -o "$T/t.moet" ||
    { echo "cannot make the trace"; exit 99; }
moe_tool moe-place fit --ranks 16 --gpus-per-node 8 --method contiguous --no-PG \
    -o "$T/p.moep" "$T/t.moet" || { echo "cannot make the placement"; exit 99; }
moe_tool moe-affinity --no-PG -o "$T/a.aff" "$T/t.moet" || { echo "no table"; exit 99; }
sed 's/^nodes 1$/nodes 2/' "$top_srcdir/share/topologies/h100-ndr400.topo" >"$T/h.topo"

# piped READER TOOL ARGS...: the tool's status and stderr when its output goes to READER.
piped() {
    _reader=$1
    shift
    { moe_tool "$@" 2>"$T/err"; echo $? >"$T/st"; } | $_reader >/dev/null
    rc=$(cat "$T/st")
}

# quiet TOOL ARGS...: status 0 and an empty stderr with either reader.
quiet() {
    for _r in true "head -c1"; do
        piped "$_r" "$@"
        expect_eq "$rc" 0 "status into '$_r': $*"
        if [ -s "$T/err" ]; then
            fail "stderr into '$_r': $(head -n 2 "$T/err")"
        fi
    done
}

begin "moe-trace import into a closed pipe: quiet, and no spool left in TMPDIR"
# the import spools its records to TMPDIR until it knows the experts; a reader that goes away
# mid-copy must not leave the spool behind (issue 44, item 2: it exited from the sink)
moe view --no-header "$T/t.moet" | cut -f 6- | tr '\t' ' ' >"$T/t.tokens"
mkdir -p "$T/spool"
for form in t u; do
    TMPDIR=$T/spool quiet moe-trace import --format tokens -O $form "$T/t.tokens"
    [ -z "$(ls "$T/spool")" ] || fail "left in TMPDIR (-O $form): $(ls "$T/spool")"
done
end

begin "moe-place eval into a closed pipe"
quiet moe-place eval "$T/p.moep" "$T/t.moet"
quiet moe-place eval --json "$T/p.moep" "$T/t.moet"
end

begin "moe-place export into a closed pipe"
quiet moe-place export --format eplb "$T/p.moep"
end

begin "moe-affinity converge and compare into a closed pipe"
quiet moe-affinity converge --levels 4 "$T/t.moet"
quiet moe-affinity compare "$T/a.aff" "$T/a.aff"
quiet moe-affinity "$T/t.moet"
end

begin "moe-costmodel simulate into a closed pipe"
S="simulate --topology $T/h.topo --hidden 1024"
# shellcheck disable=SC2086
quiet moe-costmodel $S --loads --ranks "$T/t.moet" "$T/p.moep"
# shellcheck disable=SC2086
quiet moe-costmodel $S --json --ranks "$T/t.moet" "$T/p.moep"
end

begin "moe-costmodel fit into a closed pipe"
quiet moe-costmodel fit --nccl-tests "$top_srcdir/tests/data/nccl/alltoall_2x8.txt" \
    --class inter
end

begin "moe-costmodel models into a closed pipe"
quiet moe-costmodel exflow --ranks 16 --tokens-per-rank 4096 --layers 8 --p 0.9 --p-star 0.5
quiet moe-costmodel janus --batch 8 --seq 1024 --hidden 1024 --nodes 2 --blocks 256 \
    --experts-per-worker 2
quiet moe-costmodel monta --seq 4096 --hidden 4096 --topology monta-a800
end

begin "moe-trace view into a closed pipe"
quiet moe-trace view "$T/t.moet"
end

finish
