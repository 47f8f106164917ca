#!/usr/bin/env bash
# GEMM algorithm files (llmc/kernels/matmul/matmul_algos.cuh): a tuning run (LLMC_GEMM_TUNE) must write an algorithm for every GEMM
# shape of the run, and two runs reading the file (LLMC_GEMM_ALGOS, CUDA Graph on) must give the same model bytes
# and step lines; a file made for another device or library, a missing file, or both variables set must stop the
# run with one line.
#   tests/gpu/check_gemm_algos.sh      env: MODEL (d12), WORK (gemm_algos_check)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d12}; WORK=${WORK:-gemm_algos_check}
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "error: no data (make data)" >&2; exit 1; }
make -s train_gpt2cu PRECISION="${PRECISION:-BF16}" || exit 1
# 2 micro-steps per step: 45 steps time each candidate of the once-per-micro-step classifier GEMMs 11 times
FLAGS=(-e "$MODEL" -b 4 -t 256 -d 2048 -v 4 -m 2 -s 0 -l 6e-4 -u 3 -c 0.1)
rm -rf "$WORK"; mkdir -p "$WORK/a" "$WORK/b"
ALGOS="$WORK/algos.txt"
fail=0
LLMC_GEMM_TUNE="$ALGOS" ./train_gpt2cu "${FLAGS[@]}" -x 45 -n 0 >"$WORK/tune.log" 2>&1 || { tail "$WORK/tune.log"; exit 1; }
grep -a -q "kernels queued one by one (GEMM tuning run)" "$WORK/tune.log" || { echo "FAIL: the tuning run used a graph"; fail=1; }
grep -a "^GEMM tuning: " "$WORK/tune.log"
grep -a -q "^GEMM tuning: every shape written to $ALGOS" "$WORK/tune.log" || { echo "FAIL: shapes left untuned"; fail=1; }
shapes=$(($(wc -l <"$ALGOS") - 1))
echo "$ALGOS: $shapes shapes, header: $(head -n 1 "$ALGOS")"
[ "$shapes" -ge 10 ] || { echo "FAIL: expected at least 10 GEMM shapes"; fail=1; }
for r in a b; do
    LLMC_GEMM_ALGOS="$ALGOS" ./train_gpt2cu "${FLAGS[@]}" -x 8 -n 8 -o "$WORK/$r" >"$WORK/$r.log" 2>&1 || { tail "$WORK/$r.log"; exit 1; }
done
grep -a -q "algorithms: $ALGOS" "$WORK/a.log" || { echo "FAIL: the run does not say it reads $ALGOS"; fail=1; }
grep -a -q "one CUDA Graph per micro-step" "$WORK/a.log" || { echo "FAIL: no CUDA Graph with an algorithm file"; fail=1; }
if grep -a -q "has no algorithm for GEMM" "$WORK/a.log"; then echo "FAIL: shapes missing from the file"; fail=1; fi
strip() { LC_ALL=C grep -a -e '^step' -e '^val loss' "$1" | sed -E 's/\| +[0-9.]+ ms \| +[0-9]+ tok\/s \| MFU .*$//'; }
if cmp -s "$WORK/a/model_00000008.bin" "$WORK/b/model_00000008.bin" && diff <(strip "$WORK/a.log") <(strip "$WORK/b.log") >/dev/null; then
    echo "identical: model_00000008.bin and $(strip "$WORK/a.log" | grep -c '^step') step lines across two runs"
else echo "FAIL: two runs with the same algorithm file differ"; fail=1; fi
LC_ALL=C grep -a '^step' "$WORK/a.log" | tail -n 1
# refusals, each one line naming the file or the variables
expect_error() {  # description, expected text, env...
    local what=$1 want=$2; shift 2
    if env "$@" ./train_gpt2cu "${FLAGS[@]}" -x 1 -n 0 >"$WORK/err.log" 2>&1; then echo "FAIL: $what ran"; fail=1; return; fi
    if grep -a -q -- "$want" "$WORK/err.log"; then echo "refused ($what): $(grep -a -- "$want" "$WORK/err.log" | head -n 1)"
    else echo "FAIL: $what: no line with '$want'"; tail -n 3 "$WORK/err.log"; fail=1; fi
}
sed '1s/.*/llmc-gemm-algos 1 | another device | cuBLASLt 1 | bf16/' "$ALGOS" >"$WORK/other.txt"
expect_error "another device's file" "error: $WORK/other.txt: made for \"llmc-gemm-algos 1 | another device" LLMC_GEMM_ALGOS="$WORK/other.txt"
expect_error "a missing file" "error: LLMC_GEMM_ALGOS: $WORK/none.txt does not exist" LLMC_GEMM_ALGOS="$WORK/none.txt"
expect_error "both variables" "error: LLMC_GEMM_TUNE and LLMC_GEMM_ALGOS are both set" LLMC_GEMM_ALGOS="$ALGOS" LLMC_GEMM_TUNE="$ALGOS"
if [ $fail = 0 ]; then echo "GEMM ALGORITHM FILES: PASS"; else echo "GEMM ALGORITHM FILES: FAIL"; exit 1; fi
