#!/usr/bin/env bash
# `make data`: every data file the project and its tests read, in one command:
#   1. the GPT-2 tokenizer files, Tiny Shakespeare and Alice in Wonderland (the tests' second corpus,
#      CRLF, plus its LF copy made with tr -d '\r'), from their canonical public URLs when online, else
#      from the local mirror $DATA_MIRROR (default ../shared/data), into data/cache/; every file is
#      checked by SHA-256 (the sources and hashes are those of ../shared/data/SOURCES.md);
#   2. gpt2_tokenizer.bin (llm.c tokenizer file, for decoding in train_gpt2cu);
#   3. data/tinyshakespeare/tiny_shakespeare_{val,train}.bin: documents split at blank lines, each
#      preceded by <|endoftext|>, val = the first 32,768 tokens (as llm.c's tinyshakespeare.py does).
# Generated files are never committed (.gitignore). Set OFFLINE=1 to skip the network. The tests read
# $DATA_MIRROR, else data/cache (tests/cli/test_tokenizer_tools.sh, tests/unit/test_bpe_tokenizer.cpp).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
CACHE=data/cache
OUT=data/tinyshakespeare

have() {  # file, sha256: the file is there with that content
    [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status
}

fetch() {  # url, mirror path (relative to DATA_MIRROR), destination, sha256
    local url=$1 mirror=$2 dest=$3 sha=$4
    mkdir -p "$(dirname "$dest")"
    if have "$dest" "$sha"; then echo "have $dest"; return; fi
    if [ "${OFFLINE:-0}" != 1 ] && curl -fsSL --connect-timeout 5 --max-time 120 -o "$dest.part" "$url" 2>/dev/null \
        && have "$dest.part" "$sha"; then
        mv "$dest.part" "$dest"; echo "downloaded $url"; return
    fi
    rm -f "$dest.part"
    if have "$DATA_MIRROR/$mirror" "$sha"; then
        cp "$DATA_MIRROR/$mirror" "$dest"; echo "copied $DATA_MIRROR/$mirror (offline mirror)"; return
    fi
    echo "error: $dest: cannot get it: $url unreachable or wrong checksum, and $DATA_MIRROR/$mirror missing or wrong checksum (set DATA_MIRROR=DIR to a copy of the data)" >&2
    exit 1
}

GPT2_URL=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main
fetch "$GPT2_URL/encoder.json" gpt2/encoder.json "$CACHE/gpt2/encoder.json" \
    196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
fetch "$GPT2_URL/vocab.bpe" gpt2/vocab.bpe "$CACHE/gpt2/vocab.bpe" \
    1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
fetch https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt \
    tinyshakespeare/input.txt "$CACHE/tinyshakespeare/input.txt" \
    86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
# Alice's Adventures in Wonderland (Project Gutenberg #11 without its header and footer; public domain).
fetch https://raw.githubusercontent.com/bryceAebi/MarkovRandomText/786dea0e34589e0ad411f0f70582faf61c3275f5/pg11.txt \
    alice/pg11.txt "$CACHE/alice/pg11.txt" \
    cd538212019554ca78470d15273714f9e571cc7aea277a9672dfc9f1a657e273
ALICE_LF_SHA=fe4fd37d799f62e8d00461e69dbd56885bc28ab61ec28bb9254d87aab97fdb8f
if have "$CACHE/alice/pg11_lf.txt" $ALICE_LF_SHA; then echo "have $CACHE/alice/pg11_lf.txt"
else
    tr -d '\r' <"$CACHE/alice/pg11.txt" >"$CACHE/alice/pg11_lf.txt.part"
    have "$CACHE/alice/pg11_lf.txt.part" $ALICE_LF_SHA ||
        { echo "error: $CACHE/alice/pg11_lf.txt: wrong checksum after tr -d '\\r'" >&2; exit 1; }
    mv "$CACHE/alice/pg11_lf.txt.part" "$CACHE/alice/pg11_lf.txt"; echo "made $CACHE/alice/pg11_lf.txt (tr -d '\\r')"
fi

make -s tokenizer data/prepro  # make decides whether they are stale
./tokenizer export --vocab-dir "$CACHE/gpt2" -o gpt2_tokenizer.bin
./data/prepro --vocab-dir "$CACHE/gpt2" --split-blank-lines --val-tokens 32768 \
    -o "$OUT/tiny_shakespeare" "$CACHE/tinyshakespeare/input.txt"
# One shard per split: keep llm.c's file names.
mv "$OUT/tiny_shakespeare_val_000000.bin" "$OUT/tiny_shakespeare_val.bin"
mv "$OUT/tiny_shakespeare_train_000000.bin" "$OUT/tiny_shakespeare_train.bin"
ls -l gpt2_tokenizer.bin "$OUT"/tiny_shakespeare_{val,train}.bin
