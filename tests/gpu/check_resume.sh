#!/usr/bin/env bash
# Resume must be bit-exact. Trains STEPS steps with a checkpoint at STEPS/2 (run a); then starts a second
# run (b) from that checkpoint alone (-y 1) and requires, after STEPS steps:
#   - model_<STEPS>.bin and state_<STEPS>.bin byte-identical to run a's (weights, master weights, AdamW m/v,
#     data-loader position, sampler RNG),
#   - main.log identical (run b inherits run a's log, trimmed at the resume step, and re-writes the rest),
#   - the console output after the resume point identical except the timing fields.
#   tests/gpu/check_resume.sh [extra train_gpt2cu flags]      env: MODEL (d12), STEPS (20), WORK (resume_check)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d12}; STEPS=${STEPS:-20}; WORK=${WORK:-resume_check}
HALF=$((STEPS / 2))
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "error: no data (make data)" >&2; exit 1; }
make -s train_gpt2cu PRECISION="${PRECISION:-BF16}" || exit 1  # never a stale binary
FLAGS=(-e "$MODEL" -b 4 -t 256 -d 2048 -x "$STEPS" -n "$HALF" -v 5 -m 2 -s "$HALF" -g 16 -l 6e-4 -u 3 -c 0.1 -k cosine -q 0.1 "$@")
rm -rf "$WORK"; mkdir -p "$WORK/a" "$WORK/b"
echo "== run a: ${FLAGS[*]} -o $WORK/a"
./train_gpt2cu "${FLAGS[@]}" -o "$WORK/a" >"$WORK/a.log" 2>&1 || { tail "$WORK/a.log"; exit 1; }
h=$(printf %08d "$HALF"); f=$(printf %08d "$STEPS")
cp "$WORK/a/model_$h.bin" "$WORK/a/state_$h.bin" "$WORK/a/main.log" "$WORK/b/"
echo "== run b: resume from step $HALF"
./train_gpt2cu "${FLAGS[@]}" -o "$WORK/b" -y 1 >"$WORK/b.log" 2>&1 || { tail "$WORK/b.log"; exit 1; }
# console after the resume point, without timings, checkpoint notes and the run's counts of graph replays
# (LC_ALL=C grep -a: samples may hold partial UTF-8 sequences, which must not make grep call the log binary)
strip() { sed -n "/(after $HALF steps)/,\$p" "$1" | LC_ALL=C grep -a -v -e '^saved checkpoint' -e '^average over' -e '^device memory' -e '^forward + backward:' \
          | sed -E 's/\| +[0-9.]+ ms \| +[0-9]+ tok\/s \| MFU .*$//'; }
fail=0
for f_ in "model_$f.bin" "state_$f.bin" main.log; do
    if cmp -s "$WORK/a/$f_" "$WORK/b/$f_"; then echo "identical: $f_ ($(stat -c %s "$WORK/a/$f_") bytes)"
    else echo "DIFFERENT: $f_"; fail=1; fi
done
lines=$(strip "$WORK/a.log" | LC_ALL=C grep -a -c '^step')
if [ "$lines" -lt $((STEPS - HALF)) ]; then  # empty == empty must not pass: the resume point must be there
    echo "DIFFERENT: run a's console has $lines step lines after step $HALF, expected $((STEPS - HALF))"; fail=1
elif diff <(strip "$WORK/a.log") <(strip "$WORK/b.log") >"$WORK/console.diff"; then
    echo "identical: console output after step $HALF ($(strip "$WORK/a.log" | LC_ALL=C grep -a -c '^step') step lines)"
else echo "DIFFERENT: console output (see $WORK/console.diff)"; head -n 20 "$WORK/console.diff"; fail=1; fi
LC_ALL=C grep -a '^step' "$WORK/a.log" | tail -n 3
LC_ALL=C grep -a '^step' "$WORK/b.log" | tail -n 3
if [ $fail = 0 ]; then echo "RESUME BIT-EXACT: PASS"; else echo "RESUME BIT-EXACT: FAIL"; exit 1; fi
