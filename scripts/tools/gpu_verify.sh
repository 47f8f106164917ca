#!/usr/bin/env bash
# On a GPU machine: the whole check in one go, logs under $OUT (or ./verify_logs).
#   scripts/tools/gpu_verify.sh gate    what a GPU change passes before it is called done: tests, then sanitizers
#   scripts/tools/gpu_verify.sh tests   make test in FP32, then in BF16 (GPU suites, d12 reference included)
#   scripts/tools/gpu_verify.sh sanitizers   tests/gpu/check_sanitizers.sh, every tool over every run (BF16)
#   scripts/tools/gpu_verify.sh bench   d12 training throughput, flash and materialized attention, against the
#                                 torch.compile baseline at B=16 T=1024; device memory at T=1024 and T=4096
# Env: DATA_MIRROR (GPT-2 vocab + corpora), ANCHORS (folder with the workplace's fixed PyTorch baselines: run beside the
#      project's own, scripts/bench/baselines/, where it exists).
set -uo pipefail
cd "$(dirname "$0")/../.."
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
ANCHORS=${ANCHORS:-../shared/anchors}
LOGS=${OUT:-verify_logs}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"

tests() {
    local rc=0 precision
    for precision in FP32 BF16; do
        echo "######## make test PRECISION=$precision"
        make -j16 all PRECISION=$precision >"$LOGS/build_$precision.log" 2>&1 || { tail -n 30 "$LOGS/build_$precision.log"; rc=1; continue; }
        make test PRECISION=$precision DATA_MIRROR="$DATA_MIRROR" 2>&1 | tee "$LOGS/test_$precision.log" | \
            grep -E '^(====|tests:|failed suites|note:)|rel-L2|abs error|trajectory|determinism|PASS|FAIL|checks' || true
        grep -qE '^tests: .* 0 failed(, [0-9]+ skipped)?$' "$LOGS/test_$precision.log" || rc=1
    done
    return $rc
}
sanitizers() {
    echo "######## tests/gpu/check_sanitizers.sh"
    LOGDIR="$LOGS/sanitizers" PRECISION=BF16 DATA_MIRROR="$DATA_MIRROR" bash tests/gpu/check_sanitizers.sh
}

case "${1:-}" in
gate)
    rc=0
    tests || rc=1
    sanitizers || rc=1
    grep -hE '^tests: ' "$LOGS"/test_FP32.log "$LOGS"/test_BF16.log 2>/dev/null | sed 's/^/gate: /'
    tail -n 1 "$LOGS/sanitizers/results.txt" >/dev/null 2>&1 && echo "gate: $(grep -c '^ok' "$LOGS/sanitizers/results.txt") sanitizer runs clean, $(grep -c '^FAIL' "$LOGS/sanitizers/results.txt") not"
    echo "gate: $([ $rc = 0 ] && echo PASS || echo FAIL)"
    exit $rc ;;
tests)
    tests; exit $? ;;
sanitizers)
    sanitizers; exit $? ;;
bench)
    make -j16 train_gpt2cu PRECISION=BF16 >"$LOGS/build_bench.log" 2>&1 || { tail -n 30 "$LOGS/build_bench.log"; exit 1; }
    BATCHES=16 NO_BASELINE=1 LOGDIR="$LOGS/flash" TRAIN_FLAGS="-ab flash" bash scripts/bench/bench_train.sh | tail -n 1
    BATCHES=16 NO_BASELINE=1 LOGDIR="$LOGS/materialized" TRAIN_FLAGS="-ab materialized" bash scripts/bench/bench_train.sh | tail -n 1
    PYTHONUNBUFFERED=1 python3 scripts/bench/baselines/torch_train_step.py --depth 12 --B 16 --T 1024 | tee "$LOGS/baseline.log"
    if [ -f "$ANCHORS/torch_gpt2_baseline.py" ]; then
        PYTHONUNBUFFERED=1 python3 "$ANCHORS/torch_gpt2_baseline.py" --depth 12 --B 16 --T 1024 | sed 's/^/anchor: /' \
            | tee "$LOGS/anchor.log"
    fi
    shard=$(ls "$LOGS"/flash/random_tokens_train_000000.bin)
    for backend in flash materialized; do
        for T in 1024 4096; do
            ./train_gpt2cu -e d12 -b 4 -t $T -x 6 -v 0 -s 0 -i "$shard" -ab $backend >"$LOGS/mem_${backend}_T$T.log" 2>&1
            echo "memory d12 B=4 T=$T $backend: $(sed -n 's/^device memory in use at the end: //p' "$LOGS/mem_${backend}_T$T.log")" \
                 "$(grep -E '^\| memory: (activations|total)' "$LOGS/mem_${backend}_T$T.log" | tr -s ' ' | tr '\n' ' ')"
        done
    done ;;
*)
    echo "usage: scripts/tools/gpu_verify.sh gate|tests|sanitizers|bench" >&2; exit 2 ;;
esac
