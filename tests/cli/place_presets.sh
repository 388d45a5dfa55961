#!/bin/sh
# tests/cli/place_presets.sh -- moe-place --topology takes a preset name (share/topologies,
# found through $MOEFLOW_TOPOLOGIES) wherever it takes a topology file, with the same result;
# an unknown name is one clear error.

. "$(dirname "$0")/lib.sh"

MOEFLOW_TOPOLOGIES=$top_srcdir/share/topologies
export MOEFLOW_TOPOLOGIES
TOPO=$MOEFLOW_TOPOLOGIES
mp() { moe_tool moe-place "$@"; }
moe gen -n 300 -s 6 -L 3 -E 16 -k 2 -r 8 --no-PG -o "$T/t8.moet" || exit 99
moe gen -n 300 -s 6 -L 3 -E 16 -k 2 -r 4 --no-PG -o "$T/t4.moet" || exit 99

begin "fit --topology NAME equals fit --topology FILE"
expect_exit 0 mp fit --topology "$TOPO/h100-ndr400.topo" --method balanced --no-PG \
    -o "$T/file.moep" "$T/t8.moet"
expect_exit 0 mp fit --topology h100-ndr400 --method balanced --no-PG -o "$T/name.moep" \
    "$T/t8.moet"
same_file "$T/name.moep" "$T/file.moep" "preset and file disagree"
expect_exit 0 mp fit --topology h100-ndr400.topo --method balanced --no-PG \
    -o "$T/ext.moep" "$T/t8.moet"
same_file "$T/ext.moep" "$T/file.moep" "NAME.topo and file disagree"
end

begin "eval --topology NAME equals eval --topology FILE"
expect_exit 0 mp fit --ranks 4 --method contiguous --no-PG -o "$T/p4.moep" "$T/t4.moet"
expect_exit 0 mp eval --topology "$TOPO/exflow-a100.topo" -o "$T/file.txt" "$T/p4.moep" \
    "$T/t4.moet"
expect_exit 0 mp eval --topology exflow-a100 -o "$T/name.txt" "$T/p4.moep" "$T/t4.moet"
same_file "$T/name.txt" "$T/file.txt" "preset and file disagree"
end

begin "--nodes N: N nodes of a one-node preset, as a file of N nodes says"
sed 's/^nodes 1$/nodes 2/' "$TOPO/dgx-h100.topo" >"$T/h2.topo"
grep -q '^nodes 2$' "$T/h2.topo" || fail "no nodes line to change"
expect_exit 0 mp fit --topology "$T/h2.topo" --method balanced --no-PG -o "$T/f2.moep" \
    "$T/t8.moet"
expect_exit 0 mp fit --topology dgx-h100 --nodes 2 --method balanced --no-PG \
    -o "$T/n2.moep" "$T/t8.moet"
grep -v '^@' "$T/f2.moep" >"$T/f2.body"
grep -v '^@' "$T/n2.moep" >"$T/n2.body"
same_file "$T/n2.body" "$T/f2.body" "--nodes 2 and a two-node file disagree"
grep -q 'ranks:16' "$T/n2.moep" || fail "--nodes 2 of 8 GPUs: not 16 ranks"
expect_exit 0 mp eval --topology "$T/h2.topo" -o "$T/fe.txt" "$T/n2.moep" "$T/t8.moet"
expect_exit 0 mp eval --topology dgx-h100 --nodes 2 -o "$T/ne.txt" "$T/n2.moep" "$T/t8.moet"
same_file "$T/ne.txt" "$T/fe.txt" "eval: --nodes 2 and a two-node file disagree"
expect_exit 1 mp eval --topology dgx-h100 -o "$T/x.txt" "$T/n2.moep" "$T/t8.moet"
expect_exit 2 mp fit --nodes 2 --ranks 16 --method balanced -o "$T/x.moep" "$T/t8.moet"
expect_exit 2 mp fit --topology dgx-h100 --nodes 0 --method balanced -o "$T/x.moep" "$T/t8.moet"
end

begin "an unknown preset or a preset of the wrong size is one error line"
expect_exit 1 mp fit --topology no-such-machine --method contiguous -o "$T/x.moep" \
    "$T/t8.moet"
case $(cat "$T/err") in
"moe-place: cannot open 'no-such-machine': no such file or topology preset"*) ;;
*) fail "unexpected message: $(cat "$T/err")" ;;
esac
expect_no_output "$T/x.moep"
expect_exit 1 mp eval --topology h100-ndr400 "$T/p4.moep" "$T/t4.moet"
expect_eq "$(wc -l <"$T/err" | tr -d ' ')" 1 "stderr lines"
end

finish
