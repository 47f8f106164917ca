#!/usr/bin/env bash
# The GPT-2 (124M) reproduction on FineWeb's 10B-token sample (docs/REPRODUCE.md): llm.c's published settings
# (its scripts/runs/run_gpt2_124M.sh): d12 from scratch, 524288 tokens per step (B*T*GPUs*accumulation), T 1024, AdamW
# lr 6e-4 with 700 warmup steps and cosine decay to 0 over 18865 steps (~9.9B tokens, one epoch of the sample),
# weight decay 0.1, gradient clip 1, ZeRO-1, validation loss and HellaSwag every 250 steps, a checkpoint every 5000.
#   scripts/runs/run_gpt2_124M.sh [extra trainer flags, e.g. -r 1]
# env (defaults in brackets):
#   DATA_DIR [data/fineweb10B]  TRAIN [$DATA_DIR/fineweb_train_*.bin]  VAL [$DATA_DIR/fineweb_val_*.bin]
#   HELLASWAG [data/hellaswag/hellaswag_val.bin]  OUT [log_gpt2_124M]  STEPS [18865]  EVERY [250]  CKPT [5000]
#   NGPU [what nvidia-smi lists]  B [64 per GPU, halved until 524288 is a multiple of B*1024*NGPU]
#   TOKENS [524288]  RETRIES [3]
# Several GPUs: mpirun -np NGPU when there is mpirun and the trainer is built with MPI, else NGPU processes through
# the file rendezvous (-pi fs). A run that stops on an error is resumed from its newest checkpoint (-y 1), at most
# RETRIES times; one that finished exits 0. NCCL_NVLS_ENABLE=0 unless set (NVLink hosts without multicast: README).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-data/fineweb10B}
TRAIN=${TRAIN:-$DATA_DIR/fineweb_train_*.bin}
VAL=${VAL:-$DATA_DIR/fineweb_val_*.bin}
HELLASWAG=${HELLASWAG:-data/hellaswag/hellaswag_val.bin}
OUT=${OUT:-log_gpt2_124M}
STEPS=${STEPS:-18865}
EVERY=${EVERY:-250}
CKPT=${CKPT:-5000}
TOKENS=${TOKENS:-524288}
RETRIES=${RETRIES:-3}
T=1024
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

if [ -z "${NGPU:-}" ]; then
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "$NGPU" -ge 1 ] || { echo "error: no GPU listed by nvidia-smi -L (set NGPU, or train on the CPU: README)" >&2; exit 1; }
fi
B=${B:-64}
while [ "$B" -gt 1 ] && [ $(( TOKENS % (B * T * NGPU) )) != 0 ]; do B=$(( B / 2 )); done
if [ $(( TOKENS % (B * T * NGPU) )) != 0 ]; then
    echo "error: TOKENS=$TOKENS is not a multiple of T*NGPU = $T*$NGPU" >&2
    exit 1
fi
accum=$(( TOKENS / (B * T * NGPU) ))
for pattern in "$TRAIN" "$VAL"; do
    compgen -G "$pattern" >/dev/null || {
        echo "error: no shard matches $pattern (docs/REPRODUCE.md: making FineWeb's shards; or set TRAIN/VAL)" >&2; exit 1; }
done
[ -f "$HELLASWAG" ] || {
    echo "error: no HellaSwag eval file at $HELLASWAG (docs/EVALUATION.md: data/hellaswag makes it; or set HELLASWAG)" >&2
    exit 1; }

make -s train_gpt2cu
launch=fs
[ "$NGPU" -gt 1 ] && command -v mpirun >/dev/null && ldd ./train_gpt2cu | grep -q libmpi && launch=mpirun
[ "$NGPU" = 1 ] && launch=single
FLAGS=(-e d12 -i "$TRAIN" -j "$VAL" -o "$OUT" -b "$B" -t "$T" -d "$TOKENS" -x "$STEPS"
       -k cosine -l 6e-4 -u 700 -q 0.0 -c 0.1 -gc 1.0 -z 1 -r 0
       -v "$EVERY" -m 20 -h 1 -hf "$HELLASWAG" -s 20000 -g 144 -n "$CKPT" -y 1 "$@")
echo "GPT-2 124M: $NGPU GPU(s) ($launch), B=$B T=$T, $accum micro-step(s) per step, $TOKENS tokens per step, $STEPS steps -> $OUT"
mkdir -p "$OUT"

run_once() {
    case $launch in
    single) ./train_gpt2cu "${FLAGS[@]}" ;;
    mpirun) mpirun --allow-run-as-root -np "$NGPU" -x NCCL_NVLS_ENABLE ./train_gpt2cu "${FLAGS[@]}" ;;
    fs)
        local rdv pids=() rc=0
        rdv=$(mktemp -d)
        for r in $(seq 1 $(( NGPU - 1 ))); do
            ./train_gpt2cu "${FLAGS[@]}" -pn "$NGPU" -pr "$r" -pi fs -pf "$rdv" >"$OUT/rank$r.log" 2>&1 &
            pids+=($!)
        done
        ./train_gpt2cu "${FLAGS[@]}" -pn "$NGPU" -pr 0 -pi fs -pf "$rdv" || rc=$?
        for p in "${pids[@]}"; do wait "$p" || rc=1; done
        rm -rf "$rdv"
        return $rc ;;
    esac
}

newest() { ls "$OUT"/model_*.bin 2>/dev/null | sort | tail -n 1 || true; }
for attempt in $(seq 0 "$RETRIES"); do
    before=$(newest)
    if run_once 2>&1 | tee -a "$OUT/train.log"; then
        python3 scripts/tools/plot_loss.py "$OUT/main.log" -o "$OUT/loss.png" --title "GPT-2 124M, FineWeb 10B" || true
        exit 0
    fi
    # a failure before any new checkpoint (a bad flag or file, out of memory) would only fail again
    if [ "$(newest)" = "$before" ]; then
        echo "error: the run stopped before writing a new checkpoint; not retrying ($OUT/train.log)" >&2
        exit 1
    fi
    [ "$attempt" -lt "$RETRIES" ] && echo "the run stopped with an error: resuming from $(newest) (retry $((attempt + 1)) of $RETRIES)"
done
echo "error: the run failed $((RETRIES + 1)) times; $OUT/train.log has each attempt" >&2
exit 1
