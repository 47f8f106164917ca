#!/usr/bin/env bash
# End-to-end checks of ./tokenizer and ./data/prepro on the data mirror (or data/cache): round trips (text, CRLF,
# binary garbage, empty file), clear errors (missing vocabulary, bad ids, bad JSONL, empty input),
# Tiny Shakespeare shards byte-identical to llm.c's tinyshakespeare.py run with tiktoken (SHA-256
# below), thread-count independence. Prints one line per check; exit 1 if any failed.
#
# Every check is a function that must fail when the tools fail: each checks the exit status of every
# command it runs (pipefail) and never compares two outputs that could both be empty. The self-check
# at the end runs every check against stand-in tools that fail, or succeed with no output, and
# requires every check to fail.
set -u
set -o pipefail
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, expect_error, end_checks
use_test_data
SHAKESPEARE=$DATA/tinyshakespeare/input.txt
ALICE=$DATA/alice/pg11.txt
TOK=./tokenizer
PREPRO=./data/prepro
begin_checks
source tests/lib/cli_checks.sh  # check, self_check
roundtrip() {  # file, extra flags: encode then decode gives the same bytes (and some ids in between)
    "$TOK" encode --vocab-dir "$VOCAB" $2 "$1" >"$TMP/ids" && [ -s "$TMP/ids" ] &&
        "$TOK" decode --vocab-dir "$VOCAB" $2 "$TMP/ids" >"$TMP/back" && cmp "$1" "$TMP/back"
}

# ---- the checks (each one a function, so the self-check below can run it against broken tools)
head -c 200000 ./tokenizer >"$TMP/binary.bin"
printf 'caf\xc3 \xff\xfe ok\x80' >"$TMP/invalid.txt"
: >"$TMP/empty.txt"
printf '{"id": 1, "text": "Hello world"}\n\n{"meta": {"x": [1, 2.5e3, null]}, "text": "caf\\u00e9 \\ud83d\\udc4d"}\n' >"$TMP/docs.jsonl"

c_roundtrip_shakespeare() { roundtrip "$SHAKESPEARE" ""; }
c_roundtrip_alice_raw() { roundtrip "$ALICE" --raw; }
c_roundtrip_binary() { roundtrip "$TMP/binary.bin" --raw; }
c_roundtrip_invalid_utf8() { roundtrip "$TMP/invalid.txt" ""; }
c_empty_file() {  # exit 0 and no output (the one check where empty output is the right answer)
    "$TOK" encode --vocab-dir "$VOCAB" "$TMP/empty.txt" >"$TMP/empty.ids" && [ ! -s "$TMP/empty.ids" ]
}
c_stdin_and_threads() {
    "$TOK" encode --vocab-dir "$VOCAB" -j 1 <"$ALICE" >"$TMP/j1" &&
        "$TOK" encode --vocab-dir "$VOCAB" -j 4 "$ALICE" >"$TMP/j4" && [ -s "$TMP/j1" ] && cmp "$TMP/j1" "$TMP/j4"
}
c_hello_world() { [ "$(printf 'Hello world' | "$TOK" encode --vocab-dir "$VOCAB" | tr '\n' ' ')" = '15496 995 ' ]; }
c_allow_special() {
    [ "$(printf 'a<|endoftext|>' | "$TOK" encode --allow-special --vocab-dir "$VOCAB" | tr '\n' ' ')" = '64 50256 ' ]
}
c_export_bin() {
    "$TOK" export --vocab-dir "$VOCAB" -o "$TMP/tok.bin" && [ -s "$TMP/tok.bin" ] &&
        "$TOK" encode --vocab-dir "$VOCAB" "$ALICE" | "$TOK" decode --bin "$TMP/tok.bin" | cmp - "$ALICE"
}
# Tiny Shakespeare as llm.c's tinyshakespeare.py makes it (tiktoken ids; SHA-256 of the shard files).
c_shakespeare_shards() {
    rm -f "$TMP"/ts_*
    "$PREPRO" --vocab-dir "$VOCAB" --split-blank-lines --val-tokens 32768 -o "$TMP/ts" "$SHAKESPEARE" 2>/dev/null &&
        echo "fe99db720dc7c83e694806d4e047a952909411da1daccde4ccc2e55f40882a62  $TMP/ts_val_000000.bin" | sha256sum -c --status &&
        echo "8a70606be574040c26d225694f5f9759973b419852d22f7fe5c118e1b359dcc8  $TMP/ts_train_000000.bin" | sha256sum -c --status
}
c_prepro_threads() (
    rm -f "$TMP"/a_* "$TMP"/b_*
    for j in 1 4; do
        o=$([ $j = 1 ] && echo a || echo b)
        "$PREPRO" --vocab-dir "$VOCAB" --split-blank-lines --val-fraction 0.1 --shard-tokens 100000 -j $j -o "$TMP/$o" \
            "$SHAKESPEARE" "$DATA/alice" 2>/dev/null || exit 1
    done
    cd "$TMP" && [ -f a_val_000000.bin ] && [ "$(ls a_train_*.bin | wc -l)" -ge 3 ] &&
        [ "$(ls b_*.bin | wc -l)" = "$(ls a_*.bin | wc -l)" ] || exit 1
    for f in a_*.bin; do cmp "$f" "b_${f#a_}" || exit 1; done
)
# decode escapes control characters and invalid UTF-8 as \xNN with --escape, and by default on a
# terminal (script(1) gives it one); --bytes and a pipe get the exact bytes.
printf 'a\x1b[2Jb\xc2\x9b\xe2\x80\x99\xff\tz' >"$TMP/controls.txt"
c_decode_escape() {
    "$TOK" encode --vocab-dir "$VOCAB" "$TMP/controls.txt" >"$TMP/controls.ids" && [ -s "$TMP/controls.ids" ] &&
        "$TOK" decode --escape --vocab-dir "$VOCAB" "$TMP/controls.ids" >"$TMP/controls.esc" &&
        [ "$(cat "$TMP/controls.esc")" = "$(printf 'a\\x1B[2Jb\\xC2\\x9B\xe2\x80\x99\\xFF\tz')" ]
}
c_decode_terminal() {
    "$TOK" encode --vocab-dir "$VOCAB" "$TMP/controls.txt" >"$TMP/controls.ids" && [ -s "$TMP/controls.ids" ] &&
        script -qec "$TOK decode --vocab-dir '$VOCAB' '$TMP/controls.ids'" /dev/null >"$TMP/tty.out" &&
        [ "$(cat "$TMP/tty.out")" = "$(printf 'a\\x1B[2Jb\\xC2\\x9B\xe2\x80\x99\\xFF\tz')" ] &&
        script -qec "$TOK decode --bytes --vocab-dir '$VOCAB' '$TMP/controls.ids'" /dev/null >"$TMP/tty.out" &&
        cmp "$TMP/tty.out" "$TMP/controls.txt"
}
c_jsonl() {
    rm -f "$TMP"/j_*
    "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/j" "$TMP/docs.jsonl" 2>/dev/null &&
        tail -c +1025 "$TMP/j_train_000000.bin" | "$TOK" decode --raw --vocab-dir "$VOCAB" >"$TMP/j.txt" &&
        [ "$(cat "$TMP/j.txt")" = "$(printf '<|endoftext|>Hello world<|endoftext|>caf\xc3\xa9 \xf0\x9f\x91\x8d')" ]
}
# The tools read our own files: decode takes a shard (its header checked and skipped; a file or a pipe) and gives
# the raw ids' text; info prints its header and what reading every token finds.
c_decode_shard() {
    rm -f "$TMP"/ds_*
    "$PREPRO" --vocab-dir "$VOCAB" --split-blank-lines --val-tokens 32768 -o "$TMP/ds" "$SHAKESPEARE" 2>/dev/null &&
        "$TOK" decode --vocab-dir "$VOCAB" "$TMP/ds_val_000000.bin" >"$TMP/ds.txt" &&
        "$TOK" decode --vocab-dir "$VOCAB" <"$TMP/ds_val_000000.bin" | cmp - "$TMP/ds.txt" &&
        tail -c +1025 "$TMP/ds_val_000000.bin" | "$TOK" decode --raw --vocab-dir "$VOCAB" | cmp - "$TMP/ds.txt" &&
        [ "$(head -c 26 "$TMP/ds.txt")" = "<|endoftext|>First Citizen" ]
}
c_info_shard() {
    rm -f "$TMP"/ds_*
    "$PREPRO" --vocab-dir "$VOCAB" --split-blank-lines --val-tokens 32768 -o "$TMP/ds" "$SHAKESPEARE" 2>/dev/null &&
        [ "$("$TOK" info "$TMP/ds_val_000000.bin")" = "$TMP/ds_val_000000.bin: header: magic 20240520 (data shard), version 1, 32768 tokens; 66560 bytes, as the header says; tokens read: 32768, largest id 50256" ]
}

# Where prepro writes: the default prefix data/out/data (its directories are made), a rerun into a prefix
# leaves exactly its own shards there, a failed run leaves the prefix as it was.
c_prepro_default_prefix() (
    prepro=$(cd "$(dirname "$PREPRO")" && pwd)/$(basename "$PREPRO")
    rm -rf "$TMP/cwd" && mkdir "$TMP/cwd" && cd "$TMP/cwd" &&
        "$prepro" --vocab-dir "$VOCAB" "$SHAKESPEARE" 2>/dev/null &&
        [ -s data/out/data_train_000000.bin ] && [ "$(ls data/out)" = data_train_000000.bin ]
)
c_prepro_rerun_replaces_shards() (
    rm -rf "$TMP/re" "$TMP/fresh" && mkdir "$TMP/fresh" || exit 1
    "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 100000 --val-tokens 1000 -o "$TMP/re/p" "$SHAKESPEARE" 2>/dev/null &&
        [ "$(ls "$TMP/re" | wc -l)" = 5 ] &&
        "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 200000 -o "$TMP/re/p" "$SHAKESPEARE" 2>/dev/null &&
        "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 200000 -o "$TMP/fresh/p" "$SHAKESPEARE" 2>/dev/null &&
        [ "$(ls "$TMP/re")" = "$(printf 'p_train_000000.bin\np_train_000001.bin')" ] && diff -r "$TMP/re" "$TMP/fresh"
)
c_prepro_failed_run_leaves_prefix() (
    rm -rf "$TMP/keep" && printf '{"text": "ok"}\nnot json\n' >"$TMP/late_error.jsonl" || exit 1
    "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 300000 -o "$TMP/keep/p" "$SHAKESPEARE" 2>/dev/null &&
        [ "$(ls "$TMP/keep" | wc -l)" = 2 ] && cp -r "$TMP/keep" "$TMP/keep.before" || exit 1
    # Shakespeare fills 6 shards of 50,000 tokens before the JSONL file fails.
    "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 50000 -o "$TMP/keep/p" "$SHAKESPEARE" "$TMP/late_error.jsonl" 2>"$TMP/late.err"
    [ $? = 1 ] && grep -q 'late_error.jsonl: line 2: invalid JSON' "$TMP/late.err" && diff -r "$TMP/keep.before" "$TMP/keep" &&
        "$PREPRO" --vocab-dir "$VOCAB" --shard-tokens 50000 -o "$TMP/new/dir/p" "$SHAKESPEARE" "$TMP/late_error.jsonl" 2>/dev/null
    [ $? = 1 ] && [ ! -e "$TMP/new" ]
)

CHECKS=(
    "c_roundtrip_shakespeare|round trip Tiny Shakespeare (ids one per line)"
    "c_roundtrip_alice_raw|round trip Alice with CRLF (--raw)"
    "c_roundtrip_binary|round trip binary file (the tokenizer executable, 200 KB)"
    "c_roundtrip_invalid_utf8|round trip invalid UTF-8"
    "c_empty_file|empty file encodes to nothing"
    "c_stdin_and_threads|stdin works and -j 1 == -j 4"
    "c_hello_world|ids of 'Hello world' = tiktoken's 15496 995"
    "c_allow_special|--allow-special maps <|endoftext|> to 50256"
    "c_export_bin|export .bin, decode with --bin"
    "c_shakespeare_shards|Tiny Shakespeare shards = llm.c + tiktoken"
    "c_prepro_threads|prepro output independent of threads and shard size splits exactly"
    "c_jsonl|JSONL: <|endoftext|> before each document, escapes decoded"
    "c_decode_escape|decode --escape shows control characters and invalid UTF-8 as \\xNN"
    "c_decode_shard|decode reads a shard (file or pipe): its header skipped, the text of its ids"
    "c_info_shard|info prints a shard's header, token count and largest id"
    "c_prepro_default_prefix|prepro default prefix data/out/data: its directories are made"
    "c_prepro_rerun_replaces_shards|prepro rerun into a prefix: its shards are exactly the new run's"
    "c_prepro_failed_run_leaves_prefix|prepro run failing midway: the prefix is as before, nothing of the run is left"
)
if command -v script >/dev/null; then CHECKS+=("c_decode_terminal|decode escapes on a terminal, --bytes gives the exact bytes there")
else echo "skip decode on a terminal (no script(1) to make one)"; fi
for entry in "${CHECKS[@]}"; do check "${entry#*|}" "${entry%%|*}"; done

expect_error "missing vocabulary" "error: /nonexistent/encoder.json: cannot open" "$TOK" encode --vocab-dir /nonexistent "$TMP/empty.txt"
expect_error "missing input file" "$TMP/nope.txt: cannot open" "$TOK" encode --vocab-dir "$VOCAB" "$TMP/nope.txt"
expect_error "id outside the vocabulary" "<stdin>: byte 2: token id 50257 is outside the vocabulary (ids 0..50256)" bash -c "printf '1 50257\n' | $TOK decode --vocab-dir '$VOCAB'"
expect_error "--raw id outside the vocabulary" "<stdin>: token id 65535 at position 1 is outside the vocabulary (ids 0..50256)" bash -c "printf 'a\0\377\377' | $TOK decode --raw --vocab-dir '$VOCAB'"
expect_error "not an id" "expected a token id" bash -c "printf '1 x\n' | $TOK decode --vocab-dir '$VOCAB'"
expect_error "odd --raw length" "odd number of bytes" bash -c "printf 'abc' | $TOK decode --raw --vocab-dir '$VOCAB'"
expect_error "id too large for any vocabulary" "byte 0: token id 99999999999 is outside the vocabulary (ids 0..50256)" bash -c "echo 99999999999 | $TOK decode --vocab-dir '$VOCAB'"
expect_error "unknown option" "error: --bogus: unknown option for 'encode'" "$TOK" encode --bogus
if command -v python3 >/dev/null; then
    expect_error "plot_loss.py on a missing log" "error: $TMP/nope.log: cannot read (No such file or directory)" python3 scripts/tools/plot_loss.py "$TMP/nope.log"
else echo "skip plot_loss.py (no python3)"; fi
printf '{"text": "ok"}\n{"text": "bad\n' >"$TMP/bad.jsonl"
expect_error "bad JSONL names file and line" "bad.jsonl: line 2: invalid JSON" "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/bad.jsonl"
# Files whose size asks for more memory than there is (sparse, 4 TiB): one line naming the file and size.
if truncate -s 4T "$TMP/huge.txt" 2>/dev/null; then
    expect_error "encode a 4 TiB file" "huge.txt: needs 4398046511104 bytes (4096.0 GiB) for its contents, more than this machine's memory" \
        "$TOK" encode --vocab-dir "$VOCAB" "$TMP/huge.txt"
    # prepro refuses a file of zeros as binary before reading it; with 64 KiB of text first (past what it looks at),
    # the size is the problem
    expect_error "prepro a 4 TiB file of zeros" "huge.txt: looks binary (a NUL byte at byte 0), not text" \
        "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/huge.txt"
    head -c 65536 /dev/zero | tr '\0' a >"$TMP/huge_text.txt" && truncate -s 4T "$TMP/huge_text.txt"
    expect_error "prepro a 4 TiB file" "huge_text.txt: needs 4398046511104 bytes (4096.0 GiB) for its contents, more than this machine's memory" \
        "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/huge_text.txt"
    "$TOK" export --vocab-dir "$VOCAB" -o "$TMP/huge_tok.bin" 2>/dev/null && truncate -s 1024 "$TMP/huge_tok.bin" && truncate -s 4T "$TMP/huge_tok.bin"
    expect_error "decode --bin with a 4 TiB tokenizer file" "huge_tok.bin: token 0 has length 0 (at byte 1024)" \
        bash -c "echo 1 | $TOK decode --bin '$TMP/huge_tok.bin'"
    rm -f "$TMP/huge.txt" "$TMP/huge_text.txt" "$TMP/huge_tok.bin"
else echo "skip files of 4 TiB (the file system cannot hold a sparse one)"; fi
printf '{"text": "a", "text": "b"}\n{"text": "c"}\n' >"$TMP/dup.jsonl"
expect_error "JSONL key given twice" "dup.jsonl: line 1: key \"text\" appears twice" "$PREPRO" --vocab-dir "$VOCAB" --val-fraction 0.5 -o "$TMP/x" "$TMP/dup.jsonl"
printf '{"title": "no text"}\n' >"$TMP/notext.jsonl"
expect_error "JSONL without text field" "line 1 has no \"text\" string field" "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/notext.jsonl"
expect_error "empty input" "empty.txt: no documents in the input (empty)" "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/empty.txt"
mkdir -p "$TMP/empty_dir/sub"
expect_error "empty input directory" "empty_dir: empty directory (no files below it)" "$PREPRO" --vocab-dir "$VOCAB" -o "$TMP/x" "$TMP/empty_dir"
expect_error "empty train split" "error: --val-tokens: 999999999 takes all 338026 tokens of the input, so the train split would be empty" \
    "$PREPRO" --vocab-dir "$VOCAB" --val-tokens 999999999 -o "$TMP/all_val/p" "$SHAKESPEARE"
check "empty train split writes nothing" test ! -e "$TMP/all_val"
expect_error "--val-tokens out of range" "error: --val-tokens: 99999999999999999999 is out of range (0 to 9223372036854775807)" \
    "$PREPRO" --vocab-dir "$VOCAB" --val-tokens 99999999999999999999 -o "$TMP/x" "$SHAKESPEARE"
head -c 2000 "$TMP/binary.bin" >"$TMP/not_shard.bin"
printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x10\x00\x00\x00' >"$TMP/padded_shard.bin"  # a header's start: 16 tokens promised
head -c 1100 /dev/zero >>"$TMP/padded_shard.bin"
expect_error "info on a file that is not a shard" "not_shard.bin: not a token data shard (magic" "$TOK" info "$TMP/not_shard.bin"
expect_error "info on a shard with trailing bytes" "padded_shard.bin: file is 1112 bytes but its header (16 tokens) implies 1056 (trailing bytes)" "$TOK" info "$TMP/padded_shard.bin"
expect_error "decode a shard with trailing bytes from a pipe" "<stdin>: file is 1112 bytes but its header (16 tokens) implies 1056 (trailing bytes)" \
    sh -c "'$TOK' decode --vocab-dir '$VOCAB' <'$TMP/padded_shard.bin'"
expect_error "info without a file" "FILE: missing (info needs at least one); see tokenizer --help" "$TOK" info
expect_error "prepro missing vocabulary" "/nonexistent/encoder.json: cannot open" "$PREPRO" --vocab-dir /nonexistent -o "$TMP/x" "$TMP/empty.txt"

# Without the data, this suite (and the unit tests) says what is missing in one line, and fails.
c_no_data_is_one_line() {
    DATA_MIRROR="$TMP/no_mirror" TEST_DATA_CACHE="$TMP/no_cache" bash tests/cli/test_tokenizer_tools.sh >"$TMP/nodata.out" 2>&1
    [ $? = 1 ] && [ "$(wc -l <"$TMP/nodata.out")" = 1 ] &&
        grep -qF "error: test data missing: gpt2/encoder.json gpt2/vocab.bpe tinyshakespeare/input.txt alice/pg11.txt alice/pg11_lf.txt (not in DATA_MIRROR=$TMP/no_mirror nor data/cache): run 'make data'" "$TMP/nodata.out"
}
check "no test data: one line saying what is missing and how to get it, and exit 1" c_no_data_is_one_line
# make test says the same in its one line before it builds anything (make -n: nothing would run either way; a
# make of its own, not one of the make test running this)
c_make_test_without_data() {
    ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n test DATA_MIRROR="$TMP/no_mirror" TEST_DATA_CACHE="$TMP/no_cache" >"$TMP/make_nodata.out" 2>&1 &&
        [ "$(wc -l <"$TMP/make_nodata.out")" = 1 ] &&
        grep -qF "error: test data missing: gpt2/encoder.json gpt2/vocab.bpe tinyshakespeare/input.txt alice/pg11.txt alice/pg11_lf.txt (not in DATA_MIRROR=$TMP/no_mirror nor data/cache)" "$TMP/make_nodata.out"
}
check "make test without the test data: that one line, before building" c_make_test_without_data

# scripts/runs/run_tinyshakespeare.sh asks make for the data and the trainer every time (make decides what is
# stale); it used to skip make whenever ./train_gpt2cu existed, however old. It picks the GPU trainer where
# nvidia-smi lists a GPU and nvcc exists, else the CPU trainer, and its first line says which and why. Run in a
# copy of the repository's layout with stand-ins for make, nvidia-smi, nvcc, the trainers and python3 that record
# their calls.
run_script_in_fake_repo() {  # gpu_listed (0|1), expected trainer, expected first-line pattern
    local gpu=$1 trainer=$2 first=$3
    fake=$TMP/fake_repo
    rm -rf "$fake" && mkdir -p "$fake/scripts/runs" "$fake/bin" "$fake/data/tinyshakespeare" || return 1
    cp scripts/runs/run_tinyshakespeare.sh "$fake/scripts/runs/"
    : >"$fake/data/tinyshakespeare/tiny_shakespeare_train.bin"
    printf '#!/bin/sh\necho "make $*" >>"%s/calls"\n' "$fake" >"$fake/bin/make"
    printf '#!/bin/sh\necho "python3 $*" >>"%s/calls"\n' "$fake" >"$fake/bin/python3"
    printf '#!/bin/sh\n[ %s = 1 ] && echo "GPU 0: NVIDIA H100 (UUID: GPU-0)"\nexit 0\n' "$gpu" >"$fake/bin/nvidia-smi"
    printf '#!/bin/sh\nexit 0\n' >"$fake/bin/nvcc"
    for t in train_gpt2cu train_gpt2; do printf '#!/bin/sh\necho "%s" >>"%s/calls"\n' "$t" "$fake" >"$fake/$t"; done
    chmod +x "$fake/bin/"* "$fake/train_gpt2cu" "$fake/train_gpt2"
    PATH="$fake/bin:$PATH" OUTDIR="$fake/out" bash "$fake/scripts/runs/run_tinyshakespeare.sh" >"$fake/out.log" 2>&1 &&
        head -1 "$fake/out.log" | grep -q -- "$first" &&
        grep -qx "make -s data" "$fake/calls" && grep -qx "make -s $trainer" "$fake/calls" && grep -qx "$trainer" "$fake/calls" &&
        [ "$(grep -n "make -s $trainer" "$fake/calls" | head -1 | cut -d: -f1)" -lt "$(grep -nx "$trainer" "$fake/calls" | cut -d: -f1)" ] &&
        grep -q "^python3 scripts/tools/plot_loss.py" "$fake/calls"
}
c_run_script_gpu() { run_script_in_fake_repo 1 train_gpt2cu "^using the GPU trainer (train_gpt2cu): nvidia-smi lists a GPU"; }
c_run_script_cpu() { run_script_in_fake_repo 0 train_gpt2 "^using the CPU trainer (train_gpt2): no GPU: nvidia-smi -L lists none"; }
check "run_tinyshakespeare.sh with a GPU: says so, lets make rebuild train_gpt2cu, then trains and plots" c_run_script_gpu
check "run_tinyshakespeare.sh without a GPU: says so, lets make rebuild train_gpt2, then trains and plots" c_run_script_cpu

# ---- self-check: every check above must fail when ./tokenizer and ./data/prepro are broken (the
# "empty == empty" trap); the empty-file check is exempt from the silent stand-in (no output is its right answer).
self_check "TOK PREPRO" c_empty_file

end_checks "tokenizer tools"
