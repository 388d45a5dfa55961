#!/bin/sh
# tests/cli/trace_golden.sh -- moe-trace subcommands on small seeded traces against golden
# stdout + exit status (tests/cli/golden/*.out; UPDATE=1 rewrites them).
#
# The inputs come from `moe-trace gen` with fixed seeds, so these goldens also pin the
# generator's output: a deliberate change of the generator model means regenerating them.

. "$(dirname "$0")/lib.sh"

# name | gen options (the input trace; "-" = none) | command (input file appended)
while IFS='|' read -r name genopts cmd; do
    name=$(echo $name)
    case $name in '' | '#'*) continue ;; esac
    begin "golden $name: moe-trace $(echo $cmd)"
    in=
    if [ "$(echo $genopts)" != - ]; then
        in=$T/in.moet
        if ! moe gen $genopts --no-PG -o "$in" 2>"$T/gen.err" </dev/null; then
            fail "gen $genopts: $(cat "$T/gen.err")"
            end
            continue
        fi
    fi
    run moe $cmd $in </dev/null
    golden "$name"
    case $name in
    *_err) expect_err_line ;;
    *) expect_no_stderr ;;
    esac
    end
done <<'EOF'
# -- view: text view of binary traces
view_basic      | -L 3 -E 8 -k 2 -n 40 -s 4 -S 7       | view --no-PG
view_weights    | -L 2 -E 6 -k 2 -n 24 -s 3 -w -S 3    | view --no-PG
view_e300       | -L 2 -E 300 -k 3 -n 20 -s 2 -S 5 --zipf 0.8| view --no-PG
view_ranks      | -L 2 -E 8 -k 1 -n 32 -s 8 -r 4 --steps 2 -S 12 | view --no-PG
view_header     | -L 4 -E 16 -k 2 -n 16 -s 2 --hidden 4096 --elem-bytes 2 -S 1 | view -H --no-PG
view_noheader   | -L 2 -E 4 -k 2 -n 12 -s 2 -S 2       | view --no-header
view_text_input | -L 2 -E 8 -k 2 -n 16 -s 2 -O t -S 8  | view --no-PG
# -- stats
stats_basic     | -L 4 -E 8 -k 2 -n 2000 -s 10 -r 4 --steps 3 -S 11 | stats
stats_loads     | -L 2 -E 8 -k 2 -n 500 -s 5 --zipf 1.2 -S 2 | stats --loads
stats_uniform   | -L 2 -E 4 -k 1 -n 400 -s 4 --zipf 0 --affinity 0 -S 5 | stats --loads
stats_weights   | -L 3 -E 16 -k 4 -n 300 -s 3 -w -S 6  | stats
# -- head, slice, sample
head_3          | -L 3 -E 8 -k 2 -n 40 -s 4 -S 7       | head -n 3 -O t --no-PG
head_all        | -L 2 -E 8 -k 2 -n 16 -s 2 -S 7       | head -n 1K -O t --no-PG
head_0          | -L 2 -E 8 -k 2 -n 16 -s 2 -S 7       | head -n 0 -O t --no-PG
slice_1_2       | -L 4 -E 8 -k 2 -n 30 -s 3 -S 9       | slice --layers 1-2 -O t --no-PG
slice_last_w    | -L 4 -E 8 -k 2 -n 16 -s 2 -w -S 9    | slice --layers 3 -O t --no-PG
slice_range_err | -L 4 -E 8 -k 2 -n 16 -s 2 -S 9       | slice --layers 3-4 -O t --no-PG
sample_half     | -L 2 -E 8 -k 2 -n 60 -s 6 -S 4       | sample -p 0.5 -O t --no-PG
sample_seed     | -L 2 -E 8 -k 2 -n 60 -s 6 -S 4       | sample -p 0.5 -S 99 -O t --no-PG
sample_n        | -L 2 -E 8 -k 2 -n 60 -s 6 -S 4       | sample -n 5 -O t --no-PG
sample_byseq    | -L 2 -E 8 -k 2 -n 60 -s 6 -S 4       | sample -p 0.5 --by-sequence -O t --no-PG
# -- gen itself, as text
gen_text | - | gen -L 2 -E 8 -k 2 -n 20 -s 2 -r 2 -S 42 -O t --no-PG
gen_text_w | - | gen -L 2 -E 8 -k 2 -n 16 -s 2 -w -S 42 -O t --no-PG
EOF

finish
