#!/usr/bin/env bash
# data/hellaswag end to end: the fixture (made-up examples in HellaSwag's schema) converts to the committed golden
# file byte for byte (made by scripts/reference/hellaswag_golden.py, which writes llm.c's layout itself, with npm tiktoken's
# ids), also from .jsonl.gz; the golden script, rerun here (tiktoken if installed, else our ./tokenizer), agrees;
# a file with bad lines gets one line per bad line (file, line, field), a summary, and no output. One line per
# check; exit 1 if any failed. The GPT-2 vocabulary comes from $DATA_MIRROR or data/cache (tests/lib/lib.sh).
set -u
set -o pipefail
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, end_checks
use_test_data
HELLASWAG=./data/hellaswag
FIXTURE=tests/fixtures/hellaswag_fixture.jsonl
GOLDEN=tests/fixtures/hellaswag_fixture.bin
begin_checks
source tests/lib/cli_checks.sh  # check, self_check

c_golden() { rm -f "$TMP/hs.bin" && "$HELLASWAG" --vocab-dir "$VOCAB" -o "$TMP/hs.bin" "$FIXTURE" 2>/dev/null && cmp "$TMP/hs.bin" "$GOLDEN"; }
c_gzip_and_default_name() {
    rm -f "$TMP/val.bin" && gzip -c "$FIXTURE" >"$TMP/val.jsonl.gz" &&
        "$HELLASWAG" --vocab-dir "$VOCAB" "$TMP/val.jsonl.gz" 2>/dev/null && cmp "$TMP/val.bin" "$GOLDEN"
}
c_summary_line() {
    "$HELLASWAG" --vocab-dir "$VOCAB" -o "$TMP/s.bin" "$FIXTURE" 2>"$TMP/s.log" &&
        [ "$(cat "$TMP/s.log")" = "wrote $TMP/s.bin (6 examples, longest example 182 bytes, longest row 47 tokens)" ]
}
# Bad lines 2, 4 and 5 among good ones: one error line each, then the summary; nothing written.
{ sed -n 1p "$FIXTURE"; echo '{"ctx": "c", "label": 7, "endings": ["a", "b", "c", "d"]}'; sed -n 2p "$FIXTURE"
  echo '{"ctx": "c", "label": 0, "endings": ["a", "b", "c"]}'; echo '{"ctx": "c", "endings": ["a", "b", "c", "d"]'; } >"$TMP/bad.jsonl"
c_bad_lines() {
    "$HELLASWAG" --vocab-dir "$VOCAB" -o "$TMP/bad.bin" "$TMP/bad.jsonl" 2>"$TMP/bad.log"
    [ $? = 1 ] && [ ! -e "$TMP/bad.bin" ] && [ "$(cat "$TMP/bad.log")" = "error: $TMP/bad.jsonl: line 2: label: 7 is not in [0, 4)
error: $TMP/bad.jsonl: line 4: endings: 3 endings, expected 4
error: $TMP/bad.jsonl: line 5: invalid JSON at byte 44: expected '}'
error: $TMP/bad.jsonl: 3 bad lines; nothing written" ]
}
CHECKS=(
    "c_golden|the fixture converts to the golden file byte for byte (llm.c's layout, npm tiktoken's ids)"
    "c_gzip_and_default_name|from .jsonl.gz, to INPUT.bin by default: the same bytes"
    "c_summary_line|one line on success: examples, longest example, longest row"
    "c_bad_lines|three bad lines: one line each (line, field), a summary, nothing written"
)
# The golden script itself (the independent path): rerun, it gives the committed bytes.
if command -v python3 >/dev/null; then
    c_golden_script() {
        python3 scripts/reference/hellaswag_golden.py "$FIXTURE" "$TMP/golden.bin" --vocab-dir "$VOCAB" >/dev/null 2>&1 && cmp "$TMP/golden.bin" "$GOLDEN"
    }
    which=ours; python3 -c "import tiktoken" 2>/dev/null && which=tiktoken
    check "scripts/reference/hellaswag_golden.py (token ids from $which) remakes the golden file" c_golden_script
else echo "skip scripts/reference/hellaswag_golden.py (no python3)"; fi
for entry in "${CHECKS[@]}"; do check "${entry#*|}" "${entry%%|*}"; done

expect_error() {  # description, expected substring, command...: exit non-zero, stderr one line "error: ..."
    local what=$1 needle=$2; shift 2
    if "$@" >"$TMP/err.out" 2>"$TMP/err.log"; then echo "FAIL $what (exit 0)"; fails=$((fails + 1)); return; fi
    if [ "$(wc -l <"$TMP/err.log")" = 1 ] && grep -q '^error: ' "$TMP/err.log" && grep -qF -- "$needle" "$TMP/err.log"; then
        echo "ok   $what: $(cat "$TMP/err.log")"
    else echo "FAIL $what: stderr is not one line 'error: ...$needle...':"; tail -5 "$TMP/err.log"; fails=$((fails + 1)); fi
}
: >"$TMP/empty.jsonl"
expect_error "no INPUT" "INPUT: missing" "$HELLASWAG" --vocab-dir "$VOCAB"
expect_error "empty file" "empty.jsonl: no examples (the file is empty)" "$HELLASWAG" --vocab-dir "$VOCAB" "$TMP/empty.jsonl"
cp "$FIXTURE" "$TMP/plain.jsonl.gz"
expect_error "a .gz name over plain JSONL" "plain.jsonl.gz: is named .gz but is not gzip data" "$HELLASWAG" --vocab-dir "$VOCAB" "$TMP/plain.jsonl.gz"

# scripts/tools/hellaswag_from_text.py (the GPU checks' and the FP8 quality runs' eval file): 40 examples from a made-up
# text, the same for the same seed, each with four endings of which the labelled one follows its context; converted
for i in $(seq 1 60); do echo "line number $i of the made-up text"; done >"$TMP/text.txt"
python3 scripts/tools/hellaswag_from_text.py "$TMP/text.txt" 40 7 "$TMP/made.jsonl" &&
    python3 scripts/tools/hellaswag_from_text.py "$TMP/text.txt" 40 7 "$TMP/made2.jsonl"
if python3 - "$TMP/made.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 40
for r in rows:
    last = int(r["ctx"].split()[-5])  # "line number N of the made-up text": N of its last line
    assert len(r["endings"]) == 4 and r["endings"][r["label"]] == f"line number {last + 1} of the made-up text", r
PY
then ok "made examples: 40, four endings, the labelled one the next line"; else bad "made examples"; fi
cmp -s "$TMP/made.jsonl" "$TMP/made2.jsonl" && ok "made examples: the same for the same seed" || bad "made examples differ"
"$HELLASWAG" --vocab-dir "$VOCAB" -o "$TMP/made.bin" "$TMP/made.jsonl" >"$TMP/made.log" 2>&1 &&
    grep -q '(40 examples' "$TMP/made.log" && ok "made examples convert" || { bad "made examples convert"; cat "$TMP/made.log"; }

self_check "HELLASWAG"
end_checks "hellaswag converter"
