#!/usr/bin/env bash
# Tiny Shakespeare for GPT-2, in one command (`make data`):
#   1. the GPT-2 tokenizer files and the text, from their canonical public URLs when online, else
#      from the local mirror $DATA_MIRROR (default ../shared/data); every file is checked by SHA-256;
#   2. gpt2_tokenizer.bin (llm.c tokenizer file, for decoding in train_gpt2cu);
#   3. data/tinyshakespeare/tiny_shakespeare_{val,train}.bin: documents split at blank lines, each
#      preceded by <|endoftext|>, val = the first 32,768 tokens (as llm.c's tinyshakespeare.py does).
# Generated files are never committed (.gitignore). Set OFFLINE=1 to skip the network.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
CACHE=data/cache
OUT=data/tinyshakespeare

fetch() {  # url, mirror path (relative to DATA_MIRROR), destination, sha256
    local url=$1 mirror=$2 dest=$3 sha=$4
    mkdir -p "$(dirname "$dest")"
    if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then
        echo "have $dest"; return
    fi
    if [ "${OFFLINE:-0}" != 1 ] && curl -fsSL --connect-timeout 5 --max-time 120 -o "$dest.part" "$url" 2>/dev/null \
        && echo "$sha  $dest.part" | sha256sum -c --status; then
        mv "$dest.part" "$dest"; echo "downloaded $url"; return
    fi
    rm -f "$dest.part"
    if [ -f "$DATA_MIRROR/$mirror" ] && echo "$sha  $DATA_MIRROR/$mirror" | sha256sum -c --status; then
        cp "$DATA_MIRROR/$mirror" "$dest"; echo "copied $DATA_MIRROR/$mirror (offline mirror)"; return
    fi
    echo "error: cannot get $dest: $url unreachable or wrong checksum, and $DATA_MIRROR/$mirror missing or wrong checksum" >&2
    exit 1
}

GPT2_URL=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main
fetch "$GPT2_URL/encoder.json" gpt2/encoder.json "$CACHE/gpt2/encoder.json" \
    196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
fetch "$GPT2_URL/vocab.bpe" gpt2/vocab.bpe "$CACHE/gpt2/vocab.bpe" \
    1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
fetch https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt \
    tinyshakespeare/input.txt "$CACHE/tinyshakespeare/input.txt" \
    86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed

[ -x ./tokenizer ] && [ -x ./data/prepro ] || make tokenizer data/prepro
./tokenizer export --vocab-dir "$CACHE/gpt2" -o gpt2_tokenizer.bin
mkdir -p "$OUT"
./data/prepro --vocab-dir "$CACHE/gpt2" --split-blank-lines --val-tokens 32768 \
    -o "$OUT/tiny_shakespeare" "$CACHE/tinyshakespeare/input.txt"
# One shard per split: keep llm.c's file names.
mv "$OUT/tiny_shakespeare_val_000000.bin" "$OUT/tiny_shakespeare_val.bin"
mv "$OUT/tiny_shakespeare_train_000000.bin" "$OUT/tiny_shakespeare_train.bin"
ls -l gpt2_tokenizer.bin "$OUT"/tiny_shakespeare_{val,train}.bin
