#!/usr/bin/env bash
# data/prepro end to end on compressed JSONL and llm.c's FineWeb layout: the same documents as plain .jsonl,
# .jsonl.gz (one member and several) and .jsonl.zst (made here with gzip and zstd) give byte-identical shards,
# for any -j; --text-field; --fineweb-layout's names and split; and one clear line for each input prepro would
# otherwise misread (compressed data under another name, a file of another format named .gz/.zst, binary data,
# JSONL in a .txt, truncated archives). Prints one line per check; exit 1 if any failed. Reads the GPT-2 vocabulary
# and Tiny Shakespeare from $DATA_MIRROR or data/cache (tests/lib/lib.sh).
set -u
set -o pipefail
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, expect_error, end_checks
use_test_data
PREPRO=./data/prepro
begin_checks
source tests/lib/cli_checks.sh  # check, self_check
HAVE_ZSTD=0
command -v zstd >/dev/null && HAVE_ZSTD=1

# The fixture: every non-empty line of Tiny Shakespeare a document, JSON-escaped by sed, with a second field.
sed -e '/^$/d' -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/.*/{"id": 0, "text": "&\\n", "body": "[&]"}/' \
    "$DATA/tinyshakespeare/input.txt" >"$TMP/d.jsonl"
gzip -c "$TMP/d.jsonl" >"$TMP/d.jsonl.gz"
lines=$(wc -l <"$TMP/d.jsonl")
{ head -n $((lines / 3)) "$TMP/d.jsonl" | gzip -c; tail -n +$((lines / 3 + 1)) "$TMP/d.jsonl" | gzip -c; } >"$TMP/members.jsonl.gz"
[ $HAVE_ZSTD = 1 ] && zstd -q -c "$TMP/d.jsonl" >"$TMP/d.jsonl.zst"
# a prepro built without libzstd (its build printed a note) says so in one line: the .zst cases need both
if [ $HAVE_ZSTD = 1 ] && [[ "$("$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/probe/p" "$TMP/d.jsonl.zst" 2>&1 >/dev/null)" == \
        *"this build has no libzstd"* ]]; then
    HAVE_ZSTD=0; ZSTD_WHY="data/prepro was built without libzstd (libzstd-dev)"
fi
rm -rf "$TMP/probe"
FLAGS=(--vocab-dir "$VOCAB" --val-tokens 5000 --shard-tokens 60000)

run() {  # out_dir, flags and inputs...: prepro into out_dir/p, which must then hold at least one shard
    local out=$1; shift
    rm -rf "$out" && "$PREPRO" "$@" -o "$out/p" 2>/dev/null && [ -n "$(ls "$out" 2>/dev/null)" ]
}
c_compressed_same_shards() {
    local inputs=(d.jsonl.gz members.jsonl.gz)
    [ $HAVE_ZSTD = 1 ] && inputs+=(d.jsonl.zst)
    run "$TMP/plain" "${FLAGS[@]}" "$TMP/d.jsonl" && [ "$(ls "$TMP/plain" | wc -l)" -ge 4 ] || return 1
    for f in "${inputs[@]}"; do run "$TMP/o_$f" "${FLAGS[@]}" "$TMP/$f" && diff -r "$TMP/plain" "$TMP/o_$f" || return 1; done
}
c_threads() {
    run "$TMP/j1" "${FLAGS[@]}" -j 1 "$TMP/d.jsonl.gz" && run "$TMP/j2" "${FLAGS[@]}" -j 2 "$TMP/d.jsonl.gz" &&
        run "$TMP/j5" "${FLAGS[@]}" -j 5 "$TMP/d.jsonl.gz" && diff -r "$TMP/j1" "$TMP/j2" && diff -r "$TMP/j1" "$TMP/j5"
}
c_small_batches() {  # many read-ahead batches (1,000 bytes of lines each) against one: the same shards
    run "$TMP/sb" "${FLAGS[@]}" --batch-bytes 1000 -j 2 "$TMP/members.jsonl.gz" && diff -r "$TMP/plain" "$TMP/sb"
}
c_late_error_small_batches() (  # a bad line read ahead while a batch is encoded: one line, nothing written
    { cat "$TMP/d.jsonl"; echo '{"text": 5}'; } | gzip -c >"$TMP/late.jsonl.gz"
    rm -rf "$TMP/late"
    "$PREPRO" "${FLAGS[@]}" --batch-bytes 1000 -o "$TMP/late/p" "$TMP/late.jsonl.gz" 2>"$TMP/late.err"
    [ $? = 1 ] && [ "$(cat "$TMP/late.err")" = "error: $TMP/late.jsonl.gz: line $((lines + 1)): \"text\" is not a string" ] &&
        [ ! -e "$TMP/late" ]
)
c_val_fraction() {  # the split point counts decompressed bytes, so it is the plain file's
    run "$TMP/vf_plain" --vocab-dir "$VOCAB" --val-fraction 0.1 "$TMP/d.jsonl" &&
        run "$TMP/vf_gz" --vocab-dir "$VOCAB" --val-fraction 0.1 "$TMP/d.jsonl.gz" && diff -r "$TMP/vf_plain" "$TMP/vf_gz" &&
        [ -f "$TMP/vf_gz/p_val_000000.bin" ]
}
c_text_field() {  # --text-field body: each document is "[line]"
    run "$TMP/tf" --vocab-dir "$VOCAB" --text-field body "$TMP/d.jsonl.gz" && run "$TMP/tt" --vocab-dir "$VOCAB" "$TMP/d.jsonl.gz" &&
        ! cmp -s "$TMP/tf/p_train_000000.bin" "$TMP/tt/p_train_000000.bin"
}
# llm.c's fineweb.py: shard 0 (the first N tokens) is val, shards 1, 2, ... train, named <name>_{val,train}_NNNNNN.bin;
# their tokens are the one stream of the plain run, cut every N.
c_fineweb_layout() (
    run "$TMP/fw" --vocab-dir "$VOCAB" --fineweb-layout --shard-tokens 60000 "$TMP/d.jsonl.gz" &&
        run "$TMP/all" --vocab-dir "$VOCAB" "$TMP/d.jsonl.gz" || exit 1
    # 363,581 tokens: val 60,000, train 1-5 60,000 each, train 6 the last 3,581
    cd "$TMP/fw" && [ "$(ls | tr '\n' ' ')" = "$(printf 'p_train_%06d.bin ' 1 2 3 4 5 6)p_val_000000.bin " ] || exit 1
    for f in p_val_000000.bin p_train_00000{1,2,3,4,5}.bin; do [ "$(stat -c %s $f)" = $((1024 + 2 * 60000)) ] || exit 1; done
    [ "$(stat -c %s p_train_000006.bin)" = $((1024 + 2 * 3581)) ] || exit 1
    for f in p_val_000000.bin p_train_00000{1,2,3,4,5,6}.bin; do tail -c +1025 $f; done | cmp - <(tail -c +1025 "$TMP/all/p_train_000000.bin")
)
CHECKS=(
    "c_compressed_same_shards|plain .jsonl, .jsonl.gz (one member and two) and .jsonl.zst give byte-identical shards"
    "c_threads|compressed input: -j 1, 2 and 5 give byte-identical shards"
    "c_small_batches|--batch-bytes 1000 (hundreds of batches read ahead) gives the same shards"
    "c_late_error_small_batches|a bad line near the end, read ahead: one error line, nothing written"
    "c_val_fraction|--val-fraction splits a .jsonl.gz where it splits the plain file"
    "c_text_field|--text-field picks another field"
    "c_fineweb_layout|--fineweb-layout: llm.c's names, shard 0 val, N tokens each, the plain run's stream"
)
[ $HAVE_ZSTD = 1 ] || echo "note: ${ZSTD_WHY:-no zstd command here}: the .jsonl.zst input is left out (the unit tests read zstd made by libzstd)"
for entry in "${CHECKS[@]}"; do check "${entry#*|}" "${entry%%|*}"; done

# ---- one clear line instead of tokens
cp "$TMP/d.jsonl.gz" "$TMP/gz.txt"; cp "$TMP/d.jsonl.gz" "$TMP/gz.jsonl"; cp "$TMP/d.jsonl" "$TMP/plain.jsonl.gz"
cp "$TMP/d.jsonl" "$TMP/json.txt"; gzip -c "$DATA/tinyshakespeare/input.txt" >"$TMP/text.txt.gz"
head -c 5000 "$TMP/d.jsonl.gz" >"$TMP/cut.jsonl.gz"; head -c 2000 ./data/prepro >"$TMP/binary.txt"
expect_error "gzip data named .txt" "gz.txt: is gzip-compressed data, but its name does not say so: name it .jsonl.gz" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/gz.txt"
expect_error "gzip data named .jsonl" "gz.jsonl: is gzip-compressed data, but its name does not say so" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/gz.jsonl"
expect_error "plain JSONL named .jsonl.gz" "plain.jsonl.gz: is named .gz but is not gzip data" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/plain.jsonl.gz"
expect_error "compressed text" "text.txt.gz: is compressed text: prepro reads compressed JSONL only" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/text.txt.gz"
expect_error "JSONL in a .txt" "json.txt: looks like JSONL (line 1 is a JSON object with a \"text\" string), not text" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/json.txt"
expect_error "binary data named .txt" "binary.txt: looks binary (a NUL byte at byte" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/binary.txt"
{ head -c 100000 "$DATA/tinyshakespeare/input.txt"; head -c 2000 ./data/prepro; } >"$TMP/late_binary.txt"
expect_error "binary data after the first 64 KiB of a .txt" "late_binary.txt: looks binary (a NUL byte at byte 1000" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/late_binary.txt"
expect_error "truncated .jsonl.gz" "cut.jsonl.gz: truncated gzip data: the file ends inside a member" \
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/cut.jsonl.gz"
expect_error "--text-field missing in a line" "d.jsonl.gz: line 1 has no \"title\" string field" \
    "$PREPRO" --vocab-dir "$VOCAB" --text-field title -o "$TMP/x/p" "$TMP/d.jsonl.gz"
expect_error "--fineweb-layout with a val option" "--val-tokens: give at most one of --val-tokens, --val-fraction, --val-file, --fineweb-layout" \
    "$PREPRO" --vocab-dir "$VOCAB" --fineweb-layout --val-tokens 5 -o "$TMP/x/p" "$TMP/d.jsonl"
expect_error "--fineweb-layout, everything in val" "--fineweb-layout: the input's 363581 tokens fill only the val shard (shard 0 takes the first 100000000, --shard-tokens)" \
    "$PREPRO" --vocab-dir "$VOCAB" --fineweb-layout -o "$TMP/x/p" "$TMP/d.jsonl.gz"
check "the refused runs wrote nothing" test ! -e "$TMP/x"
if [ $HAVE_ZSTD = 1 ]; then
    cp "$TMP/d.jsonl.zst" "$TMP/zst.jsonl"; head -c 5000 "$TMP/d.jsonl.zst" >"$TMP/cut.jsonl.zst"
    expect_error "zstd data named .jsonl" "zst.jsonl: is zstd-compressed data, but its name does not say so: name it .jsonl.zst" \
        "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/zst.jsonl"
    expect_error "truncated .jsonl.zst" "cut.jsonl.zst: truncated zstd data: the file ends inside a frame" \
        "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x/p" "$TMP/cut.jsonl.zst"
fi

self_check "PREPRO"
end_checks "prepro data"
