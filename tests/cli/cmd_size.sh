#!/bin/sh
# tests/cli/cmd_size.sh -- issue 16, acceptance 4: the tools in cmd/ stay thin (parse options,
# call libmoecore, print), at most two thirds of the 5,789 lines they had before the library
# took over their formats and models: 3,859 lines of .c and .h in all. A new tool feature whose
# work belongs in the library fails here first; move the work into lib/ (doc/ARCHITECTURE says
# where) rather than raising the budget. Raised by 16 for issue 38: the model-layer options
# (--model-layers, --first-moe-layer, --moe-layers: parsed and documented in cmd/cli.c) reach
# moe-trace import, stats and slice and moe-place fit and export, each a call into the library,
# and moe-trace import's --physical-map (read by lib/import/import_map.c); by 6 for its
# --pipeline-stages (the join is lib/import/import_stages.c). The tools' shared plumbing,
# libmoetool (cmd/cli.c, cmd/cli.h: options, messages, exit statuses), moved into cmd/ from
# lib/ (issue 44, item 7) and is not counted: it is no tool's feature, and grows with none.
# Raised by 150 for issue 45: moe-place's options --for, --accounting, --node-limit and
# --expert-groups (parsed here, applied by cmd/cli.c's moe_cli_target_apply and the library)
# and its compare subcommand's usage, argument checks and the EPLB baseline's fit call; the
# accounting, its report and the comparison table are lib/acct/acct_deepep.c,
# acct_compare.c and acct_write.c, the fill and the groups lib/place/place_fill.c and
# place_groups.c. Raised by 4 for --nodes on moe-place fit, eval and replay (issue 45 item 4:
# N nodes of the --topology preset, built by the library's moe_topo_* calls). Raised by 33
# for moe-place compare's predicted layer times (issue 45 items 4 and 5): its --nodes,
# --hidden, --ffn and --elem-bytes help lines and the call of the library's
# moe_sim_layer_mean for both sides (the model is lib/cost, the lines lib/acct/acct_compare.c).
# Raised by 7 for moe-costmodel simulate's --accounting and --for (issue 45: their help lines
# and cases; the parsing is cmd/cli.c's, the routes lib/acct's moe_acct_relay), and by 2 for
# the two merged and simulate's DeepEP pricing following --accounting deepep; by 3 for
# moe-run --nodes (issue 45 item 4; the resize is the library's) and eval skipping DeepEP's
# counts it does not report; by 1 for compare asking for them (they are opt-in).
. "$(dirname "$0")/lib.sh"

BUDGET=4081

begin "cmd/ within its line budget ($BUDGET)"
tools() { ls "$top_srcdir"/cmd/*.c "$top_srcdir"/cmd/*.h | grep -v '/cli\.[ch]$'; }
n=$(cat $(tools) | wc -l)
[ "$n" -gt 1000 ] || fail "counted only $n lines in $top_srcdir/cmd: wrong directory?"
if [ "$n" -gt "$BUDGET" ]; then
    fail "cmd/ has $n lines, over the budget of $BUDGET; per file:"
    wc -l $(tools) >&2
fi
end

finish
