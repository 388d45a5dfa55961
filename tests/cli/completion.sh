#!/bin/sh
# tests/cli/completion.sh -- the bash completion (share/bash-completion/moeflow) completes
# commands, options and the choices an option's --help lists, from the tools' own --help
# (after '=' or as the next word).

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

# issue 38, item 7: choices written otherwise than "a, b or c" (remarks in parentheses, nested
# ones too, a list after other words, codes with their meanings, ranges of widths) and values
# given as the next word, after a long or a short option; a FILE and a two-item phrase are no
# choices.
begin "choices as --help writes them, values as the next word"
complete_lines "moe-trace import --layout=" "moe-trace stats --format=" \
    "moe-place export --format=" "moe-trace view -O " "moe-trace view --output-fmt=" \
    "moe-trace import --dtype=u" "moe-place eval --replica-rule=" \
    "moe-trace import --format sg" "moe-place fit --method r" "moe-trace import --layout L" \
    "moe-place eval --replica-rule s" "moe-place fit --physical-map f" \
    "moe-place fit --loads=r" "moe-costmodel monta --elem-bytes=" "moe-trace stats --format" \
    >"$T/got" 2>"$T/err"
expect_no_stderr
cat >"$T/want" <<'WANT'
moe-trace import --layout= -> LTK TLK 
moe-trace stats --format= -> json sglang text vllm 
moe-place export --format= -> eplb exflow sglang text 
moe-trace view -O  -> b t u z 
moe-trace view --output-fmt= -> b t u z 
moe-trace import --dtype=u -> uint16 uint32 uint64 uint8 
moe-place eval --replica-rule= -> even nearest positional sglang-static 
moe-trace import --format sg -> sglang 
moe-place fit --method r -> random round-robin 
moe-trace import --layout L -> LTK 
moe-place eval --replica-rule s -> sglang-static 
moe-place fit --physical-map f -> fit.moep 
moe-place fit --loads=r -> run.moet 
moe-costmodel monta --elem-bytes= -> fit.moep run.moet 
moe-trace stats --format -> --format= 
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
