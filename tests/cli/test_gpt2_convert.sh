#!/usr/bin/env bash
# End-to-end checks of ./gpt2_convert on the committed fixture (tests/fixtures/tiny_*): to-hf then from-hf gives
# the model file back byte for byte (fp32, bf16, fp32 -> --bf16 = the fixture's bf16 file), a .safetensors path
# works as well as the directory, --vocab-dir writes HF's tokenizer files (vocab.json and merges.txt are
# encoder.json and vocab.bpe), and every error is one line "error: ..." with exit status 1. A self-check runs
# every check against stand-ins that fail or succeed writing nothing, and requires each check to fail.
set -u
set -o pipefail
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, end_checks
use_test_data
CONVERT=./gpt2_convert
FIX=tests/fixtures/tiny
begin_checks
source tests/lib/cli_checks.sh  # check, self_check
# Every check removes what it will compare first: a file left by an earlier check must not stand in for one.
# exit 1, stderr exactly one line "error: ...NEEDLE...", nothing on stdout
one_line_error() {  # needle, command...
    local needle=$1; shift
    ! "$@" >"$TMP/err.out" 2>"$TMP/err.log" && [ ! -s "$TMP/err.out" ] && [ "$(wc -l <"$TMP/err.log")" = 1 ] &&
        grep -q '^error: ' "$TMP/err.log" && grep -qF -- "$needle" "$TMP/err.log" && cat "$TMP/err.log"
}
# a model file of all-zero parameters (valid) with V = 50257, so the GPT-2 vocabulary fits: L=1 NH=1 C=4 maxT=4
zero_model_v50257() {
    local le
    for v in 20240326 3 4 50257 1 1 4 50304; do
        le=$(printf '%08x' "$v")
        printf "\\x${le:6:2}\\x${le:4:2}\\x${le:2:2}\\x${le:0:2}"
    done >"$1" && truncate -s $((1024 + 4 * (50304 * 4 + 4 * 4 + 244 + 8))) "$1"
}

c_roundtrip_fp32() { rm -rf "$TMP/hf" "$TMP/back.bin" && "$CONVERT" to-hf ${FIX}_model.bin "$TMP/hf" && "$CONVERT" from-hf "$TMP/hf" "$TMP/back.bin" && cmp ${FIX}_model.bin "$TMP/back.bin"; }
c_roundtrip_bf16() { rm -rf "$TMP/hf16" "$TMP/back16.bin" && "$CONVERT" to-hf ${FIX}_model_bf16.bin "$TMP/hf16" && grep -q '"torch_dtype": "bfloat16"' "$TMP/hf16/config.json" && "$CONVERT" from-hf "$TMP/hf16" "$TMP/back16.bin" --bf16 && cmp ${FIX}_model_bf16.bin "$TMP/back16.bin"; }
c_fp32_to_bf16() { rm -rf "$TMP/hf" "$TMP/b.bin" && "$CONVERT" to-hf ${FIX}_model.bin "$TMP/hf" && "$CONVERT" from-hf "$TMP/hf/model.safetensors" "$TMP/b.bin" --bf16 && cmp ${FIX}_model_bf16.bin "$TMP/b.bin"; }
c_help() { "$CONVERT" --help | grep -q '^  gpt2_convert to-hf MODEL.bin OUTDIR'; }
c_vocab() {
    rm -rf "$TMP/v" "$TMP/z.bin" && zero_model_v50257 "$TMP/z.bin" && "$CONVERT" to-hf "$TMP/z.bin" "$TMP/v" --vocab-dir "$VOCAB" &&
        cmp "$VOCAB/encoder.json" "$TMP/v/vocab.json" && cmp "$VOCAB/vocab.bpe" "$TMP/v/merges.txt" &&
        grep -q '"tokenizer_class": "GPT2Tokenizer"' "$TMP/v/tokenizer_config.json" &&
        grep -q '"eos_token": "<|endoftext|>"' "$TMP/v/special_tokens_map.json" &&
        grep -q '"bos_token_id": 50256' "$TMP/v/config.json"
}
c_vocab_too_big() {
    rm -rf "$TMP/small" && one_line_error "has 50257 tokens, more than the model's vocabulary (V = 1000)" \
        "$CONVERT" to-hf ${FIX}_model.bin "$TMP/small" --vocab-dir "$VOCAB" && [ ! -e "$TMP/small" ]  # nothing written
}
c_err_command() { one_line_error "frobnicate: unknown command (to-hf or from-hf); see gpt2_convert --help" "$CONVERT" frobnicate a b; }
c_err_arity() { one_line_error "to-hf: needs exactly two paths, got 1" "$CONVERT" to-hf ${FIX}_model.bin; }
c_err_flag() { one_line_error "--bf16: only for from-hf" "$CONVERT" to-hf ${FIX}_model.bin "$TMP/x" --bf16; }
c_err_missing() { one_line_error "$TMP/none.bin: cannot open" "$CONVERT" to-hf "$TMP/none.bin" "$TMP/x"; }
c_err_not_hf() { one_line_error "${FIX}_model.bin: not a Hugging Face GPT-2 model" "$CONVERT" from-hf ${FIX}_model.bin "$TMP/x.bin"; }
c_err_lone() {
    rm -rf "$TMP/hf" "$TMP/lone" && mkdir "$TMP/lone" && "$CONVERT" to-hf ${FIX}_model.bin "$TMP/hf" >/dev/null &&
        cp "$TMP/hf/model.safetensors" "$TMP/lone/" &&
        one_line_error "$TMP/lone/config.json: no such file: the weights need the model's config.json beside them (GPT-2's n_head cannot be inferred" \
            "$CONVERT" from-hf "$TMP/lone/model.safetensors" "$TMP/x.bin"
}
c_err_tensor() {  # one byte of the header's JSON broken: the error names the file
    rm -rf "$TMP/hf" && "$CONVERT" to-hf ${FIX}_model.bin "$TMP/hf" >/dev/null &&
        printf 'X' | dd of="$TMP/hf/model.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null &&
        one_line_error "$TMP/hf/model.safetensors: safetensors header: invalid JSON at byte 0" "$CONVERT" from-hf "$TMP/hf" "$TMP/x.bin"
}

CHECKS=(
    "c_roundtrip_fp32|to-hf then from-hf gives the fp32 fixture back byte for byte"
    "c_roundtrip_bf16|bf16 stays BF16 (torch_dtype bfloat16) and comes back byte for byte with --bf16"
    "c_fp32_to_bf16|from-hf --bf16 of the fp32 export (given as the .safetensors file) = the fixture's bf16 file"
    "c_help|--help prints the usage"
    "c_vocab|--vocab-dir writes vocab.json, merges.txt (the vocabulary byte for byte) and the tokenizer configs"
    "c_vocab_too_big|a vocabulary larger than V: one line, nothing written"
    "c_err_command|unknown command: one line"
    "c_err_arity|missing path: one line"
    "c_err_flag|--bf16 with to-hf: one line"
    "c_err_missing|missing model file: one line naming it"
    "c_err_not_hf|from-hf of our .bin: one line"
    "c_err_lone|a lone .safetensors: one line naming config.json and why it is needed"
    "c_err_tensor|a broken safetensors header: one line naming the file"
)
for entry in "${CHECKS[@]}"; do check "${entry#*|}" "${entry%%|*}"; done

self_check CONVERT

end_checks "gpt2_convert"
