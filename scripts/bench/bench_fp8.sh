#!/usr/bin/env bash
# FP8 (-fp8 $FP8: 1, or 2 with the lm_head's forward) against BF16 (-fp8 0) in one call on one GPU: speed, then loss
# (docs/FP8.md, issue 64's acceptance).
#   speed    for each DEPTH:B of SHAPES (default "12:16 48:8"), T 1024, random tokens: ROUNDS rounds of BF16 then FP8,
#            the median ms/step of steps 10..STEPS of each run, the device memory; "fp8 speed" lines with the ratio
#            BF16 ms / FP8 ms per round and over the rounds' medians.
#   quality  d12 from scratch on Tiny Shakespeare + Alice with the main job's settings
#            (scripts/runs/run_tinyshakespeare.sh) for QSTEPS steps (1000), validating and evaluating an eval file in
#            HellaSwag's format (HELLASWAG, else QEXAMPLES (1024) made from Tiny Shakespeare's held-out start) every
#            25: BF16 with seed 42, BF16 with seed 43 (BF16's own spread), FP8 with seed 42. Prints every
#            validation's losses and one verdict (scripts/bench/fp8_quality.py): FP8 within max(0.02, the spread) at
#            every validation after step 100 and at its best, finite, every step; eval accuracy within 1 point.
#            Then the last evaluation's picks (-hp) compared item by item (scripts/bench/hellaswag_paired.py): FP8
#            against BF16, BF16's second seed against its first. Q12SEED2=1 adds FP8 with seed 43 (its verdict against
#            BF16 seed 43); Q12FLOOR=1 adds BF16 seed 42 with -ab materialized, rounding alone changed (the floor, in
#            FP8's place in a verdict of its own). QFINAL=N keeps each run's last checkpoint and evaluates every final
#            model in the BF16 forward on N examples made as above (the first QEXAMPLES of them the same), paired alike.
#   trajectory  300 steps from TRAJ_MODEL (ref/d12_model.bin, which make test writes), BF16 and FP8: the mean train
#            loss over steps 151-300 within 0.02.
#   quality48  d48 likewise for Q48STEPS (300), BF16 and FP8 at each seed of Q48SEEDS (42; Q48SEED2=1: "42 43"):
#            each seed's verdict (within 0.03 at every validation, FP8's train loss never 0.1 above BF16's, 10-step
#            means; the first seed's with BF16's spread printed), then with several seeds or Q48FLOOR=1 one line over
#            the seeds: the mean of fp8 - bf16 within 0.03 (one seed's gap is as much the seed's luck as FP8's).
#            Q48FLOOR=1 adds a BF16 run at the first seed with -ab materialized, the same numerics rounded otherwise:
#            how far rounding alone moves BF16, the floor FP8's gap is weighed against.
#   profile  for each DEPTH:B of SHAPES, one traced step (LLMC_TRACE, step 6 of 8) with -fp8 0 and -fp8 $FP8: the
#            step's summary line and its kernels by time ("fp8 profile" lines, the TOP longest of each), so where the
#            casts' time goes is measured, not estimated
#   scripts/bench/bench_fp8.sh [speed] [quality] [trajectory] [quality48] [profile]     (speed and quality by default)
# Env: FP8 (1), SHAPES, ROUNDS (2), STEPS (40), QSTEPS (1000), Q12SEED2, Q12FLOOR, QFINAL, Q48STEPS (300), Q48SEEDS,
#      Q48SEED2, Q48FLOOR, QEXAMPLES, HELLASWAG, TOP (30), LOGDIR (bench_logs/fp8), TRAIN_FLAGS (extra flags for all
#      runs), FP8_FLAGS (for the FP8 runs only, e.g. -fp8h 16),
#      QREUSE (a LOGDIR of an earlier call: each quality run found there, q_<name>/main.log, is taken from it instead of
#      run again; the runs are deterministic, so only the FP8 side of a new recipe need run).
set -euo pipefail
cd "$(dirname "$0")/../.."
PARTS=${*:-speed quality}
FP8=${FP8:-1}; SHAPES=${SHAPES:-"12:16 48:8"}; ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-40}; QSTEPS=${QSTEPS:-1000}
LOGDIR=${LOGDIR:-bench_logs/fp8}; TRAIN_FLAGS=${TRAIN_FLAGS:-}; FP8_FLAGS=${FP8_FLAGS:-}
fp8_flags() { [ "$1" != 0 ] && echo "$FP8_FLAGS"; true; }  # mode: FP8_FLAGS for an FP8 run
mkdir -p "$LOGDIR"
[ -x ./train_gpt2cu ] || { echo "error: ./train_gpt2cu not built (make train_gpt2cu)" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

source "$(dirname "$0")/step_times.sh"  # median_ms: the median ms/step of a log's step lines from a step on

if [[ " $PARTS " == *" speed "* ]]; then
    SHARD="$LOGDIR/random_tokens_train_000000.bin"
    [ -f "$SHARD" ] || python3 scripts/reference/make_random_shard.py "$SHARD"
    for shape in $SHAPES; do
        D=${shape%%:*}; B=${shape#*:}; bf=(); f8=()
        for r in $(seq "$ROUNDS"); do
            for mode in 0 "$FP8"; do
                log="$LOGDIR/speed_d${D}_B${B}_fp8${mode}_r$r.log"
                ms=nan  # a failed run keeps its place, so the rounds stay paired
                if ./train_gpt2cu -e "d$D" -b "$B" -t 1024 -x "$STEPS" -v 0 -s 0 -i "$SHARD" -l 3e-4 -fp8 $mode \
                        $TRAIN_FLAGS $(fp8_flags "$mode") >"$log" 2>&1; then ms=$(median_ms "$log" 10); ms=${ms:-nan}
                else tail -n 5 "$log"; echo "fp8 speed d$D B$B: the -fp8 $mode run failed ($log)"; fi
                [ $mode = 0 ] && bf+=("$ms") || f8+=("$ms")
                echo "fp8 speed d$D B$B round $r -fp8 $mode: $ms ms/step, memory $(sed -n 's/^device memory in use at the end: //p' "$log")"
            done
        done
        python3 - "$D" "$B" "${bf[*]:-}" "${f8[*]:-}" <<'RATIO'
import statistics, sys
d, b, bf, f8 = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
pairs = [(x, y) for x, y in zip(bf, f8) if x == x and y == y]  # both runs of the round finished
if pairs:
    mb, mf = statistics.median(x for x, _ in pairs), statistics.median(y for _, y in pairs)
    print(f"fp8 speed d{d} B{b}: bf16 {mb:.2f} ms, fp8 {mf:.2f} ms, speed-up {mb / mf:.3f}x (rounds: "
          + ", ".join(f"{x / y:.3f}" for x, y in pairs) + ")")
RATIO
    done
fi

if [[ " $PARTS " == *" profile "* ]]; then
    SHARD="$LOGDIR/random_tokens_train_000000.bin"
    [ -f "$SHARD" ] || python3 scripts/reference/make_random_shard.py "$SHARD"
    for shape in $SHAPES; do
        D=${shape%%:*}; B=${shape#*:}
        for mode in 0 "$FP8"; do
            log="$LOGDIR/profile_d${D}_B${B}_fp8${mode}.log"
            if ! LLMC_TRACE="$LOGDIR/trace_d${D}_fp8${mode}" ./train_gpt2cu -e "d$D" -b "$B" -t 1024 -x 8 -v 0 -s 0 \
                    -i "$SHARD" -l 3e-4 -fp8 "$mode" $TRAIN_FLAGS $(fp8_flags "$mode") >"$log" 2>&1; then
                tail -n 5 "$log"; echo "fp8 profile d$D B$B: the -fp8 $mode run failed ($log)"; continue
            fi
            grep -a -E '^trace step [0-9]+ rank 0: [0-9.]+ ms: compute' "$log" | head -n 1 |
                sed "s/^trace step [0-9]* rank 0:/fp8 profile d$D B$B -fp8 $mode: step/"
            grep -a -E '^trace step [0-9]+ rank 0: +[0-9.]+ ms +[0-9]+ x ' "$log" | sort -t: -k2 -g -r |
                head -n "${TOP:-30}" | sed "s/^trace step [0-9]* rank 0:/fp8 profile d$D B$B -fp8 $mode:/"
        done
    done
fi

# the quality runs' data: Tiny Shakespeare + Alice (val: the stream's first 32,768 tokens, Tiny Shakespeare's start),
# and an eval file in HellaSwag's format (HELLASWAG, e.g. llm.c's hellaswag_val.bin where it exists; else made from
# Tiny Shakespeare's held-out start by scripts/tools/hellaswag_from_text.py)
quality_data() {
    make -s data tokenizer data/prepro data/hellaswag >/dev/null
    QDATA="$LOGDIR/ts_alice/ts_alice"
    ./data/prepro --vocab-dir data/cache/gpt2 --split-blank-lines --val-tokens 32768 -o "$QDATA" \
        data/cache/tinyshakespeare/input.txt data/cache/alice/pg11_lf.txt >"$LOGDIR/prepro.log" 2>&1 ||
        { cat "$LOGDIR/prepro.log"; exit 1; }
    head -c 90000 data/cache/tinyshakespeare/input.txt >"$LOGDIR/ts_heldout.txt"  # inside the val tokens
    EVAL=${HELLASWAG:-$LOGDIR/eval_ts_heldout.bin}
    [ -n "${HELLASWAG:-}" ] || made_eval "${QEXAMPLES:-1024}" "$EVAL"
    # QFINAL's, from the same text and seed: its first QEXAMPLES are EVAL's examples
    EVAL_FINAL=$LOGDIR/eval_final.bin
    [ -z "${QFINAL:-}" ] || made_eval "$QFINAL" "$EVAL_FINAL"
}
# made_eval N OUT.bin: N examples from the held-out text (seed 1), through data/hellaswag
made_eval() {
    python3 scripts/tools/hellaswag_from_text.py "$LOGDIR/ts_heldout.txt" "$1" 1 "${2%.bin}.jsonl" &&
        ./data/hellaswag --vocab-dir data/cache/gpt2 -o "$2" "${2%.bin}.jsonl" >/dev/null ||
        { echo "fp8 quality: cannot make the eval file $2"; exit 1; }
}
# name:fp8 mode:seed[:flags of this run] ... -- flags: each run into $LOGDIR/q_<name>
quality_runs() {
    local runs=() picks=()
    while [ "$1" != -- ]; do runs+=("$1"); shift; done
    shift
    for run in "${runs[@]}"; do
        IFS=: read -r name mode seed extra <<<"$run"
        picks=()  # with -h 1: the last evaluation's picks, for hellaswag_paired.py
        [[ " $* " == *" -h 1 "* ]] && picks=(-hp "$LOGDIR/q_$name.picks.tsv")
        if [ -n "${QREUSE:-}" ] && [ -f "$QREUSE/q_$name/main.log" ] && [ "$QREUSE" != "$LOGDIR" ]; then
            rm -rf "$LOGDIR/q_$name" && mkdir -p "$LOGDIR/q_$name"
            cp "$QREUSE/q_$name/main.log" "$LOGDIR/q_$name/" && cp "$QREUSE/q_$name.log" "$LOGDIR/" 2>/dev/null || true
            cp "$QREUSE/q_$name/"model_*.bin "$LOGDIR/q_$name/" 2>/dev/null || true
            cp "$QREUSE/q_$name.picks.tsv" "$LOGDIR/" 2>/dev/null || true
            echo "fp8 quality: the $name run taken from $QREUSE"
            continue
        fi
        rm -rf "$LOGDIR/q_$name"
        ./train_gpt2cu "$@" -i "${QDATA}_train_000000.bin" -j "${QDATA}_val_000000.bin" -fp8 "$mode" -seed "$seed" \
            -o "$LOGDIR/q_$name" ${picks[@]+"${picks[@]}"} $TRAIN_FLAGS $(fp8_flags "$mode") $extra \
            >"$LOGDIR/q_$name.log" 2>&1 ||
            { tail -n 5 "$LOGDIR/q_$name.log"; echo "fp8 quality: the $name run failed"; }
    done
}

if [[ " $PARTS " == *" quality "* ]]; then  # d12, the main job's settings (scripts/runs/run_tinyshakespeare.sh)
    quality_data
    runs=(bf16_42:0:42 bf16_43:0:43 "fp8_42:$FP8:42")
    pairs=("bf16_42 fp8_42" "bf16_42 bf16_43")  # hellaswag_paired.py: A B
    [ "${Q12SEED2:-0}" = 1 ] && runs+=("fp8_43:$FP8:43") && pairs+=("bf16_43 fp8_43")
    [ "${Q12FLOOR:-0}" = 1 ] && runs+=("bf16mat_42:0:42:-ab materialized") && pairs+=("bf16_42 bf16mat_42")
    keep=(); [ -n "${QFINAL:-}" ] && keep=(-n "$QSTEPS" -nk 1)  # the final model, for the QFINAL eval
    quality_runs "${runs[@]}" -- -e d12 -b 8 -t 512 -l 6e-4 -u 20 -v 25 -m -1 \
        -k cosine -q 0.1 -c 0.1 -s 0 -x "$QSTEPS" -h 1 -hf "$EVAL" ${keep[@]+"${keep[@]}"}
    python3 scripts/bench/fp8_quality.py --label d12 --bf16 "$LOGDIR/q_bf16_42" --bf16-seed2 "$LOGDIR/q_bf16_43" \
        --fp8 "$LOGDIR/q_fp8_42" --after 100 --tol 0.02 --steps "$QSTEPS" || true
    [ "${Q12SEED2:-0}" = 1 ] && { python3 scripts/bench/fp8_quality.py --label "d12 seed 43" \
        --bf16 "$LOGDIR/q_bf16_43" --bf16-seed2 "$LOGDIR/q_bf16_42" --fp8 "$LOGDIR/q_fp8_43" --after 100 --tol 0.02 \
        --steps "$QSTEPS" || true; }
    [ "${Q12FLOOR:-0}" = 1 ] && { python3 scripts/bench/fp8_quality.py \
        --label "d12 floor (bf16 -ab materialized as fp8)" --bf16 "$LOGDIR/q_bf16_42" --bf16-seed2 "$LOGDIR/q_bf16_43" \
        --fp8 "$LOGDIR/q_bf16mat_42" --after 100 --tol 0.02 --steps "$QSTEPS" || true; }
    if [ -n "${QFINAL:-}" ]; then  # every final model in the BF16 forward, on the QFINAL examples
        for run in "${runs[@]}"; do
            name=${run%%:*}; model=$(ls "$LOGDIR/q_$name/"model_*.bin 2>/dev/null | tail -n 1)
            [ -n "$model" ] && ./train_gpt2cu -e "$model" -x 0 -v 0 -s 0 -b 8 -t 512 -h 1 -hf "$EVAL_FINAL" \
                -hp "$LOGDIR/q_$name.final.tsv" -i "${QDATA}_train_000000.bin" -j "${QDATA}_val_000000.bin" \
                >"$LOGDIR/q_$name.final.log" 2>&1 || echo "fp8 quality: the $name run's final eval failed"
        done
    fi
    for pair in "${pairs[@]}"; do
        read -r a b <<<"$pair"
        for kind in "picks:last evaluation" "final:final, bf16 forward"; do
            file=${kind%%:*}; what=${kind#*:}
            [ -f "$LOGDIR/q_$a.$file.tsv" ] && [ -f "$LOGDIR/q_$b.$file.tsv" ] || continue
            python3 scripts/bench/hellaswag_paired.py "$LOGDIR/q_$a.$file.tsv" "$LOGDIR/q_$b.$file.tsv" \
                --names "$a" "$b" | sed "s/^hellaswag paired:/fp8 quality d12 eval ($what):/" || true
        done
    done
fi

if [[ " $PARTS " == *" trajectory "* ]]; then  # 300 steps from one trained init (TRAJ_MODEL: make test's d12 reference)
    quality_data
    quality_runs traj_bf16:0:42 "traj_fp8:$FP8:42" -- -e "${TRAJ_MODEL:-ref/d12_model.bin}" -b 8 -t 512 -l 6e-4 -u 20 \
        -v 0 -s 0 -x 300
    python3 scripts/bench/fp8_quality.py --label trajectory --bf16 "$LOGDIR/q_traj_bf16" --fp8 "$LOGDIR/q_traj_fp8" \
        --train-mean 151 300 --tol 0.02 --steps 300 || true
fi

if [[ " $PARTS " == *" quality48 "* ]]; then  # d48 (1.5B), Q48STEPS (300), lr 3e-4: within 0.03, no spike
    quality_data
    [ "${Q48SEED2:-0}" = 1 ] && seeds_default="42 43" || seeds_default=42
    read -ra seeds <<<"${Q48SEEDS:-$seeds_default}"
    runs=(); bfdirs=(); f8dirs=(); floor=()
    for seed in "${seeds[@]}"; do
        runs+=("bf16_d48_$seed:0:$seed" "fp8_d48_$seed:$FP8:$seed")
        bfdirs+=("$LOGDIR/q_bf16_d48_$seed"); f8dirs+=("$LOGDIR/q_fp8_d48_$seed")
    done
    if [ "${Q48FLOOR:-0}" = 1 ]; then  # auto is flash at d48's head size 64: materialized rounds otherwise
        runs+=("bf16mat_d48_${seeds[0]}:0:${seeds[0]}:-ab materialized")
        floor=(--bf16-floor "$LOGDIR/q_bf16mat_d48_${seeds[0]}")
    fi
    quality_runs "${runs[@]}" -- -e d48 -b 8 -t 1024 -l 3e-4 -u 50 -v 25 -m 8 -k cosine -q 0.1 -c 0.1 -s 0 \
        -x "${Q48STEPS:-300}"
    q48=(--after 0 --tol 0.03 --spike 0.1 --steps "${Q48STEPS:-300}")
    for i in "${!seeds[@]}"; do  # each seed's own verdict, the first with BF16's spread beside it
        label="d48 seed ${seeds[$i]}"; spread=()
        if [ "$i" = 0 ]; then label=d48; [ ${#seeds[@]} = 1 ] || spread=(--bf16-seed2 "${bfdirs[1]}" --fixed-tol); fi
        python3 scripts/bench/fp8_quality.py --label "$label" --bf16 "${bfdirs[$i]}" --fp8 "${f8dirs[$i]}" \
            "${q48[@]}" "${spread[@]}" || true
    done
    if [ ${#seeds[@]} -gt 1 ] || [ ${#floor[@]} -gt 0 ]; then
        python3 scripts/bench/fp8_quality.py --label d48 --bf16 "${bfdirs[@]}" --fp8 "${f8dirs[@]}" \
            --seeds "${seeds[@]}" "${floor[@]}" "${q48[@]}" || true
    fi
fi
