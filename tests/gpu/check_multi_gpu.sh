#!/usr/bin/env bash
# Multi-GPU check on N GPUs (N = NGPU or the first argument; default 2, the cheapest; 4 on a 4-GPU host). First the
# copy-engine exchange alone (tests/gpu/test_peer_copy, N processes: the fp64 mean). Then N
# data-parallel ranks must train like 1 GPU with N accumulation micro-steps, because a step's window is the same for
# any GPU count (llmc/data/dataloader.h): rank r of an N-rank run reads slot r, which the single GPU reads in its
# micro-step r, shuffled or not (the single GPU runs -d B*T*N). Both launch paths are run: mpirun -np N (USE_MPI builds)
# and the file rendezvous with N processes. ZeRO-1 (-z 1): N ranks and 1 GPU against the same single-GPU run; a -z 1
# run repeated must print the same step lines (runs are deterministic). Checkpoints across GPU counts: the single run
# and the N-GPU -z 1 run save after STEPS/2 steps; 1 GPU resumes the N-GPU checkpoint and N GPUs (-z 1) the 1-GPU one.
# The layers' buckets go by copy engines by default: -z 0, -z 1 and -z 2 also run with LLMC_PEER_COPY=0 (NCCL only),
# and with one micro-step -z 2's step lines must equal -z 1's on either path. Five runs again with -cg 0 (the kernels
# queued one by one, not replayed from CUDA Graphs between the exchange's calls) must print the same step lines.
# FP8 (-fp8 1, where it runs): N ranks under -z 1 and -z 2 against 1 GPU with N micro-steps, the same bounds.
# ZeRO-2 (-z 2): N ranks against the same single-GPU run, and N ranks with 2 micro-steps each (-d twice as large:
# -z 2 reduce-scatters on every micro-step) against 1 GPU with 2N micro-steps of the same tokens, a -z 1 run of that
# layout beside it; these runs have their own yardstick (below) and learning rate (1e-4: at 3e-4 they spike).
#
# Two bounds, because bf16 training from random weights amplifies rounding:
# - step 1 (and a resumed run's first step): the same weights on the same tokens, only the loss's mean is summed in
#   another order: |diff| <= 1e-4. This is what catches a wrong data window or a checkpoint that lost the weights.
# - every later step: within twice the rounding yardstick, measured here on one GPU: the same run with B*N x 1 and
#   B/2 x 2N micro-steps (same tokens, same maths, only the order of the gradient sums differs). On an H200 that
#   alone moved step 9's loss by 1.9e-2 at N = 2 (12d377d), and 2 ranks by 2.8e-2 (af367ae), so a fixed 0.02 failed
#   on rounding. The bound is never below TOL (0.005).
# Each resumed run is compared with the run whose checkpoint it loaded.
#
# A lost rank (llmc/distributed/rank_watchdog.h): N ranks (-pi fs, d6) save a checkpoint after every step (-n 1); once
# rank 0 has printed step 3, the last rank is killed (-9). Every other rank must exit non-zero within 60 s with exactly
# one line on stderr naming the lost rank (and its pid), and the checkpoint directory must hold only whole files (a
# killed writer's temporary aside): every model file and every state file of one size, and a 1-GPU -y 1 run resumes
# from the newest pair, skipping none.
#   tests/gpu/check_multi_gpu.sh [N]     env: NGPU (2), DATA_MIRROR, STEPS (10), TOL (0.005), LOGS ($OUT or mgpu_logs)
set -uo pipefail
cd "$(dirname "$0")/../.."
NGPU=${1:-${NGPU:-2}}; STEPS=${STEPS:-10}; TOL=${TOL:-0.005}; LOGS=${LOGS:-${OUT:-mgpu_logs}}
export NCCL_NVLS_ENABLE=0  # NVLink hosts without multicast support (README); mpirun passes it on with -x
[[ $NGPU =~ ^[0-9]+$ ]] && [ "$NGPU" -ge 2 ] || { echo "error: NGPU=$NGPU: expected a GPU count of 2 or more" >&2; exit 1; }
mkdir -p "$LOGS"
# a log of an earlier run must never stand in for this one's
rm -f "$LOGS"/peer_copy*.log "$LOGS"/{single,mpi,single_z1,single_accum,single_fp8,yard_big,yard_small,yard_accum_big,yard_accum_small}.log "$LOGS"/{fs,resume_on_,lost_}*.log "$LOGS"/lost_*.err
n=$(nvidia-smi -L | grep -c GPU); [ "$n" -ge "$NGPU" ] || { echo "error: needs $NGPU GPUs, found $n" >&2; exit 1; }
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data || exit 1
make -s -j16 train_gpt2cu || exit 1
B=4; T=256
DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
common=(-e d12 -b "$B" -t "$T" -d $((B * T * NGPU)) -x "$STEPS" -v 0 -s 0 -i "$DATA")
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([0-9.]*\) .*/\1 \2/p' "$1"; }
echo "$NGPU GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1); B=$B T=$T, -d $((B * T * NGPU))"

# N ranks through the file rendezvous: rank 0 writes $LOGS/<name>.log, rank r $LOGS/<name>_rank<r>.log.
run_fs() {  # name, flags...
    local name=$1 rdv r rc=0
    local pids=()
    shift
    rdv=$(mktemp -d)
    for ((r = 1; r < NGPU; r++)); do
        timeout 300 ./train_gpt2cu "$@" -pn "$NGPU" -pr "$r" -pi fs -pf "$rdv" >"$LOGS/${name}_rank$r.log" 2>&1 &
        pids[r]=$!
    done
    timeout 300 ./train_gpt2cu "$@" -pn "$NGPU" -pr 0 -pi fs -pf "$rdv" >"$LOGS/$name.log" 2>&1 || { tail -n 5 "$LOGS/$name.log"; rc=1; }
    for ((r = 1; r < NGPU; r++)); do
        wait "${pids[r]}" || { tail -n 5 "$LOGS/${name}_rank$r.log"; rc=1; }
    done
    rm -rf "$rdv"
    return $rc
}

# the copy-engine exchange alone, against the fp64 mean (N processes, one rendezvous directory)
make -s -j16 tests/gpu/test_peer_copy || exit 1
rdv=$(mktemp -d); pids=()
for ((r = 1; r < NGPU; r++)); do timeout 120 ./tests/gpu/test_peer_copy "$NGPU" "$r" "$rdv" >"$LOGS/peer_copy_rank$r.log" 2>&1 & pids[r]=$!; done
peer_rc=0
timeout 120 ./tests/gpu/test_peer_copy "$NGPU" 0 "$rdv" >"$LOGS/peer_copy.log" 2>&1 || peer_rc=1
for ((r = 1; r < NGPU; r++)); do wait "${pids[r]}" || peer_rc=1; done
rm -rf "$rdv"
grep -E 'round 5|^test_peer_copy:' "$LOGS/peer_copy.log"
[ $peer_rc = 0 ] || { cat "$LOGS"/peer_copy_rank*.log | grep -v ' OK$' | tail -n 5; }

half=$((STEPS / 2))
ck1=$(mktemp -d); ckn=$(mktemp -d)  # checkpoints of the single run and of the N-GPU -z 1 run
./train_gpt2cu "${common[@]}" -n "$half" -o "$ck1" >"$LOGS/single.log" 2>&1 || { tail -n 5 "$LOGS/single.log"; exit 1; }
rc=$peer_rc
if command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root -np "$NGPU" -x NCCL_NVLS_ENABLE=0 ./train_gpt2cu "${common[@]}" >"$LOGS/mpi.log" 2>&1 \
        || { tail -n 5 "$LOGS/mpi.log"; rc=1; }
fi
run_fs fs "${common[@]}" || rc=1
./train_gpt2cu "${common[@]}" -z 1 >"$LOGS/single_z1.log" 2>&1 || { tail -n 5 "$LOGS/single_z1.log"; rc=1; }
run_fs fs_z1 "${common[@]}" -z 1 -n "$half" -o "$ckn" || rc=1
run_fs fs_z1_again "${common[@]}" -z 1 || rc=1  # runs are deterministic: every step line must repeat exactly
LLMC_PEER_COPY=0 run_fs fs_nccl "${common[@]}" || rc=1  # the layers' buckets by NCCL (the default: copy engines)
LLMC_PEER_COPY=0 run_fs fs_z1_nccl "${common[@]}" -z 1 || rc=1
run_fs fs_z2 "${common[@]}" -z 2 || rc=1  # ZeRO-2: the rank's gradient shard only, the layers' gradients in slots
LLMC_PEER_COPY=0 run_fs fs_z2_nccl "${common[@]}" -z 2 || rc=1
# 2 micro-steps per rank; at the default 3e-4 this twice-as-large step spikes (loss 13 at step 6 at 4 GPUs, 1 GPU
# included) and every rounding difference after it grows tenfold, so these runs take 1e-4: they compare roundings
accum=(-e d12 -b "$B" -t "$T" -d $((2 * B * T * NGPU)) -x "$STEPS" -v 0 -s 0 -i "$DATA" -l 1e-4)
./train_gpt2cu "${accum[@]}" >"$LOGS/single_accum.log" 2>&1 || { tail -n 5 "$LOGS/single_accum.log"; rc=1; }
run_fs fs_z1_accum "${accum[@]}" -z 1 || rc=1
run_fs fs_z2_accum "${accum[@]}" -z 2 || rc=1
LLMC_PEER_COPY=0 run_fs fs_z2_accum_nccl "${accum[@]}" -z 2 || rc=1
# the same runs with the kernels queued one by one (-cg 0) instead of replayed from CUDA Graphs between the exchange's
# calls: every step line must be the same
run_fs fs_cg0 "${common[@]}" -cg 0 || rc=1
run_fs fs_z1_cg0 "${common[@]}" -z 1 -cg 0 || rc=1
LLMC_PEER_COPY=0 run_fs fs_z1_nccl_cg0 "${common[@]}" -z 1 -cg 0 || rc=1
run_fs fs_z1_accum_cg0 "${accum[@]}" -z 1 -cg 0 || rc=1
run_fs fs_z2_accum_cg0 "${accum[@]}" -z 2 -cg 0 || rc=1
# FP8 (-fp8 1; BF16 builds on compute capability 9+): N ranks under -z 1 and -z 2 against 1 GPU with N micro-steps.
# Rank r's micro-batch is the single GPU's micro-step r, so every cast takes the same amax and scale on both sides
# (current scaling): only the gradient sums' order differs, and the BF16 runs' bounds apply.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | cut -d. -f1)
if [[ "$cc" =~ ^[0-9]+$ ]] && [ "$cc" -ge 9 ] && ./train_gpt2cu --version | grep -q bf16; then
    ./train_gpt2cu "${common[@]}" -fp8 1 >"$LOGS/single_fp8.log" 2>&1 || { tail -n 5 "$LOGS/single_fp8.log"; rc=1; }
    run_fs fs_z1_fp8 "${common[@]}" -z 1 -fp8 1 || rc=1
    run_fs fs_z2_fp8 "${common[@]}" -z 2 -fp8 1 || rc=1
fi
# resume each run's step-$half checkpoint on the other GPU count (the final checkpoints removed first)
printf -v last_ck '%08d' "$STEPS"
rm -f "$ck1"/*_"$last_ck".bin "$ckn"/*_"$last_ck".bin
./train_gpt2cu "${common[@]}" -o "$ckn" -y 1 >"$LOGS/resume_on_1.log" 2>&1 || { tail -n 5 "$LOGS/resume_on_1.log"; rc=1; }
run_fs resume_on_n "${common[@]}" -z 1 -o "$ck1" -y 1 || rc=1
rm -rf "$ck1" "$ckn"
steplines() { grep -E '^step +[0-9]+/' "$1" | sed 's/| *[0-9.]* ms |.*//'; }  # loss, norm, lr; not the timing
# runs $1 and $2 printed the same STEPS step lines (loss, norm, lr)
same_steplines() {
    [ -s "$LOGS/$1.log" ] && [ -s "$LOGS/$2.log" ] && diff <(steplines "$LOGS/$1.log") <(steplines "$LOGS/$2.log") >/dev/null &&
        [ "$(steplines "$LOGS/$2.log" | wc -l)" = "$STEPS" ]
}
if same_steplines fs_z1 fs_z1_again; then
    echo "$NGPU GPUs -z 1 twice: $STEPS step lines (loss, norm, lr) identical OK"
else
    echo "$NGPU GPUs -z 1 twice: step lines differ FAIL"; rc=1
fi
# at d12 -z 2 runs the same kernels, GEMM plans (every gradient slice 256-byte aligned) and exchanges of the same
# bytes as -z 1 (the same sum kernel with copy engines; the same reduce-scatters with NCCL), so with one micro-step its
# step lines must repeat -z 1's exactly, on either path
for pair in "fs_z1_again fs_z2 copy engines" "fs_z1_nccl fs_z2_nccl NCCL only"; do
    read -r a b what <<<"$pair"
    if same_steplines "$a" "$b"; then
        echo "$NGPU GPUs -z 2 vs -z 1 ($what): $STEPS step lines identical OK"
    else
        echo "$NGPU GPUs -z 2 vs -z 1 ($what): step lines differ FAIL"; rc=1
    fi
done

# -cg 1 (the default) against -cg 0: the graph runs must have replayed graphs, and their step lines must be the same
replays() { sed -n 's/^forward + backward: [0-9]* CUDA Graphs\{0,1\} captured, \([0-9]*\) replays$/\1/p' "$1"; }
for pair in "fs fs_cg0 -z 0" "fs_z1_again fs_z1_cg0 -z 1" "fs_z1_nccl fs_z1_nccl_cg0 -z 1 NCCL only" \
            "fs_z1_accum fs_z1_accum_cg0 -z 1 2 micro-steps" "fs_z2_accum fs_z2_accum_cg0 -z 2 2 micro-steps"; do
    read -r a b what <<<"$pair"
    n=$(replays "$LOGS/$a.log")
    if [ "${n:-0}" -gt 0 ] && same_steplines "$a" "$b"; then
        echo "$NGPU GPUs CUDA Graphs vs -cg 0 ($what): $STEPS step lines identical, $n replays OK"
    else
        echo "$NGPU GPUs CUDA Graphs vs -cg 0 ($what): ${n:-no} replays, step lines differ or missing FAIL"; rc=1
    fi
done

# the rounding yardstick: one GPU, the same tokens per step in 1 and in 2N micro-steps
big=("${common[@]}"); big[3]=$((B * NGPU)); small=("${common[@]}"); small[3]=$((B / 2))  # common's "-b B"
./train_gpt2cu "${big[@]}" >"$LOGS/yard_big.log" 2>&1 || { tail -n 5 "$LOGS/yard_big.log"; rc=1; }
./train_gpt2cu "${small[@]}" >"$LOGS/yard_small.log" 2>&1 || { tail -n 5 "$LOGS/yard_small.log"; rc=1; }
# worst |loss diff| of run $2 against run $1 over their common steps: "steps first_step first_diff worst_later"
compare() {
    LC_ALL=C join <(losses "$LOGS/$1.log" | LC_ALL=C sort) <(losses "$LOGS/$2.log" | LC_ALL=C sort) | sort -n | \
        awk '{d = $2 - $3; if (d < 0) d = -d; if (n == 0) {s = $1; f = d} else if (d > w) w = d; n++}
             END {printf "%d %d %.3e %.3e", n, s, f, w}'
}
# the largest |loss diff| of the runs against ref's (first step included), and twice it (floor TOL): "yard bound"
yardstick() {  # ref, runs...
    local ref=$1 y n f w m=0 status=0
    shift
    for y in "$@"; do
        read -r n _ f w <<<"$(compare "$ref" "$y")"
        [ "$n" = "$STEPS" ] || { echo "rounding yardstick $y: $n of $STEPS steps FAIL" >&2; status=1; }
        m=$(awk -v a="$m" -v b="$f" -v c="$w" 'BEGIN {m = a; if (b > m) m = b; if (c > m) m = c; print m}')
    done
    awk -v y="$m" -v t="$TOL" 'BEGIN {b = 2 * y; if (b < t) b = t; printf "%s %.3e", y, b}'
    return $status
}
ys=$(yardstick single yard_big yard_small) || rc=1
read -r yard bound <<<"$ys"
# the runs with 2 micro-steps per rank follow another trajectory (twice the tokens per step): their own yardstick,
# 1 GPU with the same tokens per step in 1 and in 4N micro-steps against single_accum's 2N
abig=("${accum[@]}"); abig[3]=$((2 * B * NGPU)); asmall=("${accum[@]}"); asmall[3]=$((B / 2))
./train_gpt2cu "${abig[@]}" >"$LOGS/yard_accum_big.log" 2>&1 || { tail -n 5 "$LOGS/yard_accum_big.log"; rc=1; }
./train_gpt2cu "${asmall[@]}" >"$LOGS/yard_accum_small.log" 2>&1 || { tail -n 5 "$LOGS/yard_accum_small.log"; rc=1; }
ys=$(yardstick single_accum yard_accum_big yard_accum_small) || rc=1
read -r ayard abound <<<"$ys"
echo "rounding yardstick (1 GPU, B*$NGPU x 1 and B/2 x $((2 * NGPU)) micro-steps vs B x $NGPU): max |loss diff| $yard;" \
     "bound for later steps $bound"
echo "step | loss: single, mpi, fs, -z 1 single, -z 1 fs, yardstick B*N x 1, B/2 x 2N, resumed on 1, resumed on $NGPU"
paste -d' ' <(losses "$LOGS/single.log") <(losses "$LOGS/mpi.log" 2>/dev/null | cut -d' ' -f2) \
    <(losses "$LOGS/fs.log" | cut -d' ' -f2) <(losses "$LOGS/single_z1.log" | cut -d' ' -f2) \
    <(losses "$LOGS/fs_z1.log" | cut -d' ' -f2) <(losses "$LOGS/yard_big.log" | cut -d' ' -f2) \
    <(losses "$LOGS/yard_small.log" | cut -d' ' -f2) \
    <(printf '%*s' $((half * 2)) '' | tr ' ' '\n' | head -n $half; losses "$LOGS/resume_on_1.log" | cut -d' ' -f2) \
    <(printf '%*s' $((half * 2)) '' | tr ' ' '\n' | head -n $half; losses "$LOGS/resume_on_n.log" | cut -d' ' -f2) \
    | sed 's/^/  /'
echo "rounding yardstick of the $((2 * NGPU))-micro-step runs (1 GPU, B*$((2 * NGPU)) x 1 and B/2 x $((4 * NGPU)) vs B x $((2 * NGPU))):" \
     "max |loss diff| $ayard; bound $abound"
echo "step | loss: 1 GPU B x $((2 * NGPU)), yardstick B*2N x 1, B/2 x 4N, $NGPU GPUs x 2 micro-steps -z 1, -z 2"
paste -d' ' <(losses "$LOGS/single_accum.log") <(losses "$LOGS/yard_accum_big.log" | cut -d' ' -f2) \
    <(losses "$LOGS/yard_accum_small.log" | cut -d' ' -f2) <(losses "$LOGS/fs_z1_accum.log" | cut -d' ' -f2) \
    <(losses "$LOGS/fs_z2_accum.log" | cut -d' ' -f2) | sed 's/^/  /'
for run in mpi fs fs_nccl single_z1 fs_z1 fs_z1_nccl resume_on_1 resume_on_n fs_z2 fs_z2_nccl fs_z1_accum fs_z2_accum \
           fs_z2_accum_nccl fs_z1_fp8 fs_z2_fp8; do
    [ -f "$LOGS/$run.log" ] || continue
    ref=single; want=$STEPS
    case $run in
        resume_on_1) ref=fs_z1; want=$((STEPS - half)) ;; resume_on_n) want=$((STEPS - half)) ;;
        fs_z1_accum | fs_z2_accum | fs_z2_accum_nccl) ref=single_accum ;;
        fs_z1_fp8 | fs_z2_fp8) ref=single_fp8 ;;
    esac
    b=$bound; [[ $run == *_accum* ]] && b=$abound
    read -r steps first fdiff worst <<<"$(compare $ref $run)"
    verdict=$(awk -v f="$fdiff" -v w="$worst" -v b="$b" -v n="$steps" -v s="$want" \
              'BEGIN {print (n == s && f <= 1e-4 && w <= b) ? "OK" : "FAIL"}')
    case $run in
        single_z1) what="1 GPU -z 1 vs 1 GPU -z 0 ($NGPU micro-steps each)" ;;
        fs_z1) what="$NGPU GPUs -z 1 (fs) vs 1 GPU with $NGPU micro-steps" ;;
        fs_nccl) what="$NGPU GPUs (fs, LLMC_PEER_COPY=0: NCCL only) vs 1 GPU with $NGPU micro-steps" ;;
        fs_z1_nccl) what="$NGPU GPUs -z 1 (fs, LLMC_PEER_COPY=0: NCCL only) vs 1 GPU with $NGPU micro-steps" ;;
        resume_on_1) what="1 GPU resuming the $NGPU-GPU -z 1 checkpoint of step $half vs that $NGPU-GPU run" ;;
        resume_on_n) what="$NGPU GPUs -z 1 resuming the 1-GPU checkpoint of step $half vs that 1-GPU run" ;;
        fs_z2) what="$NGPU GPUs -z 2 (fs) vs 1 GPU with $NGPU micro-steps" ;;
        fs_z1_accum) what="$NGPU GPUs -z 1 (fs), 2 micro-steps each, vs 1 GPU with $((2 * NGPU)) micro-steps" ;;
        fs_z2_accum) what="$NGPU GPUs -z 2 (fs), 2 micro-steps each, vs 1 GPU with $((2 * NGPU)) micro-steps" ;;
        fs_z2_nccl) what="$NGPU GPUs -z 2 (fs, NCCL only) vs 1 GPU with $NGPU micro-steps" ;;
        fs_z2_accum_nccl) what="$NGPU GPUs -z 2 (fs, NCCL only), 2 micro-steps each, vs 1 GPU with $((2 * NGPU)) micro-steps" ;;
        fs_z1_fp8) what="$NGPU GPUs -z 1 -fp8 1 (fs) vs 1 GPU -fp8 1 with $NGPU micro-steps" ;;
        fs_z2_fp8) what="$NGPU GPUs -z 2 -fp8 1 (fs) vs 1 GPU -fp8 1 with $NGPU micro-steps" ;;
        *) what="$NGPU GPUs ($run) vs 1 GPU with $NGPU micro-steps" ;;
    esac
    echo "$what: $steps steps; step $first |diff| $fdiff (tol 1e-4), later max $worst (bound $b) $verdict"
    [ "$verdict" = OK ] || rc=1
done
echo "single: $(losses "$LOGS/single.log" | tail -n 1)   mpi: $(losses "$LOGS/mpi.log" 2>/dev/null | tail -n 1)   fs: $(losses "$LOGS/fs.log" | tail -n 1)   -z 1 single: $(losses "$LOGS/single_z1.log" | tail -n 1)   -z 1 fs: $(losses "$LOGS/fs_z1.log" | tail -n 1)   -z 2 fs: $(losses "$LOGS/fs_z2.log" | tail -n 1)"

# ---- a lost rank: the others stop within 60 s with one line each; the checkpoints stay whole
lost_dir=$(mktemp -d); rdv=$(mktemp -d); st=$(mktemp -d)
lost_flags=(-e d6 -b "$B" -t "$T" -d $((B * T * NGPU)) -v 0 -s 0 -i "$DATA" -o "$lost_dir")
victim=$((NGPU - 1))
# each rank in a subshell that records the trainer's pid, then its exit code and the time it ended
for ((r = 0; r < NGPU; r++)); do
    (
        ./train_gpt2cu "${lost_flags[@]}" -x 1000 -n 1 -pn "$NGPU" -pr "$r" -pi fs -pf "$rdv" \
            >"$LOGS/lost_rank$r.log" 2>"$LOGS/lost_rank$r.err" &
        echo $! >"$st/pid$r"
        wait $!
        code=$?
        date +%s.%N >"$st/end$r"
        echo $code >"$st/rc$r"
    ) 2>/dev/null &  # not bash's "Killed" notice
done
for ((i = 0; i < 3000; i++)); do  # rank 0 at step 3 (up to 5 minutes for the start-up), or a rank ended early
    grep -qE '^step +3/' "$LOGS/lost_rank0.log" 2>/dev/null && break
    ls "$st"/rc* >/dev/null 2>&1 && break
    sleep 0.1
done
if grep -qE '^step +3/' "$LOGS/lost_rank0.log" 2>/dev/null && ! ls "$st"/rc* >/dev/null 2>&1; then
    victim_pid=$(cat "$st/pid$victim")
    kill -9 "$victim_pid"
    killed_at=$(date +%s.%N)
    echo "lost rank: rank $victim (pid $victim_pid) killed after rank 0 printed step 3"
    for ((i = 0; i < 650; i++)); do  # 65 s: a survivor still running then has failed
        left=0
        for ((r = 0; r < victim; r++)); do [ -e "$st/rc$r" ] || left=1; done
        [ $left = 0 ] && break
        sleep 0.1
    done
    for ((r = 0; r < victim; r++)); do
        err="$LOGS/lost_rank$r.err"
        if [ ! -e "$st/rc$r" ]; then
            echo "lost rank: rank $r still running 65 s after rank $victim was killed FAIL"; rc=1
            kill -9 "$(cat "$st/pid$r")" 2>/dev/null
            continue
        fi
        code=$(cat "$st/rc$r")
        secs=$(awk -v a="$killed_at" -v b="$(cat "$st/end$r")" 'BEGIN {printf "%.1f", b - a}')
        lines=$(grep -c '' "$err")
        pattern="^error: rank $victim \\(pid $victim_pid on host [^)]*\\) is gone; rank $r stops after step [0-9]+, the last one it completed\$"
        if [ "$code" != 0 ] && awk -v s="$secs" 'BEGIN {exit !(s <= 60)}' && [ "$lines" = 1 ] && grep -qE "$pattern" "$err"; then
            verdict=OK
        else
            verdict=FAIL; rc=1
        fi
        echo "lost rank: rank $r exited with $code ${secs} s after the kill, $lines stderr line(s): $(head -n 3 "$err") $verdict"
    done
else
    echo "lost rank: rank 0 never printed step 3, or a rank ended before it FAIL"; rc=1
    tail -n 5 "$LOGS"/lost_rank*.log "$LOGS"/lost_rank*.err
    for ((r = 0; r < NGPU; r++)); do kill -9 "$(cat "$st/pid$r" 2>/dev/null)" 2>/dev/null; done
fi
wait  # every rank's subshell
# every model file one size, every state file one size; a killed writer's temporary is allowed (the next run removes it)
sizes() { for f in "$lost_dir"/$1_*.bin; do [ -e "$f" ] && stat -c %s "$f"; done | sort -u | wc -l; }
newest=$(cd "$lost_dir" && for f in state_*.bin; do s=${f#state_}; s=${s%.bin}; [ -e "model_$s.bin" ] && echo $((10#$s)); done | tail -n 1)
echo "lost rank: checkpoint directory: $(cd "$lost_dir" && ls | tr '\n' ' ')"
if [ -z "$newest" ]; then
    echo "lost rank: no complete checkpoint written FAIL"; rc=1
elif [ "$(sizes model)" != 1 ] || [ "$(sizes state)" != 1 ]; then
    echo "lost rank: checkpoint files of different sizes (a half-written one) FAIL"; ls -l "$lost_dir"; rc=1
elif ./train_gpt2cu "${lost_flags[@]}" -x $((newest + 1)) -y 1 >"$LOGS/lost_resume.log" 2>&1 &&
     grep -qE "\| steps .* $newest -> $((newest + 1))" "$LOGS/lost_resume.log" &&
     ! grep -q "skipping checkpoint" "$LOGS/lost_resume.log"; then
    echo "lost rank: 1 GPU resumed the newest checkpoint (step $newest), skipping none OK"
    grep '^note' "$LOGS/lost_resume.log" | sed 's/^/  /'
else
    echo "lost rank: 1 GPU -y 1 from the checkpoints left FAIL"; tail -n 5 "$LOGS/lost_resume.log"; rc=1
fi
rm -rf "$lost_dir" "$rdv" "$st"
exit $rc
