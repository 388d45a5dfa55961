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
