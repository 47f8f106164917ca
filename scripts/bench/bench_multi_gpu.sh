#!/usr/bin/env bash
# Data-parallel scaling: 1, 2 and 4 GPUs x ZeRO stage (-z 0, 1, 2) x d12 (-b 16) and d48 (-b 8), T = 1024, random
# init, Tiny Shakespeare, the same batch per GPU at every GPU count. For each run: the median ms/step over steps
# FIRST..STEPS (default 3..12: the first steps pay for cuBLAS plans and NCCL's set-up), tok/s over all GPUs, the efficiency (the 1-GPU
# -z 0 run's ms/step of the same model / this run's; the 1-GPU run of the same -z when there is no -z 0 one), the
# device memory in use on rank 0 after its first step (what the trainer prints) and GPU 0's SM clock while busy (a
# 1-GPU run on another GPU: that GPU's; nvidia-smi: the median, and how many samples the power cap held down; n/a
# without nvidia-smi). A run that fails (a -z the trainer does not have, out of memory, fewer GPUs than asked) gets
# n/a in its row; the sweep goes on. One markdown table at
# the end, also written to $LOGS/bench_multi_gpu.md; every run's log stays in $LOGS (rank r > 0: <run>_rank<r>.log).
# Several GPUs: mpirun -np N -x NCCL_NVLS_ENABLE=0 when there is mpirun and the trainer is built with MPI, else the
# file rendezvous (-pi fs) with N processes.
#   scripts/bench/bench_multi_gpu.sh
#   MODELS=d12 GPUS="1 2" ZS="0 1" STEPS=20 scripts/bench/bench_multi_gpu.sh
#   STEPS=150 FIRST=30 scripts/bench/bench_multi_gpu.sh   # the steady state: power-capped GPUs slow down over ~30 steps
#   EACH_GPU=1 scripts/bench/bench_multi_gpu.sh   # before each model's sweep, an independent 1-GPU run on every GPU the
#       largest run uses, all at once (as in the N-GPU run, every GPU busy), and a column more: the efficiency against
#       the slowest of a run's GPUs in that group (a synchronous step goes at its slowest GPU's pace, and power-capped
#       GPUs of one host differ by ~1%). Each of these runs 2 x STEPS steps and its median is over the second half,
#       so that the runs' different start-up times fall before the measured steps. GPUs are numbered in PCI order for
#       CUDA and nvidia-smi alike.
# env: MODELS ("d12 d48"), GPUS ("1 2 4"), ZS ("0 1 2"), STEPS (12), FIRST (3), LOGS ($OUT or bench_mgpu_logs), DATA_MIRROR,
#      ARGS (more trainer flags for every run, e.g. ARGS="-zb 100"); LLMC_* switches and CUDA_DEVICE_MAX_CONNECTIONS
#      reach every rank (LLMC_PEER_COPY=0)
set -uo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MODELS:-"d12 d48"}; GPUS=${GPUS:-"1 2 4"}; ZS=${ZS:-"0 1 2"}; STEPS=${STEPS:-12}; FIRST=${FIRST:-3}
EACH_GPU=${EACH_GPU:-0}
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # rank r's GPU r is nvidia-smi's GPU r
read -ra extra <<<"${ARGS:-}"
LOGS=${LOGS:-${OUT:-bench_mgpu_logs}}
T=1024
DATA=data/tinyshakespeare/tiny_shakespeare_train.bin
export NCCL_NVLS_ENABLE=0  # NVLink hosts without multicast support (README)
[ "$FIRST" -ge 1 ] 2>/dev/null && [ "$STEPS" -ge "$FIRST" ] 2>/dev/null ||
    { echo "error: STEPS=$STEPS FIRST=$FIRST: the median is over steps FIRST..STEPS (FIRST >= 1)" >&2; exit 1; }
[ "$EACH_GPU" = 1 ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ] &&
    { echo "error: EACH_GPU=1 picks each GPU itself: unset CUDA_VISIBLE_DEVICES (it is '$CUDA_VISIBLE_DEVICES')" >&2; exit 1; }
mkdir -p "$LOGS"
[ -f "$DATA" ] || make -s data || exit 1
make -s -j16 train_gpt2cu || exit 1
visible=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
launch=fs
command -v mpirun >/dev/null && ldd ./train_gpt2cu | grep -q libmpi && launch=mpirun
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1
echo "$visible GPUs visible; several GPUs start by $launch; $STEPS steps per run, median over steps $FIRST..$STEPS"

batch_of() { case $1 in d48) echo 8 ;; *) echo 16 ;; esac; }

# The random initialisation of d48 takes ~30 s on the host: each model is initialised once, saved after one step
# (-n 1) and every run loads that file (same weights for every run; the speed does not depend on them).
init_of() {  # model -> a model file
    local dir="$LOGS/init_$1"
    if [ ! -f "$dir/model_00000001.bin" ]; then
        rm -rf "$dir"
        ./train_gpt2cu -e "$1" -b 1 -t 64 -x 1 -n 1 -v 0 -s 0 -i "$DATA" -o "$dir" >"$LOGS/init_$1.log" 2>&1 ||
            { tail -n 3 "$LOGS/init_$1.log" >&2; echo "$1"; return; }
    fi
    echo "$dir/model_00000001.bin"
}

# Runs the trainer on n GPUs; rank 0's output in $1, rank r's in ${1%.log}_rank<r>.log.
run() {  # log, n, flags...
    local log=$1 n=$2 rdv r rc=0
    local pids=()
    shift 2
    if [ "$n" = 1 ]; then
        ./train_gpt2cu "$@" >"$log" 2>&1
        return
    fi
    if [ $launch = mpirun ]; then
        local xs=() v
        for v in $(compgen -e | grep -E '^(LLMC_|CUDA_DEVICE_MAX_CONNECTIONS$)'); do xs+=(-x "$v"); done  # the engine's switches, to every rank
        mpirun --allow-run-as-root -np "$n" -x NCCL_NVLS_ENABLE=0 "${xs[@]}" ./train_gpt2cu "$@" >"$log" 2>&1
        return
    fi
    rdv=$(mktemp -d)
    for ((r = 1; r < n; r++)); do
        ./train_gpt2cu "$@" -pn "$n" -pr "$r" -pi fs -pf "$rdv" >"${log%.log}_rank$r.log" 2>&1 &
        pids[r]=$!
    done
    ./train_gpt2cu "$@" -pn "$n" -pr 0 -pi fs -pf "$rdv" >"$log" 2>&1 || rc=1
    for ((r = 1; r < n; r++)); do wait "${pids[r]}" || rc=1; done
    rm -rf "$rdv"
    return $rc
}

source "$(dirname "$0")/step_times.sh"  # median, median_ms

# The SM clock while a run computes: nvidia-smi samples GPU 0 (rank 0's) every 100 ms; the median clock over the
# samples at >= 90% utilisation and how many of them the driver flags as held down by the power cap. Under the cap,
# the exchange's copies and NVLink traffic cost compute clock even where their time is hidden (docs/MULTI_GPU.md).
smi_query=clocks.sm,utilization.gpu,clocks_event_reasons.sw_power_cap
if command -v nvidia-smi >/dev/null; then
    nvidia-smi -i 0 --query-gpu=$smi_query --format=csv,noheader >/dev/null 2>&1 ||
        smi_query=${smi_query//clocks_event_reasons/clocks_throttle_reasons}  # the older drivers' name
fi
# The samplers and at-once trainers still running; killed if the script stops early.
declare -A live=()
trap '[ ${#live[@]} -gt 0 ] && kill "${!live[@]}" 2>/dev/null' EXIT
trap 'exit 130' INT TERM
clock_start() {  # samples file [GPU index, default 0]; sets smi_pid (empty without nvidia-smi)
    smi_pid=
    command -v nvidia-smi >/dev/null || return 0
    nvidia-smi -i "${2:-0}" --query-gpu=$smi_query --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null &
    smi_pid=$!
    live[$smi_pid]=1
}
clock_stop() {  # samples file, sampler pid (may be empty) -> clock_result: "1695 MHz, 32/32 capped" or n/a
    if [ -n "${2:-}" ]; then
        kill "$2" 2>/dev/null
        wait "$2" 2>/dev/null
        unset "live[$2]"
    fi
    clock_result=n/a
    local busy=() capped clock
    [ -s "$1" ] && mapfile -t busy < <(awk -F', *' '$2 + 0 >= 90 {print $1 + 0, ($3 ~ /^Active/) ? 1 : 0}' "$1")
    rm -f "$1"
    [ ${#busy[@]} -gt 0 ] || return 0
    clock=$(printf '%s\n' "${busy[@]}" | cut -d' ' -f1 | median %d)
    capped=$(printf '%s\n' "${busy[@]}" | awk '{c += $2} END {print c}')
    clock_result="$clock MHz, $capped/${#busy[@]} capped"
}

declare -A ms
rows=()
read -r each_z _ <<<"$ZS"  # the at-once runs use -z 0 when ZS has it (the baseline's), else ZS's first
[[ " $ZS " == *" 0 "* ]] && each_z=0
maxn=1
for n in $GPUS; do [ "$n" -gt "$maxn" ] && maxn=$n; done
[ "$maxn" -gt "$visible" ] && maxn=$visible

# A finished run's table row: name, label (the GPUs column), GPUs, -z, clock[, first step of the median, steps].
row_of() {
    local name=$1 label=$2 n=$3 z=$4 clock=$5 first=${6:-$FIRST} steps=${7:-$STEPS} log="$LOGS/$1.log" m mem toks
    m=$(median_ms "$log" "$first")
    mem=$(sed -n 's/^device memory in use after the first step: \([^(]*[^ (]\) *(.*/\1/p' "$log" | head -n 1)
    if [ -n "$m" ] && grep -qE "^step +$steps/" "$log"; then
        ms[$name]=$m
        toks=$(awk -v m="$m" -v t=$((B * T * n)) 'BEGIN {printf "%.0f", t / (m / 1000)}')
        echo "$m ms/step, $toks tok/s, ${mem:-?} on rank 0, SM clock $clock"
        rows+=("$model|$label|$z|$m|$toks|${mem:-n/a}|$clock|$name")
    else
        echo "failed: n/a"
        rows+=("$model|$label|$z|n/a|n/a|n/a|n/a|$name")
    fi
}

# One run on n GPUs (GPU 0 .. n-1) and its row.
measure() {
    local name=$1 n=$2 z=$3 log="$LOGS/$1.log"
    rm -f "$LOGS/$name"*.log
    echo "==== $model B=$B T=$T -z $z on $n GPU(s) -> $log"
    smi_pid=
    if [ "$n" -gt "$visible" ]; then
        echo "only $visible GPUs visible" >"$log"
    else
        clock_start "$LOGS/$name.smi.csv"
        run "$log" "$n" -e "$init" -b "$B" -t "$T" -x "$STEPS" -z "$z" -v 0 -s 0 -i "$DATA" "${extra[@]}" ||
            tail -n 3 "$log"
    fi
    clock_stop "$LOGS/$name.smi.csv" "$smi_pid"
    row_of "$name" "$n" "$n" "$z" "$clock_result"
}

# EACH_GPU=1: independent 1-GPU runs on GPUs 0 .. maxn-1 at the same time, each GPU's clock sampled, one row each.
measure_each_at_once() {
    local z=$1 g pids=() smis=()
    echo "==== $model B=$B T=$T -z $z: one run on each of GPUs 0..$((maxn - 1)), all at once"
    for ((g = 0; g < maxn; g++)); do
        rm -f "$LOGS/${model}_z${z}_each$g"*.log
        clock_start "$LOGS/${model}_z${z}_each$g.smi.csv" "$g"
        smis[g]=$smi_pid
        CUDA_VISIBLE_DEVICES=$g ./train_gpt2cu -e "$init" -b "$B" -t "$T" -x $((2 * STEPS)) -z "$z" -v 0 -s 0 -i "$DATA" \
            "${extra[@]}" >"$LOGS/${model}_z${z}_each$g.log" 2>&1 &
        pids[g]=$!
        live[${pids[g]}]=1
    done
    for ((g = 0; g < maxn; g++)); do
        wait "${pids[g]}" || tail -n 3 "$LOGS/${model}_z${z}_each$g.log"
        unset "live[${pids[g]}]"
    done
    for ((g = 0; g < maxn; g++)); do
        clock_stop "$LOGS/${model}_z${z}_each$g.smi.csv" "${smis[g]}"
        row_of "${model}_z${z}_each$g" "1 (GPU $g, all at once)" 1 "$z" "$clock_result" $((STEPS + 1)) $((2 * STEPS))
    done
}

for model in $MODELS; do
    B=$(batch_of "$model")
    init=$(init_of "$model")
    [ "$EACH_GPU" = 1 ] && measure_each_at_once "$each_z"
    for z in $ZS; do
        for n in $GPUS; do
            # one GPU has nothing to shard or exchange: its -z 0 run is the baseline (ONE_GPU_ALL_Z=1 runs every -z)
            [ "$n" = 1 ] && [ "$z" != 0 ] && [ "${ONE_GPU_ALL_Z:-0}" != 1 ] && [[ " $ZS " == *" 0 "* ]] && continue
            measure "${model}_z${z}_gpu${n}" "$n" "$z"
        done
    done
done

table="$LOGS/bench_multi_gpu.md"
{
    slowest_head="" slowest_rule=""
    [ "$EACH_GPU" = 1 ] && slowest_head=" against its slowest GPU (all at once) |" slowest_rule="---|"
    echo "| model | B/GPU x T | GPUs | -z | ms/step (median, steps $FIRST..$STEPS) | tok/s | efficiency |$slowest_head device memory (rank 0) | SM clock (GPU 0 or the row's GPU, busy samples: median, power-capped) | log |"
    echo "|---|---|---|---|---|---|---|$slowest_rule---|---|---|"
    for row in "${rows[@]}"; do
        IFS='|' read -r model n z m toks mem clock name <<<"$row"
        bz=0; [ -n "${ms[${model}_z0_gpu1]:-}" ] || bz=$z
        base=${ms[${model}_z${bz}_gpu1]:-}
        eff=n/a
        [ "$m" != n/a ] && [ -n "$base" ] && eff=$(awk -v a="$base" -v b="$m" 'BEGIN {printf "%.3f", a / b}')
        slowest=""
        if [ "$EACH_GPU" = 1 ]; then  # the slowest at-once run among GPUs 0..n-1; n/a if one of them is missing
            local_n=${n%% *} worst=0
            for ((g = 0; g < local_n; g++)); do
                v=${ms[${model}_z${each_z}_each$g]:-}
                [ -n "$v" ] && [ -n "$worst" ] && worst=$(awk -v a="$worst" -v b="$v" 'BEGIN {print (b > a) ? b : a}') || worst=""
            done
            s=n/a
            [ "$m" != n/a ] && [ -n "$worst" ] && [ "$local_n" != 1 ] && s=$(awk -v a="$worst" -v b="$m" 'BEGIN {printf "%.3f", a / b}')
            [ "$local_n" = 1 ] && s=-
            slowest=" $s |"
        fi
        echo "| $model | $(batch_of "$model") x $T | $n | $z | $m | $toks | $eff |$slowest $mem | $clock | $name.log |"
    done
} >"$table"
echo "==== $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $launch"
cat "$table"
echo "(also in $table)"
