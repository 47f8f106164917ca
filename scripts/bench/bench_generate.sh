#!/usr/bin/env bash
# Generation speed of generate_gpt2cu (BF16 build: KV cache, CUDA Graph, greedy on the GPU) against Hugging Face
# generate (scripts/bench/baselines/hf_generate.py), same weights, same GPU, same call: prompt of 64 tokens,
# 256 new tokens, greedy, batch 1 and 64 (BATCHES). tokens/s counts the prefill's time with the decode steps';
# set-up (its warm-up included) is printed on its own line, with the device memory in use after it. The model:
# MODEL (our file; default ref/d12_model.bin, which `make test` writes), converted to Hugging Face's format for the
# baseline.
#   scripts/bench/bench_generate.sh
# Env: MODEL, BATCHES ("1 64"), N (256), BASELINE, ANCHOR (a fixed baseline with the same flags and output line, e.g.
#      ../shared/anchors/hf_generate_baseline.py, run beside it), BASELINE_MODES (eager; eager,static adds HF's static cache +
#      torch.compile, minutes of compilation), LOGDIR (bench_generate_logs), NO_BASELINE=1, DATA_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-ref/d12_model.bin}
BATCHES=${BATCHES:-"1 64"}
N=${N:-256}
BASELINE=${BASELINE:-scripts/bench/baselines/hf_generate.py}
ANCHOR=${ANCHOR:-}
LOGDIR=${LOGDIR:-bench_generate_logs}
mkdir -p "$LOGDIR"
[ -f "$MODEL" ] || { echo "error: model $MODEL not found (set MODEL=...; make test writes ref/d12_model.bin)" >&2; exit 1; }
[ -x ./generate_gpt2cu ] || { echo "error: ./generate_gpt2cu not built (make generate_gpt2cu)" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# a 64-token prompt on one line, from Tiny Shakespeare when `make data` has run, else a fixed sentence repeated
python3 - "$LOGDIR/prompt.txt" <<'PY'
import glob, os, sys
sys.path.insert(0, "scripts/bench")
from bench_tokenizer import load_tiktoken  # tiktoken's gpt2 from data/cache/gpt2 (`make data`): no network
enc, _ = load_tiktoken("data/cache/gpt2")
files = sorted(glob.glob(os.path.join(os.environ.get("DATA_MIRROR", "../shared/data"), "tinyshakespeare", "*.txt")))
try:
    text = open(files[0]).read()[:4000]
except (OSError, IndexError):
    text = "The quick brown fox jumps over the lazy dog. " * 40
ids = enc.encode_ordinary(" ".join(text.split()))[:64]
line = enc.decode(ids)
assert len(enc.encode_ordinary(line)) == 64, "the prompt must re-encode to 64 tokens"
open(sys.argv[1], "w").write(line + "\n")
PY
for B in $BATCHES; do
    for i in $(seq "$B"); do cat "$LOGDIR/prompt.txt"; done > "$LOGDIR/prompts_B$B.txt"
    ./generate_gpt2cu -e "$MODEL" -pf "$LOGDIR/prompts_B$B.txt" -g "$N" -st 0 > "$LOGDIR/ours_B$B.log" 2>&1
    echo "ours B=$B: $(grep -a "tokens/s" "$LOGDIR/ours_B$B.log" | sed 's/.*prefill/prefill/')"
    echo "ours B=$B: $(grep -a "in use after set-up\|^set-up" "$LOGDIR/ours_B$B.log" | tr '\n' ' ')"
done
if [ "${NO_BASELINE:-0}" != 1 ]; then
    HF_DIR="$LOGDIR/hf_model"
    ./gpt2_convert to-hf "$MODEL" "$HF_DIR" > "$LOGDIR/convert.log" 2>&1
    for B in $BATCHES; do
        python3 "$BASELINE" --model-dir "$HF_DIR" --B "$B" --P 64 --N "$N" --dtype bf16 --modes "${BASELINE_MODES:-eager}" \
            2>&1 | grep BASELINE || true
        if [ -n "$ANCHOR" ]; then
            python3 "$ANCHOR" --model-dir "$HF_DIR" --B "$B" --P 64 --N "$N" --dtype bf16 --modes "${BASELINE_MODES:-eager}" \
                2>&1 | grep BASELINE | sed 's/^/anchor: /' || true
        fi
    done
fi
