#!/usr/bin/env bash
# One command-line style (docs/CLI.md): every built program answers --help with one usage (exit 0, stdout, nothing on
# stderr, its defaults shown) and --version with one line, "<program> <commit>" and, for the CUDA programs, the
# build's precision in parentheses; the commit is the one make baked in (git describe, or "unknown (not a git
# checkout)"). Programs not built here (the CUDA ones without nvcc) are named and skipped.
# Prints one line per check; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # begin_checks, ok, bad, end_checks
begin_checks
case "${PRECISION:-BF16}" in FP32) precision=fp32 ;; *) precision=bf16 ;; esac
COMMIT='([0-9a-f]{7,}(-dirty)?|unknown \(not a git checkout\))'

# program | its name in --version | the precision it prints ("" for host programs) | its usage shows defaults (test_gpt2
# has no option that has one)
PROGRAMS=(
    "./train_gpt2cu|train_gpt2cu|$precision|1"
    "./train_gpt2|train_gpt2|fp32, CPU|1"
    "./generate_gpt2cu|generate_gpt2cu|$precision|1"
    "./serve_gpt2cu|serve_gpt2cu|$precision|1"
    "./test_gpt2|test_gpt2||0"
    "./test_gpt2cu|test_gpt2cu|$precision|1"
    "./gpt2_convert|gpt2_convert||1"
    "./tokenizer|tokenizer||1"
    "./data/prepro|data/prepro||1"
    "./data/hellaswag|data/hellaswag||1"
)
skipped=()
for entry in "${PROGRAMS[@]}"; do
    IFS='|' read -r prog name detail defaults <<<"$entry"
    [ -x "$prog" ] || { skipped+=("$prog"); continue; }
    want="^$name $COMMIT${detail:+ \\($detail\\)}\$"
    if "$prog" --help >"$TMP/out" 2>"$TMP/err" && [ ! -s "$TMP/err" ] &&
        [ "$(grep -c '^usage' "$TMP/out")" = 1 ] && { [ "$defaults" = 0 ] || grep -q 'default' "$TMP/out"; }; then
        ok "$prog --help: one usage$([ "$defaults" = 1 ] && echo ", defaults shown")"
    else bad "$prog --help:"; head -3 "$TMP/out" "$TMP/err" | sed 's/^/     /'; fi
    if "$prog" --version >"$TMP/out" 2>"$TMP/err" && [ ! -s "$TMP/err" ] &&
        [ "$(wc -l <"$TMP/out")" = 1 ] && grep -qE "$want" "$TMP/out"; then
        ok "$prog --version: $(cat "$TMP/out")"
    else bad "$prog --version (want /$want/):"; head -3 "$TMP/out" "$TMP/err" | sed 's/^/     /'; fi
done
[ ${#skipped[@]} -gt 0 ] && echo "not built here: ${skipped[*]}"
end_checks "command-line style"
