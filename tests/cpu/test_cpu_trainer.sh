#!/usr/bin/env bash
# End-to-end checks of ./train_gpt2, the CPU trainer, on a small real run (GPT-2 d6 from scratch on Alice in
# Wonderland, B=2 T=32, made into shards here by data/prepro from the data mirror):
#   - every bad input is one line "error: ..." naming the flag or file, and a non-zero exit, before training;
#   - the step lines and main.log in the shared formats (format_step_line, llm.c's "s:N trl:/tel:"), validation,
#     a sample through the tokenizer file, checkpoints (an llm.c fp32 model file + a run state whose optimizer
#     state is [m][v]) that load again as a model (-e);
#   - resume (-y 1) continues bit for bit (model, state, main.log, console), and 1 thread gives the same weights
#     as several; the GPU trainer's flags that mean nothing here are named in one note.
# Prints one line per check; exit 1 if any failed.
set -u
set -o pipefail
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, ok, bad, expect_error, end_checks
use_test_data
for tool in ./train_gpt2 ./data/prepro ./tokenizer; do
    [ -x "$tool" ] || { echo "error: $tool not built (make train_gpt2 data/prepro tokenizer)"; exit 1; }
done
begin_checks

./data/prepro --vocab-dir "$DATA/gpt2" --split-blank-lines --val-tokens 4096 -j 2 -o "$TMP/alice" \
    "$DATA/alice/pg11_lf.txt" >/dev/null 2>&1 && ./tokenizer export --vocab-dir "$DATA/gpt2" -o "$TMP/tok.bin" >/dev/null 2>&1 ||
    { echo "error: cannot make the test shards with data/prepro and ./tokenizer"; exit 1; }
TRAIN=$TMP/alice_train_000000.bin VAL=$TMP/alice_val_000000.bin
RUN=(./train_gpt2 -e d6 -i "$TRAIN" -j "$VAL" -tok "$TMP/tok.bin" -b 2 -t 32 -l 1e-3 -u 2 -c 0.1 -k cosine -q 0.1 -m 2 -g 8)

# ---- bad inputs: one line on stderr naming the flag or file, exit non-zero, nothing trained
head -c 5000 tests/fixtures/tiny_model.bin >"$TMP/truncated.bin"
mkdir -p "$TMP/other"
expect_error "bad number" "error: flag -b: expected an integer >= 1, got 'x' (./train_gpt2 --help lists the flags)" ./train_gpt2 -b x
expect_error "unknown flag" "unknown flag -zz" ./train_gpt2 -zz 1
expect_error "missing train shards" "$TMP/nope_*.bin: no data shard matches this pattern" "${RUN[@]}" -i "$TMP/nope_*.bin"
expect_error "missing val shards" "$TMP/noval.bin: no data shard matches" "${RUN[@]}" -j "$TMP/noval.bin"
expect_error "missing model file" "$TMP/nope.bin" "${RUN[@]}" -e "$TMP/nope.bin"
expect_error "truncated model file" "truncated.bin: file is 5000 bytes" "${RUN[@]}" -e "$TMP/truncated.bin"
expect_error "T beyond the model" "flag -t: T = 128 exceeds the model's max sequence length 64" "${RUN[@]}" -e tests/fixtures/tiny_model.bin -t 128
expect_error "tokens outside the vocabulary" "is >= vocab_size 1000" "${RUN[@]}" -e tests/fixtures/tiny_model.bin -s 0 -x 1
expect_error "several processes" "flag -pn: the CPU trainer runs one process" "${RUN[@]}" -pn 2
expect_error "-fp8 1 on the CPU" "flag -fp8: the CPU trainer has no FP8 training" "${RUN[@]}" -fp8 1
expect_error "-fp8h 16 on the CPU" "flag -fp8h: the CPU trainer has no FP8 training" "${RUN[@]}" -fp8h 16
expect_error "sample longer than T" "flag -g: 32 tokens do not fit in T = 32" "${RUN[@]}" -g 32
expect_error "-d not a multiple of B*T" "flag -d: 100 tokens per step is not a multiple of B*T*processes = 2*32*1 = 64" "${RUN[@]}" -d 100
expect_error "-y 1 without -o" "flag -y 1 needs -o" "${RUN[@]}" -y 1
expect_error "schedule" "flag -k: expected cosine, linear, constant or wsd, got 'cos'" "${RUN[@]}" -k cos
if ./train_gpt2 --help >"$TMP/help.out" 2>&1 && grep -q '^usage: ./train_gpt2 ' "$TMP/help.out" && grep -q '^  -seed ' "$TMP/help.out" &&
    ! grep -q '^  -ab ' "$TMP/help.out"; then ok "--help: the CPU trainer's flags"; else bad "--help"; fi

# ---- a run: step lines, validation, samples, checkpoints, main.log
STEP_LINE='^step +[0-9]+/6 \| loss [0-9]+\.[0-9]{6} \| norm +[0-9]+\.[0-9]{4} \| lr [0-9]\.[0-9]{3}e[-+][0-9]{2} \| +[0-9]+\.[0-9]{2} ms \| +[0-9]+ tok/s \| MFU n/a$'
if "${RUN[@]}" -x 6 -n 3 -v 3 -s 3 -o "$TMP/a" -r 1 -cg 0 >"$TMP/a.log" 2>&1; then ok "run a: 6 steps, checkpoints at 3 and 6"
else bad "run a failed:"; tail -5 "$TMP/a.log"; fi
n=$(grep -cE "$STEP_LINE" "$TMP/a.log")
[ "$n" = 6 ] && ok "6 step lines in format_step_line's format" || { bad "step lines: $n of 6 match"; grep '^step' "$TMP/a.log" | head -2; }
grep -q '^note: flags -r, -cg are for the GPU trainer; the CPU trainer ignores them$' "$TMP/a.log" &&
    ok "GPU-only flags: one note naming them" || bad "no note on -r, -cg"
[ "$(grep -c '^val loss [0-9.]* (after [036] steps)$' "$TMP/a.log")" = 3 ] && ok "validation at steps 0, 3, 6" || bad "validation lines"
[ "$(grep -c '^generating:$' "$TMP/a.log")" = 2 ] && ok "samples at steps 3 and 6" || bad "sample blocks"
want_log=$(printf 's:0 tel:\ns:0 trl:\ns:1 trl:\ns:2 trl:\ns:3 tel:\ns:3 trl:\ns:4 trl:\ns:5 trl:\ns:6 tel:')
got_log=$(sed -E 's/(t[er]l:).*/\1/' "$TMP/a/main.log" 2>/dev/null)
[ "$got_log" = "$want_log" ] && ok "main.log: llm.c's s:N trl:/tel: lines" || { bad "main.log:"; head -3 "$TMP/a/main.log"; }
model_header=$(od -An -t d4 -N 32 "$TMP/a/model_00000006.bin" 2>/dev/null | xargs)
[ "$model_header" = "20240326 3 1024 50257 6 6 384 50304" ] && ok "model file: llm.c's fp32 header (v3, d6)" ||
    bad "model file header: $model_header"
P=$(( ($(stat -c %s "$TMP/a/model_00000006.bin") - 1024) / 4 ))
opt_bytes=$(od -An -t u4 -j 36 -N 8 "$TMP/a/state_00000006.bin" | awk '{print $1 + $2 * 4294967296}')
[ "$opt_bytes" = $((2 * P * 4)) ] && ok "run state: optimizer state [m][v], $opt_bytes bytes for $P parameters" ||
    bad "optimizer state is $opt_bytes bytes, expected $((2 * P * 4))"
if command -v python3 >/dev/null; then
    python3 scripts/tools/plot_loss.py "$TMP/a/main.log" -o "$TMP/a/loss.png" >"$TMP/plot.log" 2>&1 && [ -s "$TMP/a/loss.png" ] &&
        ok "plot_loss.py reads main.log: $(cat "$TMP/plot.log")" || { bad "plot_loss.py:"; cat "$TMP/plot.log"; }
fi

# ---- resume: bit for bit
mkdir -p "$TMP/b"
cp "$TMP/a/model_00000003.bin" "$TMP/a/state_00000003.bin" "$TMP/a/main.log" "$TMP/b/"
if "${RUN[@]}" -x 6 -n 3 -v 3 -s 3 -o "$TMP/b" -y 1 >"$TMP/b.log" 2>&1; then ok "run b: resumed from step 3"
else bad "run b failed:"; tail -5 "$TMP/b.log"; fi
for f in model_00000006.bin state_00000006.bin main.log; do
    cmp -s "$TMP/a/$f" "$TMP/b/$f" && ok "resume: $f identical" || bad "resume: $f differs"
done
strip() { sed -n '/(after 3 steps)/,$p' "$1" | LC_ALL=C grep -a -v -e '^saved checkpoint' -e '^average over' |
          sed -E 's/\| +[0-9.]+ ms \| +[0-9]+ tok\/s \| MFU .*$//'; }
[ "$(strip "$TMP/a.log" | grep -c '^step')" = 3 ] && diff <(strip "$TMP/a.log") <(strip "$TMP/b.log") >/dev/null &&
    ok "resume: console after step 3 identical (losses, norms, validation, sample)" || bad "resume: console differs"

# ---- threads: the same weights from 1 thread
if OMP_NUM_THREADS=1 "${RUN[@]}" -x 6 -n 6 -v 0 -s 0 -o "$TMP/c" >"$TMP/c.log" 2>&1 &&
    cmp -s "$TMP/a/model_00000006.bin" "$TMP/c/model_00000006.bin"; then ok "1 thread: the same model bits after 6 steps"
else bad "1 thread: different weights (or the run failed)"; tail -3 "$TMP/c.log"; fi

# ---- a checkpoint's model file as -e; a fresh run refuses -o with another run's checkpoints
"${RUN[@]}" -e "$TMP/a/model_00000006.bin" -x 1 -v 0 -s 0 >"$TMP/e.log" 2>&1 && grep -q "model_00000006.bin" "$TMP/e.log" &&
    ok "-e <checkpoint model file> trains on" || { bad "-e <model file>:"; tail -3 "$TMP/e.log"; }
expect_error "fresh run in another run's -o" "holds checkpoints of another run (steps 3..6)" "${RUN[@]}" -x 6 -o "$TMP/a"

# ---- HellaSwag (-h 1) on the project's own fixture (6 examples; rows up to 47 tokens, so T 64 and B 4 = 1 example)
HS=(./train_gpt2 -e d6 -j "$VAL" -tok "$TMP/tok.bin" -b 4 -t 64 -m 2 -s 0 -h 1 -hf tests/fixtures/hellaswag_fixture.bin)
if "${HS[@]}" -x 0 -i "$TMP/no_train_*.bin" -hp "$TMP/picks.tsv" -o "$TMP/h" >"$TMP/h.log" 2>&1; then
    ok "-x 0 -h 1: evaluated without training data"
else bad "-x 0 -h 1 failed:"; tail -3 "$TMP/h.log"; fi
hs_line=$(grep -E '^HellaSwag: [0-9]+/6 = [01]\.[0-9]{6}$' "$TMP/h.log")
hs_correct=$(echo "$hs_line" | sed -E 's/^HellaSwag: ([0-9]+)\/.*/\1/')
[ "$(echo "$hs_line" | grep -c .)" = 1 ] && [ "$(grep -c '^step' "$TMP/h.log")" = 0 ] &&
    ok "llm.c's line once, no step: $hs_line" || { bad "HellaSwag line:"; grep -i hellaswag "$TMP/h.log"; }
picked=$(awk -F'\t' 'NR > 1 && $2 == $3 { n++ } END { print n + 0 }' "$TMP/picks.tsv" 2>/dev/null)
endings=$(awk -F'\t' 'NR > 1 { print $1, $2, $9, $10, $11, $12 }' "$TMP/picks.tsv" 2>/dev/null | tr '\n' ';')
[ "$picked" = "$hs_correct" ] && ok "-hp: the picks file agrees ($picked correct)" || bad "-hp: $picked correct in the file, $hs_correct printed"
# example, label, tokens per ending: what the converter wrote for the fixture (tests/cli/test_hellaswag.sh)
[ "$endings" = "0 0 9 9 9 9;1 1 8 8 7 8;2 0 19 12 12 10;3 2 10 7 9 9;4 3 8 8 8 12;5 0 12 12 9 10;" ] &&
    ok "-hp: each example's label and ending lengths as in the file" || bad "-hp rows: $endings"
grep -qE '^s:0 eval:[01]\.[0-9]{4}$' "$TMP/h/main.log" && grep -q '^s:0 tel:' "$TMP/h/main.log" &&
    ok "main.log: llm.c's s:0 eval: line" || { bad "main.log eval line:"; cat "$TMP/h/main.log"; }
"${HS[@]}" -x 4 -v 2 -i "$TRAIN" >"$TMP/h4.log" 2>&1 &&
    [ "$(grep -E '^(HellaSwag|step +[24]/)' "$TMP/h4.log" | cut -c1-10 | tr '\n' ' ')" = "step     2 HellaSwag: step     4 HellaSwag: " ] &&
    [ "$(grep -c '^val loss' "$TMP/h4.log")" = 3 ] &&
    ok "-x 4 -v 2 -h 1: HellaSwag after steps 2 and 4 (not 0, as llm.c), validation at 0, 2, 4" ||
    { bad "-h 1 during training:"; grep -E '^(HellaSwag|val loss)' "$TMP/h4.log"; }
expect_error "-h 1 without the eval file" "flag -h 1: no HellaSwag eval file at $TMP/none.bin (name one with -hf" "${HS[@]}" -x 0 -hf "$TMP/none.bin"
expect_error "-h 1 with B not a multiple of 4" "multiple of 4 (one row per ending), not 2" "${HS[@]}" -x 0 -b 2
expect_error "-h 1 with rows longer than T" "more than the sequence length 32" "${HS[@]}" -x 0 -t 32
expect_error "-h 2" "flag -h: expected 0 or 1 (-h alone prints the usage), got '2'" ./train_gpt2 -h 2
./train_gpt2 -h >"$TMP/h_help.out" 2>&1 && grep -q '^usage: ' "$TMP/h_help.out" && ok "-h alone: the usage" || bad "-h alone"

end_checks train_gpt2
