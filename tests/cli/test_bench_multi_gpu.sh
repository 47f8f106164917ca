#!/usr/bin/env bash
# scripts/bench/bench_multi_gpu.sh's table without a GPU: the script runs in a scratch tree with a stand-in trainer (step
# lines with known times, the device-memory line, a model file for the init run; -z 2 fails) and a stand-in nvidia-smi
# (2 GPUs; an old driver's field names; busy samples at 1690 MHz flagged power-capped, idle ones between them). The
# table must hold the medians over steps 3..STEPS (FIRST..STEPS when set), tok/s, the efficiency against the 1-GPU run, the memory, the clock
# column, n/a for the failed -z and for 4 GPUs on a 2-GPU machine, and the sweep must go on past them; with EACH_GPU=1
# 1-GPU runs on both GPUs at once and the efficiency against the slower of them.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
begin_checks
tmp=$TMP
mkdir -p "$tmp/scripts/bench" "$tmp/bin" "$tmp/data/tinyshakespeare"
cp scripts/bench/bench_multi_gpu.sh scripts/bench/step_times.sh "$tmp/scripts/bench/"
: >"$tmp/data/tinyshakespeare/tiny_shakespeare_train.bin"
printf 'train_gpt2cu: ;\ndata: ;\n' >"$tmp/Makefile"

cat >"$tmp/train_gpt2cu" <<'EOF'
#!/usr/bin/env bash
steps=1 out="" pn=1 z=0
while [ $# -gt 0 ]; do
    case $1 in -x) steps=$2; shift ;; -o) out=$2; shift ;; -pn) pn=$2; shift ;; -z) z=$2; shift ;; esac
    shift
done
[ "$z" = 2 ] && { echo "error: -z 2: not in this stand-in"; exit 1; }
[ -n "$out" ] && { mkdir -p "$out"; : >"$out/model_00000001.bin"; }
echo "device memory in use after the first step: 7.61 GiB (cudaMemGetInfo: everything on the device)"
slow=0; [ "${CUDA_VISIBLE_DEVICES:-}" = 1 ] && slow=0.3  # GPU 1 alone is 0.3 ms slower than GPU 0
for ((s = 1; s <= steps; s++)); do  # 1 GPU: 28.00 + 0.02 s ms, 2 GPUs: 28.50 + 0.02 s
    printf "step %4d/%d | loss 5.0 | norm 1.0 | lr 1e-04 | %6.2f ms | 1 tok/s\n" $s $steps \
        "$(awk -v n="$pn" -v s=$s -v w=$slow 'BEGIN {print 28 + 0.5 * (n - 1) + 0.02 * s + w}')"
    sleep 0.2
done
EOF
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
    -L) echo "GPU 0: Stand-in (UUID: a)"; echo "GPU 1: Stand-in (UUID: b)" ;;
    *clocks_event_reasons*) exit 6 ;;  # an older driver: the other field names
    *-lms*) while true; do echo "1690, 100, Active"; echo "345, 0, Not Active"; sleep 0.02; done ;;
    *) echo "Stand-in GPU, 81559 MiB" ;;
esac
EOF
chmod +x "$tmp/train_gpt2cu" "$tmp/bin/nvidia-smi"

out=$(cd "$tmp" && PATH="$tmp/bin:$PATH" MODELS=d12 GPUS="1 2 4" ZS="0 1 2" STEPS=6 LOGS="$tmp/logs" \
      bash scripts/bench/bench_multi_gpu.sh 2>&1)
rc=$?
check() { expect_line "$1" "$2" "$out"; }  # name, extended regex a line of the output must match
[ $rc = 0 ] && ok "the sweep exits 0" || bad "the sweep exited $rc"
check "the clock column's header" '^\| model .*\| device memory \(rank 0\) \| SM clock \(GPU 0 or the row.s GPU, busy samples: median, power-capped\) \| log \|$'
check "1 GPU: median of steps 3..6, tok/s, the baseline, memory, clock" \
    '^\| d12 \| 16 x 1024 \| 1 \| 0 \| 28\.09 \| 583268 \| 1\.000 \| 7\.61 GiB \| 1690 MHz, ([0-9]+)/\1 capped \| d12_z0_gpu1\.log \|$'
check "2 GPUs -z 0: efficiency against the 1-GPU run" \
    '^\| d12 \| 16 x 1024 \| 2 \| 0 \| 28\.59 \| 1146135 \| 0\.983 \| 7\.61 GiB \| 1690 MHz, ([0-9]+)/\1 capped \| d12_z0_gpu2\.log \|$'
check "2 GPUs -z 1 after it" '^\| d12 \| 16 x 1024 \| 2 \| 1 \| 28\.59 \| 1146135 \| 0\.983 \|'
check "4 GPUs on 2: n/a, and the sweep goes on" '^\| d12 \| 16 x 1024 \| 4 \| 0 \| n/a \| n/a \| n/a \| n/a \| n/a \| d12_z0_gpu4\.log \|$'
check "a failed run (-z 2): n/a" '^\| d12 \| 16 x 1024 \| 2 \| 2 \| n/a \| n/a \| n/a \| n/a \|'
[ -z "$(ls "$tmp/logs"/*.smi.csv 2>/dev/null)" ] && ok "no samples left in LOGS" || bad "sample files left in LOGS"

# EACH_GPU=1: 1-GPU runs on GPUs 0 and 1 at once (GPUS asks for 4: only the 2 visible are run), and the efficiency
# against the slower of the two
out=$(cd "$tmp" && PATH="$tmp/bin:$PATH" EACH_GPU=1 MODELS=d12 GPUS="1 2 4" ZS=0 STEPS=6 LOGS="$tmp/logs_each" \
      bash scripts/bench/bench_multi_gpu.sh 2>&1)
check "EACH_GPU=1: the column's header" '^\| model .*\| efficiency \| against its slowest GPU \(all at once\) \| device memory'
check "EACH_GPU=1: GPU 0 alone" '^\| d12 \| 16 x 1024 \| 1 \| 0 \| 28\.09 \| 583268 \| 1\.000 \| - \| 7\.61 GiB \|'
# the group runs 2 x 6 steps, its median over steps 7..12: GPU 0 28.19, GPU 1 28.49
check "EACH_GPU=1: GPU 0 in the group, second half" '^\| d12 \| 16 x 1024 \| 1 \(GPU 0, all at once\) \| 0 \| 28\.19 \| [0-9]+ \| 0\.996 \| - \|.*d12_z0_each0\.log \|$'
check "EACH_GPU=1: GPU 1 in the group, against GPU 0 alone" \
    '^\| d12 \| 16 x 1024 \| 1 \(GPU 1, all at once\) \| 0 \| 28\.49 \| [0-9]+ \| 0\.986 \| - \|.*d12_z0_each1\.log \|$'
check "EACH_GPU=1: 2 GPUs against GPU 0 and against the slower GPU" '^\| d12 \| 16 x 1024 \| 2 \| 0 \| 28\.59 \| 1146135 \| 0\.983 \| 0\.997 \| 7\.61 GiB \|'
[ -z "$(ls "$tmp/logs_each"/*.smi.csv 2>/dev/null)" ] && ok "EACH_GPU=1: no samples left in LOGS" || bad "EACH_GPU=1: sample files left"
# stopped early: no sampler or trainer outlives the script
(cd "$tmp" && PATH="$tmp/bin:$PATH" EACH_GPU=1 MODELS=d12 GPUS="1 2" ZS=0 STEPS=30 LOGS="$tmp/logs_kill" \
    exec bash scripts/bench/bench_multi_gpu.sh >/dev/null 2>&1) &
victim=$!
sleep 2
kill -TERM $victim 2>/dev/null
wait $victim 2>/dev/null
sleep 0.5
left=$(pgrep -f "$tmp/(bin/nvidia-smi|logs_kill)" | wc -l)
[ "$left" = 0 ] && ok "stopped early: no sampler or trainer left" || bad "stopped early: $left processes left"
pkill -f "$tmp/(bin/nvidia-smi|logs_kill)" 2>/dev/null
check "EACH_GPU=1: 4 GPUs on 2: n/a in both columns" '^\| d12 \| 16 x 1024 \| 4 \| 0 \| n/a \| n/a \| n/a \| n/a \|'
printf '%s\n' "$out" | grep -q 'GPU 2, all at once' && bad "EACH_GPU=1 ran GPUs that are not there" || ok "EACH_GPU=1: only the visible GPUs"
err=$(cd "$tmp" && PATH="$tmp/bin:$PATH" CUDA_VISIBLE_DEVICES=1 EACH_GPU=1 MODELS=d12 GPUS="1 2" ZS=0 STEPS=6 LOGS="$tmp/logs_cvd" \
      bash scripts/bench/bench_multi_gpu.sh 2>&1)
[ $? != 0 ] && expect_line "EACH_GPU=1 with CUDA_VISIBLE_DEVICES: one error line" '^error: EACH_GPU=1 picks each GPU itself' "$err" ||
    bad "EACH_GPU=1 with CUDA_VISIBLE_DEVICES set exited 0"

# FIRST: the median over a later range of steps (the steady state of power-capped GPUs); a range that is empty stops
out=$(cd "$tmp" && PATH="$tmp/bin:$PATH" MODELS=d12 GPUS="1 2" ZS=0 STEPS=6 FIRST=5 LOGS="$tmp/logs5" \
      bash scripts/bench/bench_multi_gpu.sh 2>&1)
check "FIRST=5: the header names steps 5..6" '^\| model .*\| ms/step \(median, steps 5\.\.6\) \|'
check "FIRST=5: 1 GPU's median of steps 5..6" '^\| d12 \| 16 x 1024 \| 1 \| 0 \| 28\.11 \| 582853 \| 1\.000 \|'
check "FIRST=5: 2 GPUs against it" '^\| d12 \| 16 x 1024 \| 2 \| 0 \| 28\.61 \| 1145334 \| 0\.983 \|'
out=$(cd "$tmp" && STEPS=6 FIRST=7 LOGS="$tmp/logs7" bash scripts/bench/bench_multi_gpu.sh 2>&1)
rc=$?
[ $rc != 0 ] && check "FIRST past STEPS: one line naming both, no run" '^error: STEPS=6 FIRST=7: ' ||
    bad "FIRST=7 with STEPS=6 exited 0"
[ "$fails" = 0 ] || printf '%s\n' "$out" | tail -n 15
end_checks bench_multi_gpu.sh
