#!/usr/bin/env bash
# A real run: GPT-2 d12 from scratch on Tiny Shakespeare (make data), then the loss plot.
#   scripts/run_tinyshakespeare.sh [extra train_gpt2cu flags]     env: OUTDIR (out_tinyshakespeare), STEPS (300)
# 4096 tokens per step (B=8, T=512): 300 steps are about 4 epochs of the ~300K training tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-out_tinyshakespeare}; STEPS=${STEPS:-300}
# Always ask make: it rebuilds train_gpt2cu when its sources changed (a binary that merely exists may be
# stale), and `make data` re-checks the inputs' SHA-256 and remakes the shards with the current prepro.
make -s data
make -s train_gpt2cu
mkdir -p "$OUTDIR"
./train_gpt2cu -e d12 -i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin \
    -o "$OUTDIR" -b 8 -t 512 -x "$STEPS" -k cosine -l 6e-4 -u 20 -q 0.1 -c 0.1 -v 25 -m -1 -s "$STEPS" -g 128 -sk 40 \
    "$@" 2>&1 | tee "$OUTDIR/train.log"
python3 scripts/plot_loss.py "$OUTDIR/main.log" -o "$OUTDIR/loss.png" --title "GPT-2 d12, Tiny Shakespeare"
