#!/usr/bin/env bash
# End-to-end checks of ./tokenizer and ./data/prepro on the data mirror: round trips (text, CRLF,
# binary garbage, empty file), clear errors (missing vocabulary, bad ids, bad JSONL, empty input),
# Tiny Shakespeare shards byte-identical to llm.c's tinyshakespeare.py run with tiktoken (SHA-256
# below), thread-count independence. Prints one line per check; exit 1 if any failed.
set -u
cd "$(dirname "$0")/.."
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
VOCAB=$DATA_MIRROR/gpt2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() {  # description, command...
    local what=$1; shift
    if "$@" >"$TMP/out.log" 2>&1; then echo "ok   $what"; else echo "FAIL $what"; sed 's/^/     /' "$TMP/out.log" | tail -5; fails=$((fails + 1)); fi
}
expect_error() {  # description, expected stderr substring, command...
    local what=$1 needle=$2; shift 2
    if "$@" >"$TMP/err.out" 2>"$TMP/err.log"; then echo "FAIL $what (exit 0)"; fails=$((fails + 1)); return; fi
    if grep -qF -- "$needle" "$TMP/err.log"; then echo "ok   $what: $(tail -1 "$TMP/err.log")"
    else echo "FAIL $what: stderr lacks '$needle':"; tail -3 "$TMP/err.log"; fails=$((fails + 1)); fi
}
roundtrip() {  # file, extra flags: encode then decode gives the same bytes
    ./tokenizer encode --vocab-dir "$VOCAB" $2 "$1" >"$TMP/ids" && ./tokenizer decode --vocab-dir "$VOCAB" $2 "$TMP/ids" >"$TMP/back" && cmp "$1" "$TMP/back"
}

check "round trip Tiny Shakespeare (ids one per line)" roundtrip "$DATA_MIRROR/tinyshakespeare/input.txt" ""
check "round trip Alice with CRLF (--raw)" roundtrip "$DATA_MIRROR/alice/pg11.txt" --raw
head -c 200000 ./tokenizer >"$TMP/binary.bin"
check "round trip binary file (the tokenizer executable, 200 KB)" roundtrip "$TMP/binary.bin" --raw
printf 'caf\xc3 \xff\xfe ok\x80' >"$TMP/invalid.txt"
check "round trip invalid UTF-8" roundtrip "$TMP/invalid.txt" ""
: >"$TMP/empty.txt"
check "empty file encodes to nothing" bash -c "./tokenizer encode --vocab-dir '$VOCAB' '$TMP/empty.txt' | cmp - /dev/null"
check "stdin works and -j 1 == -j 4" bash -c "cmp <(./tokenizer encode --vocab-dir '$VOCAB' -j 1 <'$DATA_MIRROR/alice/pg11.txt') <(./tokenizer encode --vocab-dir '$VOCAB' -j 4 '$DATA_MIRROR/alice/pg11.txt')"
check "ids of 'Hello world' = tiktoken's 15496 995" bash -c "[ \"\$(printf 'Hello world' | ./tokenizer encode --vocab-dir '$VOCAB' | tr '\n' ' ')\" = '15496 995 ' ]"
check "--allow-special maps <|endoftext|> to 50256" bash -c "[ \"\$(printf 'a<|endoftext|>' | ./tokenizer encode --allow-special --vocab-dir '$VOCAB' | tr '\n' ' ')\" = '64 50256 ' ]"
check "export .bin, decode with --bin" bash -c "./tokenizer export --vocab-dir '$VOCAB' -o '$TMP/tok.bin' && ./tokenizer encode --vocab-dir '$VOCAB' '$DATA_MIRROR/alice/pg11.txt' | ./tokenizer decode --bin '$TMP/tok.bin' | cmp - '$DATA_MIRROR/alice/pg11.txt'"
expect_error "missing vocabulary" "error: /nonexistent/encoder.json: cannot open" ./tokenizer encode --vocab-dir /nonexistent "$TMP/empty.txt"
expect_error "missing input file" "$TMP/nope.txt: cannot open" ./tokenizer encode --vocab-dir "$VOCAB" "$TMP/nope.txt"
expect_error "id outside the vocabulary" "token id 50257 at position 1 is outside the vocabulary" bash -c "printf '1 50257\n' | ./tokenizer decode --vocab-dir '$VOCAB'"
expect_error "not an id" "expected a token id" bash -c "printf '1 x\n' | ./tokenizer decode --vocab-dir '$VOCAB'"
expect_error "odd --raw length" "odd number of bytes" bash -c "printf 'abc' | ./tokenizer decode --raw --vocab-dir '$VOCAB'"
expect_error "unknown option" "unknown option '--bogus'" ./tokenizer encode --bogus

# Tiny Shakespeare as llm.c's tinyshakespeare.py makes it (tiktoken ids; SHA-256 of the shard files).
check "Tiny Shakespeare shards = llm.c + tiktoken" bash -c "
    ./data/prepro --vocab-dir '$VOCAB' --split-blank-lines --val-tokens 32768 -o '$TMP/ts' '$DATA_MIRROR/tinyshakespeare/input.txt' 2>/dev/null &&
    echo 'fe99db720dc7c83e694806d4e047a952909411da1daccde4ccc2e55f40882a62  $TMP/ts_val_000000.bin' | sha256sum -c --status &&
    echo '8a70606be574040c26d225694f5f9759973b419852d22f7fe5c118e1b359dcc8  $TMP/ts_train_000000.bin' | sha256sum -c --status"
check "prepro output independent of threads and shard size splits exactly" bash -c "
    ./data/prepro --vocab-dir '$VOCAB' --split-blank-lines --val-fraction 0.1 --shard-tokens 100000 -j 1 -o '$TMP/a' '$DATA_MIRROR/tinyshakespeare/input.txt' '$DATA_MIRROR/alice' 2>/dev/null &&
    ./data/prepro --vocab-dir '$VOCAB' --split-blank-lines --val-fraction 0.1 --shard-tokens 100000 -j 4 -o '$TMP/b' '$DATA_MIRROR/tinyshakespeare/input.txt' '$DATA_MIRROR/alice' 2>/dev/null &&
    cd '$TMP' && for f in a_*.bin; do cmp \"\$f\" \"b_\${f#a_}\" || exit 1; done &&
    [ \$(ls a_train_*.bin | wc -l) -ge 3 ] && [ \$(ls b_*.bin | wc -l) = \$(ls a_*.bin | wc -l) ] && [ -f a_val_000000.bin ]"
printf '{"id": 1, "text": "Hello world"}\n\n{"meta": {"x": [1, 2.5e3, null]}, "text": "caf\\u00e9 \\ud83d\\udc4d"}\n' >"$TMP/docs.jsonl"
check "JSONL: <|endoftext|> before each document, escapes decoded" bash -c "
    ./data/prepro --vocab-dir '$VOCAB' -o '$TMP/j' '$TMP/docs.jsonl' 2>/dev/null &&
    [ \"\$(tail -c +1025 '$TMP/j_train_000000.bin' | ./tokenizer decode --raw --vocab-dir '$VOCAB')\" = \"\$(printf '<|endoftext|>Hello world<|endoftext|>caf\xc3\xa9 \xf0\x9f\x91\x8d')\" ]"
printf '{"text": "ok"}\n{"text": "bad\n' >"$TMP/bad.jsonl"
expect_error "bad JSONL names file and line" "bad.jsonl: line 2: invalid JSON" ./data/prepro --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/bad.jsonl"
printf '{"title": "no text"}\n' >"$TMP/notext.jsonl"
expect_error "JSONL without text field" "line 1 has no \"text\" string field" ./data/prepro --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/notext.jsonl"
expect_error "empty input" "no documents" ./data/prepro --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/empty.txt"
expect_error "prepro missing vocabulary" "/nonexistent/encoder.json: cannot open" ./data/prepro --vocab-dir /nonexistent -o "$TMP/x" "$TMP/empty.txt"

echo "tokenizer tools: $fails failed"
[ "$fails" -eq 0 ]
