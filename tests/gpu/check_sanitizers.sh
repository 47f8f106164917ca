#!/usr/bin/env bash
# compute-sanitizer on a GPU machine: memcheck, initcheck, racecheck and synccheck, each over every run below (a
# 2-layer model, C 128, 2 heads of 64, so the flash kernels run: made by scripts/reference/train_gpt2.py; Tiny Shakespeare):
#   train      train_gpt2cu, B 4, 2 steps with validation, HellaSwag (-h 1, the committed fixture) and samples
#   train-z1   ZeRO-1's optimizer on one GPU (-z 1), B 4        train-z2   ZeRO-2's (-z 2), B 4
#   train-mat  the materialized attention backend, B 4           train-fp8  the blocks' linear layers and the lm_head's
#                                                                           forward in FP8 (-fp8 2), B 4; delayed
#                                                                           scaling (-fp8h 4) from its second step
#   train-fp8b the same with a scale per block (LLMC_FP8_BLOCKS=1, -fp8 2: set for compute-sanitizer, as check() does
#              for a command given as env VAR=value ...)
#   train-fp8rc train-fp8 with LLMC_FP8_RECAST=1: from its second step fcproj's input cast again by fc's output
#              gradient's cast (the dgelu cast's second tile, gpt2_fp8_mlp_backward)
#   gen-1      generate_gpt2cu, one prompt, greedy (decode_matvec, the greedy pick folded into the classifier)
#   gen-20     twenty prompts at once, sampled (cuBLASLt's decode products, the GPU picker)
#   serve      serve_gpt2cu: completions together, a chunked prompt, a stream, a bad request, then SIGTERM to the
#              server, which drains and exits so that the tool prints its summary (tests/gpu/sanitize_serve.py)
#   decode     tests/gpu/test_decode --small (prefill, decode steps, a server's slots, chunks, the persistent step,
#              against the full forward); under racecheck one run per test (decode-cached, -slots, -chunks,
#              -recompute, -persistent), side by side as far as the host's memory allows (DECODE_GIB per part,
#              below)
#   fwd, bwd   dev/cuda/attention_forward -cs, attention_backward -cs (every variant at the three small check shapes)
#   fp8-cast   dev/cuda/fp8_cast -c (the FP8 casts, transposes, amax and column sums at every validation shape)
#   fp8-blocks tests/gpu/kernels/test_fp8_blocks (the block-scaled casts and cuBLASLt's block-scaled GEMMs)
# and, for initcheck, the report of issue 63 (train_gpt2cu -e d6 -b 2|4 -t 128 -x 1 -v 1 -m 1 -s 0, the default
# attention path and -ab materialized). Runs go in parallel (JOBS at once; one GPU is enough); each prints one line
# with its tool's summary. Exit 1 on any error in our kernels or any run that does not finish.
#   tests/gpu/check_sanitizers.sh [tool...]   env: LOGDIR (sanitizer_logs), LIMIT (seconds per run, 480; racecheck over
#                                           test_decode twice that), JOBS (nproc),
#                                           ONLY (an extended regex of run names), DATA_MIRROR (../shared/data),
#                                           DECODE_GIB (36: host memory per racecheck part of test_decode)
# What initcheck cannot see written is marked initialized by the engine, so it still checks every read: cuBLASLt's
# outputs (llmc/kernels/matmul/matmul.cuh; its workspace is zeroed once) and what our kernels write by TMA
# (hopper::make_store_map_2d/3d). racecheck's hazards inside cuBLASLt's own kernels are counted apart (the filter
# below, with its reason). A report names a kernel and an address; LLMC_PRINT_MEMORY_MAP=1 makes train_gpt2cu print
# every buffer's address range.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGDIR=${LOGDIR:-sanitizer_logs}
LIMIT=${LIMIT:-480}
JOBS=${JOBS:-$(nproc)}
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
TOOLS=${*:-memcheck initcheck racecheck synccheck}
for tool in $TOOLS; do
    case $tool in memcheck|initcheck|racecheck|synccheck) ;;
        *) echo "error: unknown tool '$tool' (memcheck, initcheck, racecheck, synccheck)" >&2; exit 2 ;; esac
done
mkdir -p "$LOGDIR"
command -v compute-sanitizer >/dev/null || { echo "error: compute-sanitizer not found (it comes with the CUDA toolkit)" >&2; exit 1; }
make -s -j"$JOBS" train_gpt2cu generate_gpt2cu serve_gpt2cu tests/gpu/test_decode tests/gpu/kernels/test_fp8_blocks \
    >"$LOGDIR/build.log" 2>&1 &&
    make -s -C dev/cuda -j"$JOBS" attention_forward attention_backward fp8_cast >>"$LOGDIR/build.log" 2>&1 &&
    make -s data DATA_MIRROR="$DATA_MIRROR" >>"$LOGDIR/build.log" 2>&1 \
    || { tail -n 20 "$LOGDIR/build.log"; exit 1; }
[ -x ./serve_gpt2cu ] || { echo "error: serve_gpt2cu was not built (make says why in $LOGDIR/build.log)" >&2; exit 1; }
small=$LOGDIR/small
if [ ! -f "${small}_model_bf16.bin" ]; then
    python3 scripts/reference/train_gpt2.py --layers 2 --heads 2 --channels 128 --vocab 50257 --max-seq-len 256 -b 2 -t 64 \
        --steps 1 --device cpu -o "$small" >"$LOGDIR/small_model.log" 2>&1 \
        || { echo "error: cannot make the small model (needs python3 with PyTorch): see $LOGDIR/small_model.log" >&2; exit 1; }
fi
model=${small}_model_bf16.bin
[ "${PRECISION:-BF16}" = FP32 ] && model=${small}_model.bin
vocab=data/cache/gpt2
data=(-i data/tinyshakespeare/tiny_shakespeare_train.bin -j data/tinyshakespeare/tiny_shakespeare_val.bin)
train=(./train_gpt2cu -e "$model" -t 128 -x 2 -v 1 -m 1 "${data[@]}")
report=(./train_gpt2cu -e d6 -t 128 -x 1 -v 1 -m 1 -s 0 "${data[@]}")
prompts=$LOGDIR/prompts.txt
for i in $(seq 1 20); do echo "Prompt number $i: once upon a time"; done >"$prompts"
generate=(./generate_gpt2cu -e "$model" --vocab-dir "$vocab" -g 12)

check() {  # tool, name, [env VAR=value...] command... (run under the tool; the variables set for the tool and so
    local tool=$1 name=$2; shift 2  # for the program it starts, which then is the tool's own child, not env's exec)
    local vars=()
    if [ "${1:-}" = env ]; then
        shift
        while [[ "${1:-}" == *=* ]]; do vars+=("$1"); shift; done
    fi
    local log="$LOGDIR/${tool}_${name}.log" t0=$SECONDS
    local sanitizer=(compute-sanitizer --tool "$tool" --print-limit 10000 --error-exitcode 99) limit=$LIMIT
    # racecheck over test_decode is the slowest run by far: each of its five parts gets twice the limit
    [[ "$tool $name" == "racecheck decode"* ]] && limit=$((2 * LIMIT))
    if [ "$name" = serve ]; then  # the driver starts the tool itself, to signal the server inside it
        OMP_NUM_THREADS=2 timeout "$limit" python3 tests/gpu/sanitize_serve.py --sanitizer "${sanitizer[*]}" \
            --model "$model" --vocab-dir "$vocab" --log "$log" --start-timeout "$limit" 2>"${log%.log}.driver.log"
    else
        env OMP_NUM_THREADS=2 "${vars[@]}" timeout "$limit" "${sanitizer[@]}" "$@" >"$log" 2>&1
    fi
    local rc=$? summary errors
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)  # racecheck: "(N errors, M warnings)"
    errors=$(echo "$summary" | grep -oE '[0-9]+ error' | grep -oE '^[0-9]+' | head -n 1)
    if [ "$tool" = racecheck ] && [ -n "$summary" ]; then
        # racecheck cannot follow the mbarrier/TMA ordering inside cuBLASLt's Hopper GEMMs (nvjet_*, seen in the
        # split-K nvjet_sm90_tst_64x64_64x13_2x1_v_bz_splitK_NNT at C = 128): it reports a read and a write there
        # that those barriers order. A hazard counts as cuBLASLt's only when both of its accesses are inside
        # cuBLASLt's kernels; every other one is ours and fails the run. (Excluding those kernels with
        # --kernel-name-exclude instead makes compute-sanitizer 2025 fail with "Internal Sanitizer Error: failed to
        # handle a hardware exception" on this program, so they run instrumented and are filtered here.)
        local library kernels
        read -r library errors kernels < <(awk '/Race reported between/ { a = $0; getline b
                                         if (a ~ /nvjet|cublas/ && b ~ /nvjet|cublas/) {
                                             lib++; if (match(a, /(nvjet|cublasLt::)[A-Za-z0-9_:]*/)) k[substr(a, RSTART, RLENGTH)] = 1
                                         } else ours++ }
                                        END { s = ""; for (n in k) s = s (s == "" ? "" : ",") n
                                              print lib + 0, ours + 0, (s == "" ? "-" : s) }' "$log")
        summary="$summary; $library in cuBLASLt's kernels"
        [ "$kernels" != - ] && summary+=" ($kernels)"
        summary+=", $errors in ours"
        [ $rc -eq 99 ] && rc=0
    fi
    # the program itself must succeed too: a crash or a timeout is a failure, not a pass
    local line
    if [ -z "$summary" ] || { [ $rc -ne 0 ] && [ $rc -ne 99 ]; }; then
        line="FAIL $tool $name: the run did not finish (exit $rc, $((SECONDS - t0)) s), see $log"
    elif [ "${errors:-1}" != 0 ]; then
        line="FAIL $tool $name: ${summary#========= } ($((SECONDS - t0)) s), see $log"
    else
        line="ok   $tool $name: ${summary#========= } ($((SECONDS - t0)) s)"
    fi
    echo "$line" | tee -a "$LOGDIR/results.txt"
    if [ "${line:0:4}" = FAIL ]; then
        grep -m 3 -E "^========= +(Invalid|Uninitialized|Race|Barrier|Error|Warning|Program hit)" -A 3 "$log"
        [ -s "${log%.log}.driver.log" ] && cat "${log%.log}.driver.log"
    fi
    return 0
}
declare -A commands  # "tool name" -> check's arguments, quoted: each run is written once, run (and rerun) from here
remember() { commands["$1 $2"]=$(printf '%q ' "$@"); }  # tool, name, command...
launch() {  # tool, name, command...: check in the background once fewer than JOBS run
    [ -n "${ONLY:-}" ] && ! [[ "$2" =~ $ONLY ]] && return
    remember "$@"
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    check "$@" &
}
rm -f "$LOGDIR/results.txt"
# -fp8 1 where it runs: BF16 builds on compute capability 9+ (elsewhere it is refused, tests/gpu/check_fp8_train.sh)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | cut -d. -f1)
fp8=0; [[ "$cc" =~ ^[0-9]+$ ]] && [ "$cc" -ge 9 ] && ./train_gpt2cu --version | grep -q bf16 && fp8=1
# the longest runs first: racecheck over test_decode, one run per test (together they outlast a run's limit), so
# they do not start last and set the whole script's time. Each part holds about 27 GB of host memory under racecheck
# (measured on an H200 host): four side by side with the other runs got one killed on a 128 GiB machine, so the parts
# run in lanes, one lane per DECODE_GIB (36) of the memory available now, the parts of a lane one after another.
if [[ " $TOOLS " == *" racecheck "* ]]; then
    parts=()
    for t in cached slots chunks recompute persistent; do [ -z "${ONLY:-}" ] || [[ "decode-$t" =~ $ONLY ]] && parts+=("$t"); done
    avail=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null)
    lanes=$(( ${avail:-0} / ${DECODE_GIB:-36} )); [ $lanes -lt 1 ] && lanes=1; [ $lanes -gt ${#parts[@]} ] && lanes=${#parts[@]}
    [ ${#parts[@]} -gt 0 ] && echo "racecheck over test_decode: ${#parts[@]} parts in $lanes lane(s) (${avail:-?} GiB available)"
    for t in "${parts[@]}"; do remember racecheck "decode-$t" ./tests/gpu/test_decode --small --only "$t"; done
    for ((lane = 0; lane < lanes; lane++)); do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
        ( for ((i = lane; i < ${#parts[@]}; i += lanes)); do eval "check ${commands[racecheck decode-${parts[i]}]}"; done ) &
    done
fi
for tool in $TOOLS; do
    launch "$tool" train "${train[@]}" -b 4 -s 2 -g 8 -h 1 -hf tests/fixtures/hellaswag_fixture.bin
    launch "$tool" train-z1 "${train[@]}" -b 4 -s 0 -z 1
    launch "$tool" train-z2 "${train[@]}" -b 4 -s 0 -z 2
    launch "$tool" train-mat "${train[@]}" -b 4 -s 0 -ab materialized
    [ "$fp8" = 1 ] && launch "$tool" train-fp8 "${train[@]}" -b 4 -s 0 -fp8 2 -fp8h 4
    [ "$fp8" = 1 ] && launch "$tool" train-fp8b env LLMC_FP8_BLOCKS=1 "${train[@]}" -b 4 -s 0 -fp8 2
    [ "$fp8" = 1 ] && launch "$tool" train-fp8rc env LLMC_FP8_RECAST=1 "${train[@]}" -b 4 -s 0 -fp8 2 -fp8h 4
    launch "$tool" gen-1 "${generate[@]}" -p "The meaning of life is"
    launch "$tool" gen-20 "${generate[@]}" -pf "$prompts" -st 0.9 -sk 40 -seed 7
    launch "$tool" serve
    [ "$tool" = racecheck ] || launch "$tool" decode ./tests/gpu/test_decode --small
    launch "$tool" fwd ./dev/cuda/attention_forward -cs
    launch "$tool" bwd ./dev/cuda/attention_backward -cs
    launch "$tool" fp8-cast ./dev/cuda/fp8_cast -c
    launch "$tool" fp8-blocks ./tests/gpu/kernels/test_fp8_blocks
    if [ "$tool" = initcheck ]; then
        launch "$tool" report-b2 "${report[@]}" -b 2
        launch "$tool" report-b4 "${report[@]}" -b 4
        launch "$tool" report-b4-mat "${report[@]}" -b 4 -ab materialized
    fi
done
wait
touch "$LOGDIR/results.txt"
# A run killed by SIGKILL (exit 9 or 137) met the host's out-of-memory killer: the decode parts under racecheck hold
# about 27 GB each, and whatever else runs on the host (a make test beside this script) is not ours to count. Each
# such run goes again once, alone, and its second line stands; any other failure stands as it is.
mapfile -t killed < <(sed -nE 's/^FAIL ([a-z]+ [a-z0-9-]+): the run did not finish \(exit (9|137),.*/\1/p' "$LOGDIR/results.txt")
for run in "${killed[@]}"; do
    [ -n "${commands[$run]:-}" ] || continue
    grep -v "^FAIL $run: the run did not finish" "$LOGDIR/results.txt" >"$LOGDIR/results.tmp"
    mv "$LOGDIR/results.tmp" "$LOGDIR/results.txt"
    echo "again, alone (killed beside the other runs): $run"
    eval "check ${commands[$run]}"
done
failed=$(grep -c "^FAIL" "$LOGDIR/results.txt")
echo "sanitizers: $failed of $(wc -l <"$LOGDIR/results.txt") runs with errors or unfinished"
[ "$failed" -eq 0 ]
