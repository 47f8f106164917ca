#!/usr/bin/env bash
# On a GPU machine: the whole check in one go, logs under $OUT (or ./verify_logs).
#   scripts/tools/gpu_verify.sh gate    what a GPU change passes before it is called done: tests (the SASS scan,
#                                       gpu-sass-scan, among them) and sanitizers
#   scripts/tools/gpu_verify.sh tests   make test in BF16 and FP32 (GPU suites, d12 reference included): the suites in
#                                       four streams at once, FP32 built in a copy of the tree meanwhile (one after
#                                       the other they outlast a session's device time: docs/PERFORMANCE.md)
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
# absolute: the FP32 tree's suites run in another directory
LOGS=$(cd "$LOGS" && pwd)
abs() { [ -e "$1" ] && (cd "$1" && pwd) || echo "$1"; }
DATA_MIRROR=$(abs "$DATA_MIRROR")
[ -n "${SERVE_PREFIX:-}" ] && export SERVE_PREFIX=$(abs "$SERVE_PREFIX")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"

# The test suites in parallel streams (scripts/tools/test_streams.sh: STREAMS)
source scripts/tools/test_streams.sh  # from the repository root (the cd above)
# run_streams PRECISION DIR: make test's suites in DIR (built for PRECISION), the streams at once; one summary line
# "tests: N passed, N failed" over them into $LOGS/test_PRECISION.log (each stream's log beside it).
run_streams() {
    local precision=$1 dir=$2 i pids=()
    (cd "$dir" && make -s data DATA_MIRROR="$DATA_MIRROR" >"$LOGS/data_$precision.log" 2>&1)
    for i in "${!STREAMS[@]}"; do
        (cd "$dir" && TEST_ONLY="${STREAMS[$i]}" make test PRECISION=$precision DATA_MIRROR="$DATA_MIRROR" \
            >"$LOGS/test_${precision}_$i.log" 2>&1) &
        pids+=($!)
        [ "$i" = 0 ] && sleep 1
    done
    wait "${pids[@]}"
    local passed=0 failed=0 names="" p f
    for i in "${!STREAMS[@]}"; do
        p= f=
        read -r p f < <(sed -n 's/^tests: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' "$LOGS/test_${precision}_$i.log")
        [ -z "${p:-}" ] && { f=1; p=0; names+=" stream-$i-did-not-finish"; }
        passed=$((passed + p)); failed=$((failed + f))
        names+=" $(sed -n 's/^failed suites: //p' "$LOGS/test_${precision}_$i.log")"
    done
    { cat "$LOGS"/test_${precision}_*.log | grep -E '^==== .*: (PASS|FAIL)$'
      echo "tests: $passed passed, $failed failed$([ "$failed" -gt 0 ] && echo " (${names# })")"; } >"$LOGS/test_$precision.log"
    grep -E ': FAIL$|^tests:' "$LOGS/test_$precision.log"
    [ "$failed" = 0 ]
}
# make test in both precisions: BF16 here, FP32 in a copy of the tree (its own build) made meanwhile, so the two
# builds and the two runs overlap; with `gate`, the sanitizers run beside the BF16 tests.
tests() {
    local rc=0 fp32=${FP32_TREE:-/tmp/llmc_fp32_tree} san_pid=
    rm -rf "$fp32" && mkdir -p "$fp32" &&
        tar -c --exclude=./verify_logs . | tar -x -C "$fp32"
    echo "######## build BF16 (here) and FP32 (in $fp32)"
    make -j"$(nproc)" all dev fuzz PRECISION=BF16 >"$LOGS/build_BF16.log" 2>&1 || { tail -n 30 "$LOGS/build_BF16.log"; rc=1; }
    (cd "$fp32" && nice make -j"$(nproc)" all dev fuzz PRECISION=FP32 >"$LOGS/build_FP32.log" 2>&1) &
    local fp32_build=$!
    [ "${WITH_SANITIZERS:-0}" = 1 ] && { sanitizers >"$LOGS/sanitizers.txt" 2>&1 & san_pid=$!; }
    echo "######## make test PRECISION=BF16 (streams)"
    run_streams BF16 . || rc=1
    wait $fp32_build || { tail -n 30 "$LOGS/build_FP32.log"; rc=1; }
    [ -d ref ] && mkdir -p "$fp32/ref" && cp -a ref/d12* "$fp32/ref/" 2>/dev/null  # the d12 reference, made once
    echo "######## make test PRECISION=FP32 (streams)"
    run_streams FP32 "$fp32" || rc=1
    if [ -n "$san_pid" ]; then wait $san_pid || rc=1; tail -n 1 "$LOGS/sanitizers.txt"; fi
    return $rc
}
sanitizers() {
    echo "######## tests/gpu/check_sanitizers.sh"
    LOGDIR="$LOGS/sanitizers" PRECISION=BF16 DATA_MIRROR="$DATA_MIRROR" JOBS=${SAN_JOBS:-8} bash tests/gpu/check_sanitizers.sh
}

case "${1:-}" in
gate)
    rc=0
    WITH_SANITIZERS=1 tests || rc=1
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
