#!/bin/sh
# tests/cli/completion.sh -- the bash completion (share/bash-completion/moeflow) completes
# commands, options and the choices an option's --help lists, from the tools' own --help.

. "$(dirname "$0")/lib.sh"

have bash || { echo "bash not found"; exit 77; }
COMP=$top_srcdir/share/bash-completion/moeflow

# complete LINE...: what the completion offers for each command line (cursor at its end), one
# "LINE -> WORDS" line each, from a bash that knows only the tools in $MOE_BIN.
complete_lines() {
    PATH=$MOE_BIN:$PATH bash -c '
        . "$1" || exit 1
        shift
        cd "$0" || exit 1
        for line in "$@"; do
            COMP_LINE=$line COMP_POINT=${#line} COMPREPLY=()
            _moeflow
            printf "%s -> %s\n" "$line" "$(printf "%s\n" "${COMPREPLY[@]}" | LC_ALL=C sort | tr "\n" " ")"
        done' "$T/cwd" "$COMP" "$@"
}

mkdir -p "$T/cwd"
: >"$T/cwd/run.moet"
: >"$T/cwd/fit.moep"

begin "commands, options and listed choices"
complete_lines "moe-trace " "moe-trace im" "moe-trace import --form" "moe-trace import --format=me" \
    "moe-place fit --method=" "moe-affinity --kernel=" \
    "moe-costmodel sim" "moe-affinity co" "moe-trace stats r" "moe-place eval --placement=f" \
    >"$T/got" 2>"$T/err"
expect_no_stderr
cat >"$T/want" <<'WANT'
moe-trace  -> cat gen head import sample slice split stats view 
moe-trace im -> import 
moe-trace import --form -> --format= 
moe-trace import --format=me -> megatron 
moe-place fit --method= -> affinity balanced contiguous exflow random round-robin 
moe-affinity --kernel= -> auto avx2 avx512 scalar 
moe-costmodel sim -> simulate 
moe-affinity co -> compare converge 
moe-trace stats r -> run.moet 
moe-place eval --placement=f -> fit.moep 
WANT
same_file "$T/want" "$T/got" "completions"
end

begin "moe-run: options and choices"
if [ -x "$MOE_BIN/moe-run" ]; then
    complete_lines "moe-run --mode=h" "moe-run --dtype=" "moe-run --tokens-p" >"$T/got"
    printf '%s\n' "moe-run --mode=h -> hierarchical " "moe-run --dtype= -> bf16 fp16 fp32 " \
        "moe-run --tokens-p -> --tokens-per-rank= " >"$T/want"
    same_file "$T/want" "$T/got" "moe-run completions"
else
    skip_case "moe-run not built (no MPI)"
fi
end

begin "every option of every command is offered"
for tool in moe-trace moe-place moe-costmodel; do
    for cmd in $("$MOE_BIN/$tool" --help | awk '/^Commands:/ { t = 1; next } t && /^  [a-z]/ { print $1 } t && /^$/ { t = 0 }'); do
        want=$("$MOE_BIN/$tool" "$cmd" --help | grep -o -- '--[a-zA-Z0-9][a-zA-Z0-9-]*' | sort -u | tr '\n' ' ')
        got=$(complete_lines "$tool $cmd --" | sed 's/^.* -> //; s/=//g' | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
        expect_eq "$got" "$want" "options of $tool $cmd"
    done
done
end

finish
