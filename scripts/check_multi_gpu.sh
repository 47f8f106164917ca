#!/usr/bin/env bash
# Multi-GPU check (needs 2 GPUs): 2 data-parallel ranks must train like 1 GPU with 2 accumulation micro-steps,
# because a step's window is the same for any GPU count (llmc/training/dataloader.h): rank r of a 2-rank run reads slot r,
# which the single GPU reads in its micro-step r, shuffled or not. Both launch paths are run: mpirun (USE_MPI builds)
# and the file rendezvous. ZeRO-1 (-z 1): 2 ranks and 1 GPU against the same single-GPU run; a -z 1 run repeated
# must print the same step lines (runs are deterministic). Checkpoints across GPU counts: the single run and the
# 2-GPU -z 1 run save after STEPS/2 steps; 1 GPU resumes the 2-GPU checkpoint and 2 GPUs (-z 1) the 1-GPU one.
# ZeRO-2 (-z 2): 2 ranks against the same single-GPU run, and 2 ranks with 2 micro-steps each (-d twice as large:
# -z 2 reduce-scatters on every micro-step) against 1 GPU with 4 micro-steps of the same tokens.
#
# Two bounds, because bf16 training from random weights amplifies rounding:
# - step 1 (and a resumed run's first step): the same weights on the same tokens, only the loss's mean is summed in
#   another order: |diff| <= 1e-4. This is what catches a wrong data window or a checkpoint that lost the weights.
# - every later step: within twice the rounding yardstick, measured here on one GPU: the same run with B x 1 and
#   B/4 x 4 micro-steps (same tokens, same maths, only the order of the gradient sums differs). On an H200 that
#   alone moved step 9's loss by 1.9e-2 (12d377d), and 2 ranks by 2.8e-2 (af367ae), so a fixed 0.02 failed on
#   rounding. The bound is never below TOL (0.005).
# Each resumed run is compared with the run whose checkpoint it loaded.
#   scripts/check_multi_gpu.sh         env: DATA_MIRROR, STEPS (10), TOL (0.005), LOGS ($OUT or mgpu_logs)
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10}; TOL=${TOL:-0.005}; LOGS=${LOGS:-${OUT:-mgpu_logs}}
mkdir -p "$LOGS"
rm -f "$LOGS"/{single,mpi,fs,fs_rank1,single_z1,fs_z1,fs_z1_rank1,fs_z1_again,fs_z1_again_rank1}.log \
      "$LOGS"/{resume_on_1,resume_on_2,resume_on_2_rank1,yard_b8,yard_b2}.log \
      "$LOGS"/{fs_z2,fs_z2_rank1,single_accum,fs_z2_accum,fs_z2_accum_rank1}.log  # a log of an earlier run must never stand in for this one's
n=$(nvidia-smi -L | grep -c GPU); [ "$n" -ge 2 ] || { echo "error: needs 2 GPUs, found $n" >&2; exit 1; }
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data || exit 1
make -s -j16 train_gpt2cu || exit 1
common=(-e d12 -b 4 -t 256 -d 2048 -x "$STEPS" -v 0 -s 0 -i data/tinyshakespeare/tiny_shakespeare_train.bin)
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([0-9.]*\) .*/\1 \2/p' "$1"; }

half=$((STEPS / 2))
ck1=$(mktemp -d); ck2=$(mktemp -d)  # checkpoints of the single run and of the 2-GPU -z 1 run
./train_gpt2cu "${common[@]}" -n "$half" -o "$ck1" >"$LOGS/single.log" 2>&1 || { tail -n 5 "$LOGS/single.log"; exit 1; }
rc=0
if command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 ./train_gpt2cu "${common[@]}" >"$LOGS/mpi.log" 2>&1 \
        || { tail -n 5 "$LOGS/mpi.log"; rc=1; }
fi
rdv=$(mktemp -d)
./train_gpt2cu "${common[@]}" -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/fs_rank1.log" 2>&1 &
./train_gpt2cu "${common[@]}" -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/fs.log" 2>&1 || { tail -n 5 "$LOGS/fs.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/fs_rank1.log"; rc=1; }
./train_gpt2cu "${common[@]}" -z 1 >"$LOGS/single_z1.log" 2>&1 || { tail -n 5 "$LOGS/single_z1.log"; rc=1; }
rdv=$(mktemp -d)
./train_gpt2cu "${common[@]}" -z 1 -n "$half" -o "$ck2" -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/fs_z1_rank1.log" 2>&1 &
./train_gpt2cu "${common[@]}" -z 1 -n "$half" -o "$ck2" -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/fs_z1.log" 2>&1 || { tail -n 5 "$LOGS/fs_z1.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/fs_z1_rank1.log"; rc=1; }
rdv=$(mktemp -d)  # the same -z 1 run again: runs are deterministic, so every step line must repeat exactly
./train_gpt2cu "${common[@]}" -z 1 -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/fs_z1_again_rank1.log" 2>&1 &
./train_gpt2cu "${common[@]}" -z 1 -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/fs_z1_again.log" 2>&1 || { tail -n 5 "$LOGS/fs_z1_again.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/fs_z1_again_rank1.log"; rc=1; }
rdv=$(mktemp -d)  # ZeRO-2: the rank's gradient shard only, the layers' gradients in slots
./train_gpt2cu "${common[@]}" -z 2 -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/fs_z2_rank1.log" 2>&1 &
./train_gpt2cu "${common[@]}" -z 2 -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/fs_z2.log" 2>&1 || { tail -n 5 "$LOGS/fs_z2.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/fs_z2_rank1.log"; rc=1; }
accum=("${common[@]}"); accum[7]=4096   # common's "-d 2048" -> -d 4096: 4 micro-steps on 1 GPU, 2 per rank on 2
./train_gpt2cu "${accum[@]}" >"$LOGS/single_accum.log" 2>&1 || { tail -n 5 "$LOGS/single_accum.log"; rc=1; }
rdv=$(mktemp -d)
./train_gpt2cu "${accum[@]}" -z 2 -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/fs_z2_accum_rank1.log" 2>&1 &
./train_gpt2cu "${accum[@]}" -z 2 -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/fs_z2_accum.log" 2>&1 || { tail -n 5 "$LOGS/fs_z2_accum.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/fs_z2_accum_rank1.log"; rc=1; }
# resume each run's step-$half checkpoint on the other GPU count (the final checkpoints removed first)
printf -v last_ck '%08d' "$STEPS"
rm -f "$ck1"/*_"$last_ck".bin "$ck2"/*_"$last_ck".bin
./train_gpt2cu "${common[@]}" -o "$ck2" -y 1 >"$LOGS/resume_on_1.log" 2>&1 || { tail -n 5 "$LOGS/resume_on_1.log"; rc=1; }
rdv=$(mktemp -d)
./train_gpt2cu "${common[@]}" -z 1 -o "$ck1" -y 1 -pn 2 -pr 1 -pi fs -pf "$rdv" >"$LOGS/resume_on_2_rank1.log" 2>&1 &
./train_gpt2cu "${common[@]}" -z 1 -o "$ck1" -y 1 -pn 2 -pr 0 -pi fs -pf "$rdv" >"$LOGS/resume_on_2.log" 2>&1 || { tail -n 5 "$LOGS/resume_on_2.log"; rc=1; }
wait $! || { tail -n 5 "$LOGS/resume_on_2_rank1.log"; rc=1; }
rm -rf "$ck1" "$ck2"
steplines() { grep -E '^step +[0-9]+/' "$1" | sed 's/| *[0-9.]* ms |.*//'; }  # loss, norm, lr; not the timing
if [ -s "$LOGS/fs_z1.log" ] && diff <(steplines "$LOGS/fs_z1.log") <(steplines "$LOGS/fs_z1_again.log") >/dev/null &&
   [ "$(steplines "$LOGS/fs_z1.log" | wc -l)" = "$STEPS" ]; then
    echo "2 GPUs -z 1 twice: $STEPS step lines (loss, norm, lr) identical OK"
else
    echo "2 GPUs -z 1 twice: step lines differ FAIL"; rc=1
fi
# information, not a verdict: at d12 -z 2 runs the same kernels, GEMM plans (every gradient slice 256-byte aligned)
# and reduce-scatters of the same bytes as -z 1, so with one micro-step its step lines should repeat -z 1's exactly
if [ -s "$LOGS/fs_z2.log" ] && diff <(steplines "$LOGS/fs_z1_again.log") <(steplines "$LOGS/fs_z2.log") >/dev/null; then
    echo "2 GPUs -z 2 vs -z 1: step lines (loss, norm, lr) identical (expected)"
else
    echo "2 GPUs -z 2 vs -z 1: step lines differ (not a failure by itself: -z 2 is held to the loss bounds below)"
fi

# the rounding yardstick: one GPU, the same tokens per step in 1 and in 4 micro-steps
b8=("${common[@]}"); b8[3]=8; b2=("${common[@]}"); b2[3]=2   # common's "-b 4" -> -b 8, -b 2
./train_gpt2cu "${b8[@]}" >"$LOGS/yard_b8.log" 2>&1 || { tail -n 5 "$LOGS/yard_b8.log"; rc=1; }
./train_gpt2cu "${b2[@]}" >"$LOGS/yard_b2.log" 2>&1 || { tail -n 5 "$LOGS/yard_b2.log"; rc=1; }
# worst |loss diff| of run $2 against run $1 over their common steps: "steps first_step first_diff worst_later"
compare() {
    LC_ALL=C join <(losses "$LOGS/$1.log" | LC_ALL=C sort) <(losses "$LOGS/$2.log" | LC_ALL=C sort) | sort -n | \
        awk '{d = $2 - $3; if (d < 0) d = -d; if (n == 0) {s = $1; f = d} else if (d > w) w = d; n++}
             END {printf "%d %d %.3e %.3e", n, s, f, w}'
}
yard=0
for y in yard_b8 yard_b2; do
    read -r n _ f w <<<"$(compare single $y)"
    [ "$n" = "$STEPS" ] || { echo "rounding yardstick $y: $n of $STEPS steps FAIL"; rc=1; }
    yard=$(awk -v a="$yard" -v b="$f" -v c="$w" 'BEGIN {m = a; if (b > m) m = b; if (c > m) m = c; print m}')
done
bound=$(awk -v y="$yard" -v t="$TOL" 'BEGIN {b = 2 * y; if (b < t) b = t; printf "%.3e", b}')
echo "rounding yardstick (1 GPU, B x 1 and B/4 x 4 micro-steps vs B/2 x 2): max |loss diff| $yard; bound for later steps $bound"
echo "step | loss: single, mpi, fs, -z 1 single, -z 1 fs, yardstick B x 1, B/4 x 4, resumed on 1, resumed on 2"
paste -d' ' <(losses "$LOGS/single.log") <(losses "$LOGS/mpi.log" 2>/dev/null | cut -d' ' -f2) \
    <(losses "$LOGS/fs.log" | cut -d' ' -f2) <(losses "$LOGS/single_z1.log" | cut -d' ' -f2) \
    <(losses "$LOGS/fs_z1.log" | cut -d' ' -f2) <(losses "$LOGS/yard_b8.log" | cut -d' ' -f2) \
    <(losses "$LOGS/yard_b2.log" | cut -d' ' -f2) \
    <(printf '%*s' $((half * 2)) '' | tr ' ' '\n' | head -n $half; losses "$LOGS/resume_on_1.log" | cut -d' ' -f2) \
    <(printf '%*s' $((half * 2)) '' | tr ' ' '\n' | head -n $half; losses "$LOGS/resume_on_2.log" | cut -d' ' -f2) \
    | sed 's/^/  /'
for run in mpi fs single_z1 fs_z1 resume_on_1 resume_on_2 fs_z2 fs_z2_accum; do
    [ -f "$LOGS/$run.log" ] || continue
    ref=single; want=$STEPS
    case $run in
        resume_on_1) ref=fs_z1; want=$((STEPS - half)) ;; resume_on_2) want=$((STEPS - half)) ;;
        fs_z2_accum) ref=single_accum ;;
    esac
    read -r steps first fdiff worst <<<"$(compare $ref $run)"
    verdict=$(awk -v f="$fdiff" -v w="$worst" -v b="$bound" -v n="$steps" -v s="$want" \
              'BEGIN {print (n == s && f <= 1e-4 && w <= b) ? "OK" : "FAIL"}')
    case $run in
        single_z1) what="1 GPU -z 1 vs 1 GPU -z 0 (2 micro-steps each)" ;;
        fs_z1) what="2 GPUs -z 1 (fs) vs 1 GPU with 2 micro-steps" ;;
        resume_on_1) what="1 GPU resuming the 2-GPU -z 1 checkpoint of step $half vs that 2-GPU run" ;;
        resume_on_2) what="2 GPUs -z 1 resuming the 1-GPU checkpoint of step $half vs that 1-GPU run" ;;
        fs_z2) what="2 GPUs -z 2 (fs) vs 1 GPU with 2 micro-steps" ;;
        fs_z2_accum) what="2 GPUs -z 2 (fs), 2 micro-steps each, vs 1 GPU with 4 micro-steps" ;;
        *) what="2 GPUs ($run) vs 1 GPU with 2 micro-steps" ;;
    esac
    echo "$what: $steps steps; step $first |diff| $fdiff (tol 1e-4), later max $worst (bound $bound) $verdict"
    [ "$verdict" = OK ] || rc=1
done
echo "single: $(losses "$LOGS/single.log" | tail -n 1)   mpi: $(losses "$LOGS/mpi.log" 2>/dev/null | tail -n 1)   fs: $(losses "$LOGS/fs.log" | tail -n 1)   -z 1 single: $(losses "$LOGS/single_z1.log" | tail -n 1)   -z 1 fs: $(losses "$LOGS/fs_z1.log" | tail -n 1)   -z 2 fs: $(losses "$LOGS/fs_z2.log" | tail -n 1)"
exit $rc
