#!/usr/bin/env bash
# The CPU trainer (train_gpt2: fp32) against the GPU trainer's FP32 build (train_gpt2cu with PRECISION=FP32; TF32
# off, its default) on the same checkpoint and tokens, and checkpoints across the two:
#   1. the CPU trains 1 step of a random d12 and saves it; both trainers resume that checkpoint (-y 1) and train
#      10 more steps: every step's loss within TOL (1e-4);
#   2. each resumes the other's step-5 checkpoint (a CPU one on the GPU and a GPU one on the CPU) and trains steps
#      6..11: every step's loss within TOL of the run that wrote the checkpoint.
#   tests/gpu/check_cpu_gpu.sh    env: TOL (1e-4), LOGS ($OUT or cpu_gpu_logs), B (4), T (64)
set -uo pipefail
cd "$(dirname "$0")/../.."
TOL=${TOL:-1e-4}; LOGS=${LOGS:-${OUT:-cpu_gpu_logs}}; B=${B:-4}; T=${T:-64}
for p in train_gpt2 train_gpt2cu; do
    [ -x ./$p ] || { echo "error: ./$p not built (make train_gpt2 train_gpt2cu PRECISION=FP32)" >&2; exit 1; }
done
./train_gpt2cu --version 2>&1 | grep -q '(fp32)' ||
    { echo "error: ./train_gpt2cu is not an FP32 build ($(./train_gpt2cu --version 2>&1 | head -n 1)): make train_gpt2cu PRECISION=FP32" >&2; exit 1; }
DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
[ -f $DATA ] || make -s data || exit 1
mkdir -p "$LOGS"
rm -f "$LOGS"/{init,cpu,gpu,cpu_from_gpu,gpu_from_cpu}.log
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
flags=(-b "$B" -t "$T" -v 0 -s 0 -i "$DATA")
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([0-9.]*\) .*/\1 \2/p' "$1"; }
# worst |loss diff| over the steps both logs have: "steps worst"
compare() {
    LC_ALL=C join <(losses "$1" | LC_ALL=C sort) <(losses "$2" | LC_ALL=C sort) |
        awk '{d = $2 - $3; if (d < 0) d = -d; if (d > w) w = d; n++} END {printf "%d %.3e", n, w}'
}
rc=0
verdict() {  # what, log a, log b, steps expected
    read -r n w <<<"$(compare "$2" "$3")"
    local v
    v=$(awk -v n="$n" -v s="$4" -v w="$w" -v t="$TOL" 'BEGIN {print (n == s && w <= t) ? "OK" : "FAIL"}')
    echo "$1: $n steps, worst |loss diff| $w (tol $TOL) $v"
    [ "$v" = OK ] || rc=1
}
./train_gpt2 -e d12 -x 1 -n 1 -o "$TMP/init" "${flags[@]}" >"$LOGS/init.log" 2>&1 || { tail -n 3 "$LOGS/init.log"; exit 1; }
cp -r "$TMP/init" "$TMP/cpu"; cp -r "$TMP/init" "$TMP/gpu"
./train_gpt2 -o "$TMP/cpu" -y 1 -x 11 -n 5 "${flags[@]}" >"$LOGS/cpu.log" 2>&1 || { tail -n 3 "$LOGS/cpu.log"; rc=1; }
./train_gpt2cu -o "$TMP/gpu" -y 1 -x 11 -n 5 "${flags[@]}" >"$LOGS/gpu.log" 2>&1 || { tail -n 3 "$LOGS/gpu.log"; rc=1; }
verdict "GPU FP32 vs CPU from the CPU's step-1 checkpoint" "$LOGS/cpu.log" "$LOGS/gpu.log" 10
mkdir -p "$TMP/gpu_from_cpu" "$TMP/cpu_from_gpu"
cp "$TMP/cpu"/{model,state}_00000005.bin "$TMP/gpu_from_cpu/" && cp "$TMP/gpu"/{model,state}_00000005.bin "$TMP/cpu_from_gpu/" || rc=1
./train_gpt2cu -o "$TMP/gpu_from_cpu" -y 1 -x 11 "${flags[@]}" >"$LOGS/gpu_from_cpu.log" 2>&1 || { tail -n 3 "$LOGS/gpu_from_cpu.log"; rc=1; }
./train_gpt2 -o "$TMP/cpu_from_gpu" -y 1 -x 11 "${flags[@]}" >"$LOGS/cpu_from_gpu.log" 2>&1 || { tail -n 3 "$LOGS/cpu_from_gpu.log"; rc=1; }
verdict "GPU resuming the CPU's step-5 checkpoint vs the CPU run" "$LOGS/cpu.log" "$LOGS/gpu_from_cpu.log" 6
verdict "CPU resuming the GPU's step-5 checkpoint vs the GPU run" "$LOGS/gpu.log" "$LOGS/cpu_from_gpu.log" 6
echo "step | loss: CPU, GPU FP32, GPU from the CPU's step 5, CPU from the GPU's step 5"
for f in cpu gpu gpu_from_cpu cpu_from_gpu; do losses "$LOGS/$f.log" | sed "s/^/$f /"; done |
    awk '{v[$2, $1] = $3; if ($2 > last) last = $2}
         END {for (s = 1; s <= last; s++) {
                  line = "";
                  split("cpu gpu gpu_from_cpu cpu_from_gpu", runs, " ");
                  for (i = 1; i <= 4; i++) line = line " " ((s, runs[i]) in v ? v[s, runs[i]] : "-");
                  if (line != " - - - -") print "  " s line}}'
exit $rc
