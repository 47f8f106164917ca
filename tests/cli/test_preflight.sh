#!/usr/bin/env bash
# The trainers' preflight (llmc/app/train/preflight.h) on this machine, GPU or not: every bad input below gets exactly one
# line on stderr, "error: ..." naming the file or flag, a non-zero exit, in under a second, with nothing trained or
# written; for train_gpt2 and, where nvcc built it, train_gpt2cu (which checks before any CUDA call, so here, without
# a GPU, the bad input is named and not the missing GPU). Then --check: exit 0, the start-up table's host rows, no
# output directory made; and, without a GPU, train_gpt2cu with good inputs reaches the GPU check.
# The shards are made here: a 1024-byte header and zero tokens, one token set where a case needs it.
# Prints one line per check; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # begin_checks, ok, bad, end_checks
begin_checks

le32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)))"; }
make_shard() {  # file, tokens in the header, [tokens in the file (default: the header's)]
    { le32 20240520; le32 1; le32 "$2"; head -c 1012 /dev/zero; head -c $((${3:-$2} * 2)) /dev/zero; } >"$1"
}
set_token() {  # file, token offset, id (< 65536)
    printf "$(printf '\\x%02x\\x%02x' $(($3 & 255)) $(($3 >> 8)))" | dd of="$1" bs=1 seek=$((1024 + 2 * $2)) conv=notrunc 2>/dev/null
}
MODEL=tests/fixtures/tiny_model.bin  # V 1000, max T 64
make_shard "$TMP/train_000.bin" 4096
make_shard "$TMP/train_001.bin" 1000000
make_shard "$TMP/val.bin" 4096
make_shard "$TMP/deep_000.bin" 4096
make_shard "$TMP/deep_001.bin" 1000000
set_token "$TMP/deep_001.bin" 987654 1000                # one token = V, deep inside the second shard
cp "$TMP/val.bin" "$TMP/val_bad.bin"; set_token "$TMP/val_bad.bin" 4000 65535
make_shard "$TMP/short.bin" 50                            # fewer than one window of B*T+1 = 65
make_shard "$TMP/truncated.bin" 100000 99999              # the header promises one token more
head -c 5000 "$MODEL" >"$TMP/truncated_model.bin"
touch "$TMP/a_file"
mkdir -p "$TMP/hf_empty"
printf 'not a tokenizer' >"$TMP/bad_tok.bin"
make_shard "$TMP/not_eval.bin" 16
# a model the GPU engine cannot train (C = 36: rows not 16-byte aligned), which the CPU trainer takes: L 1, NH 3,
# V 64 (Vp 128), max T 64, zero weights: 128*36 + 64*36 + (12*36*36 + 13*36) + 2*36 = 23004 floats
{ le32 20240326; le32 3; le32 64; le32 64; le32 1; le32 3; le32 36; le32 128; head -c $((1024 - 32)) /dev/zero
  head -c $((23004 * 4)) /dev/zero; } >"$TMP/c36_model.bin"
# a finished run of one step, whose checkpoint a second run with another T would resume
if ./train_gpt2 -e "$MODEL" -i "$TMP/train_000.bin" -j "$TMP/val.bin" -b 2 -t 32 -x 1 -n 1 -v 0 -s 0 -o "$TMP/ckpt" \
    >"$TMP/ckpt.log" 2>&1 && [ -f "$TMP/ckpt/state_00000001.bin" ]; then ok "a checkpoint to resume (train_gpt2, 1 step)"
else bad "cannot make a checkpoint with train_gpt2:"; tail -3 "$TMP/ckpt.log"; fi

BASE=(-e "$MODEL" -i "$TMP/train_*.bin" -j "$TMP/val.bin" -b 2 -t 32 -x 2 -v 1 -s 0)
# name | expected text on the one stderr line | the flags after BASE (later flags win)
CASES=(
    "train shards missing|$TMP/nope_*.bin: no data shard matches this pattern|-i $TMP/nope_*.bin"
    "train shard truncated|$TMP/truncated.bin: file is 201022 bytes but its header (100000 tokens) implies 201024 (truncated)|-i $TMP/truncated.bin"
    "train shard not a shard|$MODEL: not a token data shard (magic 20240326, expected 20240520)|-i $MODEL"
    "token >= V deep in the 2nd shard|$TMP/deep_001.bin: token 1000 at token offset 987654 is >= vocab_size 1000|-i $TMP/deep_*.bin"
    "token >= V in a val shard|$TMP/val_bad.bin: token 65535 at token offset 4000 is >= vocab_size 1000|-j $TMP/val_bad.bin"
    "shard shorter than a window|$TMP/short.bin: has 50 tokens, fewer than one global window of 65|-i $TMP/short.bin"
    "model file missing|$TMP/nope.bin: cannot open (No such file or directory)|-e $TMP/nope.bin"
    "model header bad|$TMP/val.bin: not a GPT-2 model file (magic 20240520, expected 20240326)|-e $TMP/val.bin"
    "model file truncated|$TMP/truncated_model.bin: file is 5000 bytes but its header|-e $TMP/truncated_model.bin"
    "HF directory without weights|$TMP/hf_empty: no model.safetensors or model.safetensors.index.json|-e $TMP/hf_empty"
    "T over the model's|flag -t: T = 128 exceeds the model's max sequence length 64|-t 128"
    "-o under a file|flag -o $TMP/a_file/out: cannot be made: part of its path is a file, not a directory|-o $TMP/a_file/out"
    "-o is a file|flag -o $TMP/a_file: exists and is not a directory|-o $TMP/a_file"
    "-o two levels missing|flag -o $TMP/no/out: does not exist, nor does the directory it would be made in, $TMP/no|-o $TMP/no/out"
    "-o holds another run|flag -o $TMP/ckpt: holds checkpoints of another run (steps 1..1)|-o $TMP/ckpt"
    "-y 1 with another T|$TMP/ckpt/state_00000001.bin: was written with T=32 and 64 tokens per step|-o $TMP/ckpt -y 1 -t 16"
    "-tok missing when sampling|flag -tok: no tokenizer file at $TMP/nope_tok.bin|-s 1 -g 8 -tok $TMP/nope_tok.bin"
    "tokenizer file bad|$TMP/bad_tok.bin: |-s 1 -g 8 -tok $TMP/bad_tok.bin"
    "sample longer than T|flag -g: 32 tokens do not fit in T = 32 (need -g < -t)|-s 1 -g 32"
    "-h 1 eval file missing|flag -h 1: no HellaSwag eval file at $TMP/nope_eval.bin|-h 1 -b 4 -hf $TMP/nope_eval.bin"
    "-h 1 eval file bad|$TMP/not_eval.bin: |-h 1 -b 4 -hf $TMP/not_eval.bin"
    "-hp in a missing directory|flag -hp $TMP/no/picks.tsv: its directory $TMP/no does not exist|-h 1 -b 4 -t 64 -hf tests/fixtures/hellaswag_fixture.bin -hp $TMP/no/picks.tsv"
    "-d not a multiple of B*T|flag -d: 100 tokens per step is not a multiple of B*T*processes = 2*32*1 = 64|-d 100"
)

# one case: exit non-zero, one stderr line "error: ...TEXT...", no step or table on stdout, under a second
expect_one_line() {  # program, name, text, flags...
    local prog=$1 name=$2 text=$3; shift 3
    local t0=$EPOCHREALTIME rc=0
    "$prog" "${BASE[@]}" "$@" >"$TMP/out.log" 2>"$TMP/err.log" || rc=$?
    local ms=$(( (${EPOCHREALTIME/./} - ${t0/./}) / 1000 ))
    if [ $rc != 0 ] && [ "$(wc -l <"$TMP/err.log")" = 1 ] && grep -q '^error: ' "$TMP/err.log" &&
        grep -qF -- "$text" "$TMP/err.log" && ! grep -qE '^(step|\+---)' "$TMP/out.log" && [ $ms -lt 1000 ]; then
        ok "$prog: $name ($ms ms): $(cat "$TMP/err.log")"
    else
        bad "$prog: $name: exit $rc, $ms ms, stderr (want one line with '$text'):"; head -3 "$TMP/err.log" | sed 's/^/     /'
    fi
}

PROGRAMS=(./train_gpt2)
[ -x ./train_gpt2cu ] && PROGRAMS+=(./train_gpt2cu)
for prog in "${PROGRAMS[@]}"; do
    [ -x "$prog" ] || { bad "$prog not built"; continue; }
    # once untimed: the first start of a fresh build reads the program and its libraries (cuBLASLt's are hundreds of
    # MB) from disk, which took 1.4 s on a busy 2-core machine; the bound below is about the work before the GPU's
    "$prog" -h >/dev/null 2>&1 || true
    for c in "${CASES[@]}"; do
        IFS='|' read -r name text flags <<<"$c"
        set -f  # the flags split at spaces (no path here has one), their patterns left to the trainer
        # shellcheck disable=SC2086
        expect_one_line "$prog" "$name" "$text" $flags
        set +f
    done
    # --check: the table, the closing line, exit 0, and nothing made
    if "$prog" "${BASE[@]}" -o "$TMP/check_out" --check >"$TMP/check.log" 2>&1 &&
        grep -q '^| tokens train / val *| 1004096 / 4096, largest id 0 *|$' "$TMP/check.log" &&
        grep -q '^| steps *| 0 -> 2 *|$' "$TMP/check.log" &&
        grep -q '^check: every input reads and fits; nothing was written' "$TMP/check.log" && [ ! -e "$TMP/check_out" ]; then
        ok "$prog --check: the host rows, exit 0, -o not made"
    else bad "$prog --check:"; tail -5 "$TMP/check.log" | sed 's/^/     /'; fi
done

# the GPU engine's own limits are checked before the GPU too; the CPU trainer has none
if ./train_gpt2 "${BASE[@]}" -e "$TMP/c36_model.bin" --check >"$TMP/c36.log" 2>&1; then
    ok "./train_gpt2 --check takes a model of C = 36"
else bad "./train_gpt2 --check refuses a model of C = 36:"; tail -2 "$TMP/c36.log" | sed 's/^/     /'; fi
if [ -x ./train_gpt2cu ]; then
    expect_one_line ./train_gpt2cu "a model the GPU engine cannot train" \
        "flag -e $TMP/c36_model.bin: C = 36 must be a multiple of 8" -e "$TMP/c36_model.bin"
    # -fp8 1 where it cannot run: named before the GPU (BF16 builds: a B*T FP8's GEMMs do not take; FP32 builds: any)
    if ./train_gpt2cu --version | grep -q bf16; then
        expect_one_line ./train_gpt2cu "-fp8 1 with B*T = 24" "flag -fp8: FP8 training needs B*T a multiple of 16" \
            -b 1 -t 24 -fp8 1
    else
        expect_one_line ./train_gpt2cu "-fp8 1 in an FP32 build" "flag -fp8: FP8 training needs a BF16 build" -fp8 1
    fi
    expect_one_line ./train_gpt2cu "-fp8h without -fp8" "flag -fp8h: delayed scaling needs -fp8 1 or 2" -fp8h 16
    expect_one_line ./train_gpt2cu "-fp8h out of range" "-fp8h" -fp8 1 -fp8h 2000
fi

# without a GPU, train_gpt2cu with good inputs gets as far as the GPU, and says it is missing in one line
if [ -x ./train_gpt2cu ] && ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    expect_one_line ./train_gpt2cu "good inputs, no GPU" "no NVIDIA driver found"
fi
end_checks "preflight"
