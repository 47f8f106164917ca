#!/usr/bin/env bash
# The trainer's CUDA Graph (-cg 1, the default on one GPU) must not change a single bit: trains STEPS steps with
# gradient accumulation (2 micro-steps, so the graph is replayed within and across steps) with -cg 0 and -cg 1
# and requires the final model and optimizer state byte-identical (the state's run id aside) and the same step and
# validation lines (timings aside).
#   tests/gpu/check_graph.sh [extra train_gpt2cu flags]      env: MODEL (d12), STEPS (8), WORK (graph_check)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d12}; STEPS=${STEPS:-8}; WORK=${WORK:-graph_check}
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "error: no data (make data)" >&2; exit 1; }
make -s train_gpt2cu PRECISION="${PRECISION:-BF16}" || exit 1
FLAGS=(-e "$MODEL" -b 4 -t 256 -d 2048 -x "$STEPS" -n "$STEPS" -v 4 -m 2 -s 0 -l 6e-4 -u 3 -c 0.1 "$@")
rm -rf "$WORK"; mkdir -p "$WORK/eager" "$WORK/graph"
for mode in eager graph; do
    cg=0; [ $mode = graph ] && cg=1
    ./train_gpt2cu "${FLAGS[@]}" -cg $cg -o "$WORK/$mode" >"$WORK/$mode.log" 2>&1 || { tail "$WORK/$mode.log"; exit 1; }
done
grep -a -q "one CUDA Graph per micro-step" "$WORK/graph.log" || { echo "DIFFERENT: -cg 1 did not use a graph"; exit 1; }
grep -a -q -E "^forward \+ backward: [1-9][0-9]* CUDA Graphs? captured, [1-9][0-9]* replays" "$WORK/graph.log" ||
    { echo "DIFFERENT: -cg 1 replayed no graph"; exit 1; }
strip() { LC_ALL=C grep -a -e '^step' -e '^val loss' "$1" | sed -E 's/\| +[0-9.]+ ms \| +[0-9]+ tok\/s \| MFU .*$//'; }
fail=0
s=$(printf %08d "$STEPS")
# the state files of two runs differ in the run id only (header ints 11-12, bytes 44..51; llmc/formats/run_state.h)
same_state() { cmp -s <(head -c 44 "$1") <(head -c 44 "$2") && cmp -s <(tail -c +53 "$1") <(tail -c +53 "$2"); }
if cmp -s "$WORK/eager/model_$s.bin" "$WORK/graph/model_$s.bin"; then
    echo "identical: model_$s.bin ($(stat -c %s "$WORK/eager/model_$s.bin") bytes)"
else echo "DIFFERENT: model_$s.bin"; fail=1; fi
if same_state "$WORK/eager/state_$s.bin" "$WORK/graph/state_$s.bin"; then
    echo "identical: state_$s.bin but the run id ($(stat -c %s "$WORK/eager/state_$s.bin") bytes)"
else echo "DIFFERENT: state_$s.bin"; fail=1; fi
lines=$(strip "$WORK/eager.log" | LC_ALL=C grep -a -c '^step' || true)
if [ "$lines" -lt "$STEPS" ]; then echo "DIFFERENT: $lines step lines, expected $STEPS"; fail=1
elif diff <(strip "$WORK/eager.log") <(strip "$WORK/graph.log") >"$WORK/console.diff"; then
    echo "identical: $lines step lines and the validation losses"
else echo "DIFFERENT: step lines (see $WORK/console.diff)"; head -n 20 "$WORK/console.diff"; fail=1; fi
LC_ALL=C grep -a '^step' "$WORK/graph.log" | tail -n 2
if [ $fail = 0 ]; then echo "CUDA GRAPH BIT-EXACT: PASS"; else echo "CUDA GRAPH BIT-EXACT: FAIL"; exit 1; fi
