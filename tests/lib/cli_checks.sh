# Shared by the command-line tool checks (tests/cli/test_tokenizer_tools.sh, test_gpt2_convert.sh, ...), sourced
# after they set TMP (a scratch directory) and fails=0. Each check is a function; CHECKS lists them as
# "function|description".
#   check DESCRIPTION COMMAND...     runs it, prints "ok   ..." or "FAIL ..." with the output's tail, counts failures
#   one_line TEXT NEEDLE             TEXT is one line holding NEEDLE (a tool's bad-input message; use inside check)
#   self_check "VAR..." [EXEMPT...]  runs every check again with each VAR (the variables naming the tools) pointing at
#                                    a stand-in that exits 1, then at one that exits 0 writing nothing, and fails
#                                    unless every check fails then (a check that passes with a broken tool proves
#                                    nothing); EXEMPT checks skip the second stand-in (no output is their right answer)
check() {  # description, command...
    local what=$1; shift
    if "$@" >"$TMP/out.log" 2>&1; then echo "ok   $what"; else echo "FAIL $what"; sed 's/^/     /' "$TMP/out.log" | tail -5; fails=$((fails + 1)); fi
}
one_line() { [ "$(printf '%s\n' "$1" | wc -l)" = 1 ] && grep -q -- "$2" <<<"$1"; }

self_check() {
    local vars=$1 exempt=" ${*:2} " stub entry fn v vacuous=()
    printf '#!/bin/sh\nexit 1\n' >"$TMP/failing_tool"
    printf '#!/bin/sh\nexit 0\n' >"$TMP/silent_tool"
    chmod +x "$TMP/failing_tool" "$TMP/silent_tool"
    for stub in failing_tool silent_tool; do
        for entry in "${CHECKS[@]}"; do
            fn=${entry%%|*}
            [ "$stub" = silent_tool ] && [[ "$exempt" == *" $fn "* ]] && continue
            if (for v in $vars; do printf -v "$v" '%s' "$TMP/$stub"; done; "$fn") >/dev/null 2>&1; then
                vacuous+=("$fn ($stub)")
            fi
        done
    done
    if [ ${#vacuous[@]} -eq 0 ]; then echo "ok   self-check: every check fails when the tools fail or write nothing"
    else echo "FAIL self-check: these checks pass with broken tools: ${vacuous[*]}"; fails=$((fails + 1)); fi
}
