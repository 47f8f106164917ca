#!/usr/bin/env bash
# compute-sanitizer on a GPU machine: memcheck, initcheck, racecheck and synccheck over
#   train   a small d6 run that trains, validates and samples (train_gpt2cu -x 2 -v 1 -s 2, Tiny Shakespeare)
#   fwd     dev/cuda/attention_forward -cs   (every variant, the three small check shapes)
#   bwd     dev/cuda/attention_backward -cs
# and prints one line per tool and program with the tool's error summary; exits non-zero on any error.
#   scripts/check_sanitizers.sh [tool...]      env: LOGDIR (sanitizer_logs), PRECISION (BF16)
# Reports inside cuBLAS/cuBLASLt's own kernels are not ours to fix and would hide ours: those kernels are excluded
# by name (--kernel-name-exclude kns=cublas / kns=cutlass / kns=gemm; every kernel of ours has another name). Each
# report names a kernel and an address: LLMC_PRINT_MEMORY_MAP=1 makes train_gpt2cu print every buffer's range.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGDIR=${LOGDIR:-sanitizer_logs}
TOOLS=${*:-memcheck initcheck racecheck synccheck}
mkdir -p "$LOGDIR"
command -v compute-sanitizer >/dev/null || { echo "error: compute-sanitizer not found (it comes with the CUDA toolkit)" >&2; exit 1; }
make -s -j16 train_gpt2cu PRECISION="${PRECISION:-BF16}" >"$LOGDIR/build.log" 2>&1 && make -s -C dev/cuda >>"$LOGDIR/build.log" 2>&1 \
    || { tail -n 20 "$LOGDIR/build.log"; exit 1; }
[ -f data/tinyshakespeare/tiny_shakespeare_val.bin ] || make -s data >>"$LOGDIR/build.log" 2>&1 \
    || { echo "error: no Tiny Shakespeare shards (make data)" >&2; exit 1; }

train=(./train_gpt2cu -e d6 -b 2 -t 128 -x 2 -v 1 -m 1 -s 2 -g 8 -i data/tinyshakespeare/tiny_shakespeare_train.bin
       -j data/tinyshakespeare/tiny_shakespeare_val.bin)
exclude=(--kernel-name-exclude kns=cublas --kernel-name-exclude kns=cutlass --kernel-name-exclude kns=gemm)
total=0
for tool in $TOOLS; do
    extra=()
    [ "$tool" = initcheck ] && extra=(--track-unused-memory no)
    [ "$tool" = racecheck ] && extra=(--racecheck-report all)
    for prog in train fwd bwd; do
        case $prog in
            train) cmd=("${train[@]}") ;;
            fwd) cmd=(./dev/cuda/attention_forward -cs) ;;
            bwd) cmd=(./dev/cuda/attention_backward -cs) ;;
        esac
        log="$LOGDIR/${tool}_${prog}.log"
        compute-sanitizer --tool "$tool" "${exclude[@]}" "${extra[@]}" --print-limit 20 --error-exitcode 99 \
            "${cmd[@]}" >"$log" 2>&1
        rc=$?
        summary=$(grep -E "ERROR SUMMARY" "$log" | tail -n 1)
        errors=$(echo "$summary" | grep -oE '[0-9]+ error' | grep -oE '^[0-9]+' | head -n 1)
        races=$(grep -E "RACECHECK SUMMARY" "$log" | tail -n 1)
        [ -n "$races" ] && summary="$summary; ${races#========= }"
        # the program itself must also succeed (a crash before the summary is a failure, not a pass)
        if [ -z "$summary" ] || { [ $rc -ne 0 ] && [ $rc -ne 99 ]; }; then
            echo "$tool $prog: program failed (exit $rc), see $log"; tail -n 5 "$log"; total=$((total + 1)); continue
        fi
        echo "$tool $prog: ${summary#========= }"
        total=$((total + ${errors:-0}))
        [ "${errors:-0}" -gt 0 ] && grep -m 5 -E "^========= +(Invalid|Uninitialized|Race|Barrier|Error|Warning|Program hit)" -A 3 "$log"
    done
done
echo "sanitizers: $total error(s) in all"
[ "$total" -eq 0 ]
