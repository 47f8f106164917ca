#!/usr/bin/env bash
# Regenerates the committed CPU/GPU reference fixture tests/fixtures/tiny_* with PyTorch (fp32, CPU):
# L=2 NH=4 C=64 maxT=64, V=1000 (so Vp=1024 and the padded classifier is exercised), random tokens,
# B=4 T=32, 10 AdamW steps (lr 1e-3). No data from ../shared is used.
# Init std 0.125 = 1/sqrt(C) (not GPT-2's 0.02) so activations are O(1): at 0.02 attention is near uniform
# and GELU inputs tiny, and an erf GELU passes the 1e-5 logits check. Noise 0.1 on biases and LayerNorm
# parameters so each of them changes the output.
# Usage: scripts/reference/make_fixture.sh [python]   (default /usr/bin/python3 if it has torch, else python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-}
if [ -z "$PY" ]; then
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then PY=/usr/bin/python3; else PY=python3; fi
fi
"$PY" scripts/reference/train_gpt2.py --layers 2 --heads 4 --channels 64 --vocab 1000 --max-seq-len 64 \
    -b 4 -t 32 --seed 1337 --init-std 0.125 --param-noise 0.1 --steps 10 --lr 1e-3 --device cpu -o tests/fixtures/tiny
