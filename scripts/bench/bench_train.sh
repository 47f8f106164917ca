#!/usr/bin/env bash
# Training throughput of train_gpt2cu (d12 or DEPTH, T=1024) against the PyTorch baseline, run side by side on
# the same GPU: for each B, the median ms/step and tok/s over steps 10..40 (the first steps pay for
# cuBLAS plans and caches), the median MFU, the device memory in use, then the torch.compile baseline with
# the same B and T and the ratio ours/baseline.
#   scripts/bench/bench_train.sh                 B = 16 32 64
#   BATCHES="16" STEPS=40 scripts/bench/bench_train.sh
#   DEPTH=48 BATCHES="8" STEPS=30 scripts/bench/bench_train.sh     (the 1.5B shape; the baseline gets --depth 48)
# GEMM algorithms: before each B, a tuning run (LLMC_GEMM_TUNE, 45 steps, not timed) records the fastest cuBLASLt
# algorithm of every GEMM shape in $LOGDIR/gemm_algos_d<DEPTH>_B<B>.txt (kept and reused while it exists), and the
# timed run reads it (LLMC_GEMM_ALGOS); GEMM_TUNE=0 times the heuristic's first choices instead.
# Env: BASELINE (default scripts/bench/baselines/torch_train_step.py, the project's own), ANCHOR (a fixed baseline
#      script with the same flags and output line, e.g. ../shared/anchors/torch_gpt2_baseline.py, run beside it),
#      LOGDIR (default bench_logs),
#      TRAIN_FLAGS (extra flags for train_gpt2cu, e.g. "-ab flash" or "-r 0"), NO_BASELINE=1 to skip torch,
#      BASELINE_BATCHES (the B values that also run the baseline; default all of BATCHES).
# Data: one shard of random tokens (the baseline trains on random tokens too); speed does not depend on it.
set -euo pipefail
cd "$(dirname "$0")/../.."

BATCHES=${BATCHES:-"16 32 64"}
STEPS=${STEPS:-40}
DEPTH=${DEPTH:-12}
T=1024
BASELINE=${BASELINE:-scripts/bench/baselines/torch_train_step.py}
ANCHOR=${ANCHOR:-}
LOGDIR=${LOGDIR:-bench_logs}
TRAIN_FLAGS=${TRAIN_FLAGS:-}
BASELINE_BATCHES=${BASELINE_BATCHES:-$BATCHES}
mkdir -p "$LOGDIR"

[ -x ./train_gpt2cu ] || { echo "error: ./train_gpt2cu not built (make train_gpt2cu)" >&2; exit 1; }
if [ "${NO_BASELINE:-0}" != 1 ] && [ ! -f "$BASELINE" ]; then
    echo "error: baseline script $BASELINE not found (set BASELINE=...)" >&2; exit 1
fi
[ -z "$ANCHOR" ] || [ -f "$ANCHOR" ] || { echo "error: ANCHOR=$ANCHOR: no such file" >&2; exit 1; }

SHARD="$LOGDIR/random_tokens_train_000000.bin"
[ -f "$SHARD" ] || python3 scripts/reference/make_random_shard.py "$SHARD"

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
summary=()
for B in $BATCHES; do
    log="$LOGDIR/train_B${B}.log"
    algos=()
    if [ "${GEMM_TUNE:-1}" = 1 ]; then
        algos_file="$LOGDIR/gemm_algos_d${DEPTH}_B${B}.txt"
        if [ -f "$algos_file" ]; then
            echo "==== GEMM algorithms: $algos_file (from an earlier call)"
        else
            echo "==== GEMM tuning run d$DEPTH B=$B T=$T, 45 steps, into $algos_file"
            if ! LLMC_GEMM_TUNE="$algos_file" ./train_gpt2cu -e "d$DEPTH" -b "$B" -t "$T" -x 45 -v 0 -s 0 -i "$SHARD" \
                    -l 3e-4 $TRAIN_FLAGS >"$LOGDIR/tune_B${B}.log" 2>&1; then
                tail -n 5 "$LOGDIR/tune_B${B}.log"
                summary+=("B=$B: the GEMM tuning run failed (see $LOGDIR/tune_B${B}.log)")
                continue
            fi
            grep -a '^GEMM tuning: ' "$LOGDIR/tune_B${B}.log" || true
        fi
        algos=(env LLMC_GEMM_ALGOS="$algos_file")
    fi
    echo "==== train_gpt2cu d$DEPTH B=$B T=$T, $STEPS steps $TRAIN_FLAGS"
    if ! ${algos[@]+"${algos[@]}"} ./train_gpt2cu -e "d$DEPTH" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0 -i "$SHARD" -l 3e-4 $TRAIN_FLAGS >"$log" 2>&1; then
        tail -n 5 "$log"
        summary+=("B=$B: train_gpt2cu failed (see $log)")
        continue
    fi
    grep -E '^\| (device|peak|memory: total|matmuls)' "$log" || true
    # step lines: "step    11/40 | loss ... | norm ... | lr ... |   52.10 ms |  314000 tok/s | MFU 41.2%"
    read -r ms toks mfu < <(python3 - "$log" 10 "$STEPS" $((B * T)) <<'PARSE'
import re, statistics, sys
path, lo, hi, bt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ms, mfu = [], []
for line in open(path):
    m = re.match(r"step\s+(\d+)/\d+ \|.*\|\s*([\d.]+) ms \|.*\| MFU ([\d.]+|n/a)", line)
    if m and lo <= int(m.group(1)) <= hi:
        ms.append(float(m.group(2)))
        mfu.append(float(m.group(3)) if m.group(3) != "n/a" else float("nan"))
if not ms:
    print("nan nan nan")
else:
    med = statistics.median(ms)
    print(f"{med:.2f} {bt / med * 1000:.0f} {statistics.median(mfu):.1f}")
PARSE
)
    mem=$(sed -n 's/^device memory in use at the end: //p' "$log")
    line="d$DEPTH B=$B T=$T ours: ${ms} ms/step, ${toks} tok/s, MFU ${mfu}%, device memory in use ${mem}"
    echo "$line"
    if [ "${NO_BASELINE:-0}" != 1 ] && [[ " $BASELINE_BATCHES " == *" $B "* ]]; then
        blog="$LOGDIR/baseline_B${B}.log"
        echo "==== torch baseline B=$B T=$T"
        if PYTHONUNBUFFERED=1 python3 "$BASELINE" --depth "$DEPTH" --B "$B" --T "$T" >"$blog" 2>&1; then
            grep '^BASELINE' "$blog"
            btoks=$(sed -n 's/^BASELINE.* tok_per_s=\([0-9]*\).*/\1/p' "$blog")
            ratio=$(awk -v a="$toks" -v b="$btoks" 'BEGIN { printf "%.3f", a / b }')
            line="$line | baseline ${btoks} tok/s | ratio ours/baseline ${ratio}"
        else
            tail -n 3 "$blog"
            line="$line | baseline failed (see $blog)"
        fi
        if [ -n "$ANCHOR" ]; then
            alog="$LOGDIR/anchor_B${B}.log"
            echo "==== anchor $ANCHOR B=$B T=$T"
            if PYTHONUNBUFFERED=1 python3 "$ANCHOR" --depth "$DEPTH" --B "$B" --T "$T" >"$alog" 2>&1; then
                grep '^BASELINE' "$alog"
                atoks=$(sed -n 's/^BASELINE.* tok_per_s=\([0-9]*\).*/\1/p' "$alog")
                line="$line | anchor ${atoks} tok/s | ratio ours/anchor $(awk -v a="$toks" -v b="$atoks" 'BEGIN { printf "%.3f", a / b }')"
            else
                tail -n 3 "$alog"
                line="$line | anchor failed (see $alog)"
            fi
        fi
    fi
    summary+=("$line")
done
echo "==== summary"
printf '%s\n' "${summary[@]}"
