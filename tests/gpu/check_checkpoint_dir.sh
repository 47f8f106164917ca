#!/usr/bin/env bash
# The trainer's output directory on a GPU machine: runs never mix or lose checkpoints.
#   1. -nk 1 keeps only this run's newest checkpoint;
#   2. a fresh run into a directory holding another run's checkpoints stops with one line (and touches nothing);
#   3. with -ow 1 it deletes them and starts over;
#   4. a model file that is not the one its state was written with (a crash between the two writes) is skipped
#      by -y 1, which resumes the newest pair that belongs together;
#   5. a crashed writer's temporary file is removed with a note;
#   6. a run resumed from a version 1 run state (no run id) writes checkpoints that -y 1 resumes from.
#   tests/gpu/check_checkpoint_dir.sh            env: WORK (checkpoint_check)
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-checkpoint_check}
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "error: no data (make data)" >&2; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
D="$WORK/out"
FLAGS=(-e d6 -b 2 -t 64 -v 0 -s 0 -l 1e-3)
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
files() { (cd "$D" && ls model_* state_* 2>/dev/null | tr '\n' ' '); }

./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 4 -n 1 -nk 1 >"$WORK/a.log" 2>&1 || { tail -n 5 "$WORK/a.log"; exit 1; }
[ "$(files)" = "model_00000004.bin state_00000004.bin " ] && ok "-nk 1 kept only the newest checkpoint" \
    || bad "-nk 1 left: $(files)"

before=$(ls -l --time-style=+%s.%N "$D" | md5sum)
if ./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 2 >"$WORK/b.log" 2>&1; then bad "a fresh run started among another run's checkpoints"
else
    grep -q "holds checkpoints of another run (steps 4..4); resume it with -y 1" "$WORK/b.log" \
        && [ "$(grep -c '^error' "$WORK/b.log")" = 1 ] && ok "a fresh run stops with one line" \
        || { bad "unexpected message:"; tail -n 3 "$WORK/b.log"; }
    [ "$(ls -l --time-style=+%s.%N "$D" | md5sum)" = "$before" ] && ok "... and leaves the directory as it was" \
        || bad "the refused run changed the directory"
fi

./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 3 -n 1 -ow 1 >"$WORK/c.log" 2>&1 || { tail -n 5 "$WORK/c.log"; exit 1; }
grep -q "note: -ow 1: deleted 2 checkpoint files of an earlier run" "$WORK/c.log" \
    && [ "$(files)" = "model_00000001.bin model_00000002.bin model_00000003.bin state_00000001.bin state_00000002.bin state_00000003.bin " ] \
    && ok "-ow 1 replaced the other run's checkpoints" || bad "-ow 1: $(files)"

# another run's model file under this run's newest name, as a crash between the model and the state leaves it
cp "$WORK/out/model_00000001.bin" "$WORK/model_other.bin"
cp "$WORK/model_other.bin" "$D/model_00000003.bin"
touch "$D/state_00000003.bin.tmp.999999999"
./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 4 -n 1 -y 1 >"$WORK/d.log" 2>&1 || { tail -n 5 "$WORK/d.log"; exit 1; }
grep -q "note: skipping checkpoint 3: $D/model_00000003.bin is not the model file its state was written with" "$WORK/d.log" \
    && grep -q "| steps .* 2 -> 4" "$WORK/d.log" && ok "-y 1 skipped the mixed pair and resumed at step 2" \
    || { bad "resume after a mixed pair:"; grep -E "note|steps" "$WORK/d.log"; }
grep -q "note: removed $D/state_00000003.bin.tmp.999999999, left by a writer that crashed" "$WORK/d.log" \
    && [ ! -e "$D/state_00000003.bin.tmp.999999999" ] && ok "a crashed writer's temporary file was removed" \
    || bad "stale temporary file"
run_a=$(sed -n 's/.*(run \([0-9a-f]*\)).*/\1/p' "$WORK/c.log"); run_d=$(sed -n 's/.*(run \([0-9a-f]*\)).*/\1/p' "$WORK/d.log")
[ -n "$run_a" ] && [ "$run_a" = "$run_d" ] && ok "the resumed run kept its run id ($run_d)" || bad "run ids '$run_a' '$run_d'"

# make state 4 a version 1 file (version field 1, run id and model hash zero, data-loader records without their last
# field, micro_steps, which version 3 added), resume from it, then from the next
f="$D/state_00000004.bin"
python3 - "$f" <<'PY' || exit 1
import struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
rng, rec = struct.unpack_from("<ii", b, 7 * 4)  # header[7], header[8]: record sizes
old, at = rec - 8, 1024 + rng
b = b[:at] + b[at:at + old] + b[at + rec:at + rec + old] + b[at + 2 * rec:]
struct.pack_into("<i", b, 1 * 4, 1)
struct.pack_into("<i", b, 8 * 4, old)
b[11 * 4:15 * 4] = bytes(16)
open(path, "wb").write(b)
PY
./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 5 -n 1 -y 1 >"$WORK/e.log" 2>&1 || { tail -n 5 "$WORK/e.log"; exit 1; }
./train_gpt2cu "${FLAGS[@]}" -o "$D" -x 6 -n 1 -y 1 >"$WORK/f.log" 2>&1 || { tail -n 5 "$WORK/f.log"; exit 1; }
grep -q "| steps .* 4 -> 5" "$WORK/e.log" && grep -q "| steps .* 5 -> 6" "$WORK/f.log" \
    && ok "a run resumed from a version 1 state wrote checkpoints that resume" \
    || { bad "resume after a version 1 state:"; grep -E "note|steps" "$WORK/e.log" "$WORK/f.log"; }

[ $fail = 0 ] && echo "CHECKPOINT DIRECTORY: PASS" || echo "CHECKPOINT DIRECTORY: FAIL"
exit $fail
