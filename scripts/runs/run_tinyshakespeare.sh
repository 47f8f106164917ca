#!/usr/bin/env bash
# A real run: GPT-2 from scratch on Tiny Shakespeare (make data), then the loss plot.
#   scripts/runs/run_tinyshakespeare.sh [extra trainer flags]     env: OUTDIR (out_tinyshakespeare), STEPS, TRAINER (gpu|cpu)
# With a GPU (nvidia-smi lists one and nvcc is installed): train_gpt2cu, d12, 4096 tokens per step (B=8, T=512),
# STEPS 300 by default: about 4 epochs of the ~300K training tokens.
# Without one: the CPU trainer train_gpt2, d6, 512 tokens per step (B=2, T=256), STEPS 300 by default: half an
# epoch, a few minutes on 2 cores, enough for the loss to fall from 10.9 to about 6 and the sample to look like a
# play. TRAINER=cpu or TRAINER=gpu picks one whatever the machine has.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${OUTDIR:-out_tinyshakespeare}
# Which trainer, and why: the first line of the output says it.
why=
if [ -n "${TRAINER:-}" ]; then
    case $TRAINER in gpu|cpu) why="TRAINER=$TRAINER" ;; *) echo "error: TRAINER=$TRAINER: gpu or cpu" >&2; exit 1 ;; esac
elif ! command -v nvidia-smi >/dev/null 2>&1; then TRAINER=cpu why="no GPU: nvidia-smi not found"
elif ! nvidia-smi -L 2>/dev/null | grep -q GPU; then TRAINER=cpu why="no GPU: nvidia-smi -L lists none"
elif ! command -v "${NVCC:-nvcc}" >/dev/null 2>&1; then TRAINER=cpu why="a GPU but no ${NVCC:-nvcc} to build train_gpt2cu"
else TRAINER=gpu why="nvidia-smi lists a GPU and ${NVCC:-nvcc} is installed"
fi
DATA=(-i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin)
if [ "$TRAINER" = gpu ]; then
    echo "using the GPU trainer (train_gpt2cu): $why"
    STEPS=${STEPS:-300}
    PROGRAM=./train_gpt2cu TITLE="GPT-2 d12, Tiny Shakespeare"
    FLAGS=(-e d12 -b 8 -t 512 -l 6e-4 -u 20 -v 25 -m -1)
else
    echo "using the CPU trainer (train_gpt2): $why"
    STEPS=${STEPS:-300}
    PROGRAM=./train_gpt2 TITLE="GPT-2 d6, Tiny Shakespeare (CPU)"
    FLAGS=(-e d6 -b 2 -t 256 -l 1e-3 -u 20 -v $(( STEPS >= 100 ? STEPS / 4 : STEPS )) -m 16)
fi
# Always ask make: it rebuilds the trainer when its sources changed (a binary that merely exists may be stale),
# and `make data` re-checks the inputs' SHA-256 and remakes the shards with the current prepro.
make -s data
make -s "${PROGRAM#./}"
mkdir -p "$OUTDIR"
"$PROGRAM" "${FLAGS[@]}" "${DATA[@]}" -o "$OUTDIR" -x "$STEPS" -k cosine -q 0.1 -c 0.1 -s "$STEPS" -g 128 -sk 40 \
    "$@" 2>&1 | tee "$OUTDIR/train.log"
python3 scripts/tools/plot_loss.py "$OUTDIR/main.log" -o "$OUTDIR/loss.png" --title "$TITLE"
