#!/usr/bin/env bash
# -fp8 1 in the trainer (llmc/model/gpt2_fp8.cuh). Where FP8 training runs (BF16 builds, compute capability 9+):
#   - the same short run with -fp8 0 and -fp8 1 (same seed, data, flags): every loss finite, FP8's last training
#     loss and last validation loss within TOL (0.1 nats) of BF16's (a short d6 run: a smoke test of the wiring; the
#     quality runs of docs/FP8.md are the real measure);
#   - the first step's gradient norm within 10% of BF16's (a gradient off by a power of two, or a lost bias gradient,
#     shows there first: AdamW would hide it in the losses);
#   - -fp8 1 twice: main.log byte-identical (deterministic); and with -r 0 and -r 2 (the inputs the backward re-casts
#     kept, or recomputed bit for bit) byte-identical to -r 1's;
#   - LLMC_FP8_CHECK_AMAX=1: every amax a producer folds in equal to a pass's, bit for bit, and main.log unchanged;
#   - -fp8 2 (the lm_head's forward in FP8 too) within TOL of BF16 likewise, and twice byte-identical; -fp8 1 with
#     two micro-steps a step (against BF16's with the same) and with the materialized attention backend likewise;
#   - -fp8 1 resumed from a checkpoint: bit-exact as tests/gpu/check_resume.sh checks it;
#   - -fp8 2 -fp8h 16 (delayed scaling where it fuses: qkv's, fc's and fcproj's inputs, fc's output gradient; the
#     weights) within TOL of BF16, with accumulation too, twice and with -r 0 and -r 2 byte-identical, its training
#     losses the same with validation never and every step, its casts' amaxes checked against passes, and -fp8h 4
#     resumed bit-exactly (the histories and scales are run state);
#   - LLMC_FP8_RECAST=1 (attproj's and fcproj's input transposes cast again in the backward with the forward's
#     scales) with -fp8 2 and with -fp8 2 -fp8h 16: main.log byte-identical to the kept transposes' runs (under
#     -fp8h fcproj's is cast by fc's output gradient's cast: gpt2_fp8_mlp_backward), its amaxes checked too;
#   - LLMC_FP8_BLOCKS=1 -fp8 2 (a scale per block): within TOL of BF16, twice byte-identical;
#   - B*T not a multiple of 16, and -fp8h without -fp8, refused in one line before any work.
# Elsewhere (FP32 builds, older GPUs): -fp8 1 refused in one line, naming the flag.
#   tests/gpu/check_fp8_train.sh        env: MODEL (d6), STEPS (60), TOL (0.1), WORK (fp8_check)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d6}; STEPS=${STEPS:-60}; TOL=${TOL:-0.1}; WORK=${WORK:-fp8_check}
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "error: no data (make data)" >&2; exit 1; }
make -s train_gpt2cu PRECISION="${PRECISION:-BF16}" || exit 1  # never a stale binary
rm -rf "$WORK"; mkdir -p "$WORK"
FLAGS=(-e "$MODEL" -b 4 -t 256 -x "$STEPS" -v 20 -m 4 -s 0 -g 16 -l 6e-4 -u 5 -seed 7)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | cut -d. -f1)
[[ "$cc" =~ ^[0-9]+$ ]] || { echo "error: nvidia-smi reports no compute capability ('$cc')" >&2; exit 1; }
precision=$(./train_gpt2cu --version | grep -o -E 'bf16|fp32' | head -n 1)
fail=0
refused() {  # $1: what; the rest: flags. One "error: flag -fp8...: ..." line, exit status 1, nothing trained.
    local what=$1; shift
    if ./train_gpt2cu "$@" >"$WORK/refused.log" 2>&1; then echo "FAIL: $what: ran"; fail=1; return; fi
    if [ "$(grep -c -E '^error: flag -fp8h?: ' "$WORK/refused.log")" = 1 ] && ! grep -q '^step' "$WORK/refused.log"; then
        echo "ok   $what: $(grep '^error:' "$WORK/refused.log")"
    else echo "FAIL: $what:"; cat "$WORK/refused.log"; fail=1; fi
}
if [ "$precision" != bf16 ] || [ "${cc:-0}" -lt 9 ]; then
    refused "-fp8 1 in a $precision build on compute capability $cc" "${FLAGS[@]}" -fp8 1 -o "$WORK/none"
    [ $fail = 0 ] && echo "FP8 TRAINING: PASS (refused here, as it must be)" && exit 0
    echo "FP8 TRAINING: FAIL"; exit 1
fi
refused "-fp8 1 with B*T = 24" -e "$MODEL" -b 1 -t 24 -x 2 -v 0 -s 0 -fp8 1
refused "-fp8h 16 without -fp8" -e "$MODEL" -b 4 -t 64 -x 2 -v 0 -s 0 -fp8h 16
# name:fp8:recompute:extra flags (two micro-steps a step: -d twice B*T; the materialized backend: its amax passes;
# -fp8h: delayed scaling where it fuses, with accumulation too)
for run in bf16:0:1 fp8:1:1 fp8b:1:1 fp8r0:1:0 fp8r2:1:2 fp8h:2:1 fp8hb:2:1 "bf16acc:0:1:-d 2048" \
           "fp8acc:1:1:-d 2048" "fp8mat:1:1:-ab materialized" "fp8d:2:1:-fp8h 16" "fp8db:2:1:-fp8h 16" \
           "fp8dr0:2:0:-fp8h 16" "fp8dr2:2:2:-fp8h 16" "fp8dacc:2:1:-fp8h 16 -d 2048" "fp8dv0:2:1:-fp8h 16 -v 0" \
           "fp8dv1:2:1:-fp8h 16 -v 1"; do
    IFS=: read -r name mode r extra <<<"$run"
    # shellcheck disable=SC2086  # extra: flags, split
    ./train_gpt2cu "${FLAGS[@]}" -fp8 "$mode" -r "$r" $extra -o "$WORK/$name" >"$WORK/$name.log" 2>&1 ||
        { echo "FAIL: the $name run:"; tail -n 20 "$WORK/$name.log"; exit 1; }
done
# the engine switches that change where bytes come from, not which: LLMC_FP8_RECAST (the same bytes, so the same
# main.log) and LLMC_FP8_BLOCKS (other bytes: near BF16, deterministic)
for run in "fp8hrc:LLMC_FP8_RECAST=1:" "fp8drc:LLMC_FP8_RECAST=1:-fp8h 16" "fp8blk:LLMC_FP8_BLOCKS=1:" \
           "fp8blk2:LLMC_FP8_BLOCKS=1:"; do
    IFS=: read -r name switch extra <<<"$run"
    # shellcheck disable=SC2086  # extra: flags, split
    env "$switch" ./train_gpt2cu "${FLAGS[@]}" -fp8 2 -r 1 $extra -o "$WORK/$name" >"$WORK/$name.log" 2>&1 ||
        { echo "FAIL: the $name run ($switch):"; tail -n 20 "$WORK/$name.log"; fail=1; }  # the other checks go on
done
# every amax a producer folds in (LayerNorms, attention, GELUs) against a pass of its own, bit for bit, each micro-step
if LLMC_FP8_CHECK_AMAX=1 ./train_gpt2cu "${FLAGS[@]}" -fp8 2 -r 1 -o "$WORK/fp8chk" >"$WORK/fp8chk.log" 2>&1; then
    echo "ok   -fp8 2 with LLMC_FP8_CHECK_AMAX=1: every folded amax equal to its pass's"
else echo "FAIL: -fp8 2 with LLMC_FP8_CHECK_AMAX=1:"; grep -a -m 3 'error' "$WORK/fp8chk.log"; fail=1; fi
if LLMC_FP8_CHECK_AMAX=1 ./train_gpt2cu "${FLAGS[@]}" -fp8 2 -fp8h 16 -r 1 -o "$WORK/fp8dchk" >"$WORK/fp8dchk.log" 2>&1
then echo "ok   -fp8 2 -fp8h 16 with LLMC_FP8_CHECK_AMAX=1: every folded amax (the delayed casts' too) equal to its pass's"
else echo "FAIL: -fp8 2 -fp8h 16 with LLMC_FP8_CHECK_AMAX=1:"; grep -a -m 3 'error' "$WORK/fp8dchk.log"; fail=1; fi
# the same with LLMC_FP8_RECAST=1: fcproj and fc's backward together, fcproj's input cast again by fc's (dgelu) cast
if LLMC_FP8_CHECK_AMAX=1 LLMC_FP8_RECAST=1 ./train_gpt2cu "${FLAGS[@]}" -fp8 2 -fp8h 16 -r 1 -o "$WORK/fp8drcchk" \
    >"$WORK/fp8drcchk.log" 2>&1
then echo "ok   -fp8 2 -fp8h 16 with LLMC_FP8_RECAST=1 and LLMC_FP8_CHECK_AMAX=1: every folded amax equal to its pass's"
else echo "FAIL: -fp8 2 -fp8h 16 with LLMC_FP8_RECAST=1 and LLMC_FP8_CHECK_AMAX=1:"; grep -a -m 3 'error' "$WORK/fp8drcchk.log"; fail=1; fi
grep -q 'delayed over 16 micro-steps' "$WORK/fp8d.log" ||
    { echo "FAIL: the -fp8h 16 run's start-up does not name delayed scaling"; fail=1; }
grep -q 'linear layers in FP8' "$WORK/fp8.log" || { echo "FAIL: the -fp8 1 run's start-up does not name FP8"; fail=1; }
grep -q "lm_head's forward in FP8" "$WORK/fp8h.log" ||
    { echo "FAIL: the -fp8 2 run's start-up does not name the lm_head"; fail=1; }
last() { grep -E "^s:[0-9]+ $2:" "$WORK/$1/main.log" | tail -n 1 | sed 's/.*://' || true; }
for pair in fp8:bf16 fp8h:bf16 fp8mat:bf16 fp8acc:bf16acc fp8d:bf16 fp8dacc:bf16acc fp8blk:bf16; do
    IFS=: read -r run ref <<<"$pair"
    for kind in trl tel; do
        b=$(last $ref $kind); f=$(last $run $kind)
        if python3 -c "import math,sys; b,f=float('$b' or 'nan'),float('$f' or 'nan'); sys.exit(0 if math.isfinite(f) and abs(f-b)<=$TOL else 1)"; then
            echo "ok   last $kind: $ref $b, $run $f (within $TOL)"
        else echo "FAIL: last $kind: $ref $b, $run $f (tolerance $TOL)"; fail=1; fi
    done
    if grep -q -i -E 'nan|inf' <(sed 's/^s:[0-9]* [a-z]*://' "$WORK/$run/main.log"); then
        echo "FAIL: a non-finite loss in the $run run"; fail=1; fi
done
norm1() { LC_ALL=C grep -a -m 1 -E '^step +1/' "$WORK/$1.log" | sed -E 's/.*\| norm +([^ ]+) .*/\1/' || true; }
for pair in fp8:bf16 fp8h:bf16 fp8mat:bf16 fp8acc:bf16acc; do
    IFS=: read -r run ref <<<"$pair"
    nb=$(norm1 $ref); nf=$(norm1 $run)
    if python3 -c "import math,sys; b,f=float('$nb' or 'nan'),float('$nf' or 'nan'); sys.exit(0 if math.isfinite(f) and abs(f-b)<=0.1*b else 1)"; then
        echo "ok   step 1's gradient norm: $ref $nb, $run $nf (within 10%)"
    else echo "FAIL: step 1's gradient norm: $ref '$nb', $run '$nf' (tolerance 10%)"; fail=1; fi
done
for pair in fp8:fp8b fp8:fp8r0 fp8:fp8r2 fp8h:fp8hb fp8h:fp8chk fp8d:fp8db fp8d:fp8dr0 fp8d:fp8dr2 fp8d:fp8dchk \
            fp8h:fp8hrc fp8d:fp8drc fp8d:fp8drcchk fp8blk:fp8blk2; do
    IFS=: read -r first other <<<"$pair"
    if cmp -s "$WORK/$first/main.log" "$WORK/$other/main.log"; then
        echo "ok   $other main.log identical to $first's ($(wc -l <"$WORK/$first/main.log") lines)"
    else echo "FAIL: $other: main.log differs from $first's"; diff "$WORK/$first/main.log" "$WORK/$other/main.log" | head -n 6; fail=1; fi
done
# evaluation does not change training: the weights an evaluation's forward casts (and whose amax it leaves for the
# history) are the bytes training would have cast, so the training losses are the same with validation never, every
# 20 steps or every step
trl() { grep -E '^s:[0-9]+ trl:' "$WORK/$1/main.log"; }
for other in fp8dv0 fp8dv1; do
    if cmp -s <(trl fp8d) <(trl $other) && [ -n "$(trl fp8d)" ]; then
        echo "ok   $other's training losses identical to fp8d's ($(trl fp8d | wc -l) steps; -v ${other#fp8dv} vs 20)"
    else
        echo "FAIL: $other's training losses differ from fp8d's"; diff <(trl fp8d) <(trl $other) | head -n 6; fail=1
    fi
done
MODEL=$MODEL STEPS=20 WORK="$WORK/resume" bash tests/gpu/check_resume.sh -fp8 1 >"$WORK/resume.log" 2>&1 &&
    echo "ok   -fp8 1 resumed: $(tail -n 1 "$WORK/resume.log")" ||
    { echo "FAIL: -fp8 1 resumed:"; tail -n 15 "$WORK/resume.log"; fail=1; }
# delayed scaling's histories and scales are run state: a resumed run casts with the same scales
MODEL=$MODEL STEPS=20 WORK="$WORK/resume_delayed" bash tests/gpu/check_resume.sh -fp8 2 -fp8h 4 \
    >"$WORK/resume_delayed.log" 2>&1 && echo "ok   -fp8 2 -fp8h 4 resumed: $(tail -n 1 "$WORK/resume_delayed.log")" ||
    { echo "FAIL: -fp8 2 -fp8h 4 resumed:"; tail -n 15 "$WORK/resume_delayed.log"; fail=1; }
if [ $fail = 0 ]; then echo "FP8 TRAINING: PASS"; else echo "FP8 TRAINING: FAIL"; exit 1; fi
