#!/bin/sh
# tests/cli/costmodel_monta_mpmoe.sh -- moe-costmodel's MoNTA and MPMoE keys of issue 20: O3's
# own efficiencies, per-operation latencies, the warning of a chunk search that ends on the
# smallest chunk, Table 3 over --dp, the flash row, MPMoE's launch overhead from an option and
# from a topology file; every expected figure computed by hand in the comments.

. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/cli/costmodel_lib.sh"

# I = 256 MB, t 8, e 2, B1 25 GB/s, B2 200 GB/s, B3 1.6 TB/s at 0.8, efficiencies 1:
# baseline 256e6 / 2 / 25e9 = 5.12 ms; at 4 chunks AA_j 0.16 ms, AG_j 0.28 ms, D2D_j 0.05 ms,
# O2 = 0.16 + 4 (0.28 + 0.05) = 1.48 ms (0.2891), O3 = 0.16 + 4 * 0.28 + 0.05 = 1.33 ms.
M="--volume=256M --tp=8 --ep=2 --bw-inter=25G --bw-intra=200G --bw-hbm=1.6T --r1=1 --r2=1
   --r3=0.8"

begin "monta: O3's own AllGather efficiency turns Alg. 3 from O3 to O2"
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --chunks=4
has_line '^O3 +4 +1\.3300 +0\.2598$'
has_line '^selected \(Alg\. 3\): O3, 1\.3300 ms; runner-up O2, 1\.4800 ms$'
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --chunks=4 --json
has_line '"selected": "O3", "runner_up": \{"name": "O2", "time": 0\.00148\}'
# r2 0.5 for O3 only: AG_j 0.56 ms, O3 = 0.16 + 2.24 + 0.05 = 2.45 ms (0.4785); O2 unchanged
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --chunks=4 --r2-o3=0.5
expect_no_stderr
has_line '^O2 +4 +1\.4800 +0\.2891$'
has_line '^O3 +4 +2\.4500 +0\.4785$'
has_line '^O3 \(N=4\) +AllGather per chunk +64\.000 +0\.5000 +0\.5600$'
has_line '^selected \(Alg\. 3\): O2, '
# a 10 us D2D latency: O3 + 10 us (one copy shows) = 2.46 ms, O2 + 4 x 10 us = 1.52 ms
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --chunks=4 --r2-o3=0.5 --latency-hbm=10us
has_line '^O2 +4 +1\.5200 '
has_line '^O3 +4 +2\.4600 '
end

begin "monta: a search that ends on the smallest chunk warns"
# fixed efficiencies, no latency: more chunks always win, up to 256e6 / (32 x 8) = 1 MB chunks:
# O2 = 20 us + 32 x (35 + 6.25) us = 1.34 ms
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --min-chunk=1M
has_line '^O2 +32 +1\.3400 '
grep -q "moe-costmodel: warning: O2: the chunk search ended on the smallest chunk (N = 32" \
    "$T/err" || fail "no warning for O2"
[ "$(wc -l <"$T/err")" -eq 2 ] || fail "expected one warning per searched strategy"
# JSON names it per searched strategy: O2 and O3 both kept their smallest chunk here
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --min-chunk=1M --json
[ "$(grep -c '"at_min": true' "$T/out")" -eq 2 ] || fail "JSON: at_min not true for O2 and O3"
# with the preset's curves (extrapolated below 8 MB) the search stops by itself at 8K
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies expect_exit 0 cm monta --topology=monta-a800 \
    --nodes=2 --seq=8Ki --hidden=8192 --elem-bytes=4
expect_no_stderr
has_line '^O3 +4 '
MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies expect_exit 0 cm monta --topology=monta-a800 \
    --nodes=2 --seq=8Ki --hidden=8192 --elem-bytes=4 --json
[ "$(grep -c '"at_min": false' "$T/out")" -eq 2 ] || fail "JSON: at_min not false for O2 and O3"
end

begin "monta: Table 3 over --dp, the flash row"
# ZeRO 1 over 4 copies, t = c = 1: (4 + 12/4) x 1e9 = 7 GB, (4 + 12/4) x 2e9 = 14 GB;
# flash at t 1: 4096 x 8192 x 1 x (13 + 21 + 4 x 64 / 8192) bytes = 1141.9 MB
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --tp=1 --ep=1 --seq=4096 --hidden=8192 --params-dense=1G \
    --params-moe=2G --layers=1 --heads=64 --zero=1 --dp=4 --activation=flash
has_line "^memory per GPU \(ZeRO 1, activations 'flash'\): non-MoE 7 GB, MoE 14 GB, "
has_line "activations 1\.142 GB"
has_line "total [0-9.]* GB; data-parallel copies 4$"
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --tp=1 --ep=1 --seq=4096 --hidden=8192 --params-dense=1G \
    --params-moe=2G --layers=1 --heads=64 --zero=1 --dp=4 --activation=flash --json
has_line '"memory": \{"zero": 1, "dp": 4, "activation": "flash", "non_moe": 7000000000, '
# at --dp 1 (the default) ZeRO 1 keeps all 16 bytes: 16 GB and 32 GB
# shellcheck disable=SC2086
expect_exit 0 cm monta $M --tp=1 --ep=1 --seq=4096 --hidden=8192 --params-dense=1G \
    --params-moe=2G --layers=1 --heads=64 --zero=1
has_line 'non-MoE 16 GB, MoE 32 GB'
end

begin "mpmoe: launch overhead per micro-batch, from an option and from a topology"
# 1 node of 2 GPUs, 1 GB/s, 1 TFLOP/s, n = 4 micro-batches of 1000 tokens: dispatch 0.5 ms +
# 1 ms launch, GEMMs 8 ms + 1 ms; S4 forward with alpha(comm, comp) 0.5:
# 1.5 + max(3, 9) + 2 max(6, 9) + max(3, 9) + 1.5 = 39 ms; backward: dispatch re-sent (3 ms),
# GEMMs 16 + 1 + 4 (re-computed) = 21 ms: 3 + 21 + 2 x 21 + 21 + 1.5 = 88.5 ms
P="--tokens=4000 --hidden=1000 --ffn=2000 --experts=2 --elem-bytes=1 --partitions=4
   --reuse=S4 --alpha=comm,comp=0.5"
# shellcheck disable=SC2086
expect_exit 0 cm mpmoe $P --gpus-per-node=2 --bw-intra=1G --bw-host=0.5G --flops=1T \
    --launch-overhead=1ms
has_line '^ +4 S4 +1/1 +39\.0000 +88\.5000 +127\.5000 '
cp "$T/out" "$T/opt.out"
cat >"$T/m.topo" <<'TOPO'
topology m
nodes 1
gpus-per-node 2
link intra bandwidth 1 GB/s
link host bandwidth 0.5 GB/s
flops 1 TFLOP/s
launch-overhead 1 ms
TOPO
# shellcheck disable=SC2086
expect_exit 0 cm mpmoe $P --topology="$T/m.topo"
grep -E '^ +4 S4' "$T/out" >"$T/a" || fail "no S4 row"
grep -E '^ +4 S4' "$T/opt.out" >"$T/b"
same_file "$T/a" "$T/b" "launch overhead from the topology and from the option disagree"
# a compute curve given on the command line: 0.5 at every size doubles the GEMMs
# (forward 1.5 + max(3, 17) + 2 x 17 + 17 + 1.5 = 71 ms)
# shellcheck disable=SC2086
expect_exit 0 cm mpmoe $P --topology="$T/m.topo" --compute-eff=0.5
has_line '^ +4 S4 +1/1 +71\.0000 '
end

begin "monta, mpmoe: bad latencies and curves"
# shellcheck disable=SC2086
expect_exit 2 cm monta $M --latency-inter=5parsecs
expect_tool_usage moe-costmodel monta
grep -q "invalid latency '5parsecs'" "$T/err" || fail "no message on the latency"
# shellcheck disable=SC2086
expect_exit 2 cm monta $M --r3-o3=2
expect_tool_usage moe-costmodel monta
grep -q "invalid efficiency r3 of O3 '2'" "$T/err" || fail "no message on r3-o3"
printf 'nodes 1\ngpus-per-node 2\nefficiency compute 1e9:0.5\nefficiency compute 2e9:0.6\n' \
    >"$T/bad.topo"
# shellcheck disable=SC2086
expect_exit 1 cm mpmoe $P --topology="$T/bad.topo"
expect_tool_err_line moe-costmodel "line 4: second 'efficiency compute' line"
end

finish
