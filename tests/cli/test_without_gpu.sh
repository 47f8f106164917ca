#!/usr/bin/env bash
# On a machine without a GPU (where CI runs), the GPU trainer, generator and server must fail in one clear line: no driver or
# device is named as such (not the runtime's "driver version is insufficient"), a bad flag is one line
# pointing at --help (not the whole usage), and -h / --help print the usage and succeed.
set -u
cd "$(dirname "$0")/../.."
fail=0
check() {  # name, expected exit code, expected stderr line count, pattern on stderr (or stdout for rc 0), command...
    local name=$1 want_rc=$2 want_lines=$3 pattern=$4; shift 4
    local out err rc
    out=$("$@" 2>/tmp/without_gpu_err.$$); rc=$?
    err=$(cat /tmp/without_gpu_err.$$); rm -f /tmp/without_gpu_err.$$
    local text=$err; [ "$want_rc" = 0 ] && text=$out
    local lines; lines=$(printf '%s' "$err" | grep -c '' || true)
    if [ "$rc" = "$want_rc" ] && [ "$lines" = "$want_lines" ] && printf '%s' "$text" | grep -q -- "$pattern"; then
        echo "ok: $name"
    else
        echo "FAIL: $name: exit $rc (want $want_rc), $lines stderr line(s) (want $want_lines), output:"
        printf '%s\n%s\n' "$out" "$err" | head -n 5
        fail=1
    fi
}
# good inputs (-x 0 -v 0: no data to read): the preflight passes and the GPU is found missing (tests/cli/test_preflight.sh
# has the trainer's bad inputs)
check "no GPU: one line naming the missing driver" 1 1 "no NVIDIA driver found" ./train_gpt2cu -e d6 -x 0 -v 0 -s 0
check "bad flag: one line and a pointer to --help" 1 1 "error: flag -b: expected an integer >= 1, got 'x' (./train_gpt2cu --help lists the flags)" ./train_gpt2cu -b x
check "huge B*T: one line, no arithmetic trap" 1 1 "B\*T = 1073741824\*1073741824" ./train_gpt2cu -b 1073741824 -t 1073741824 -pn 16
check "-h prints the usage" 0 0 "^usage: ./train_gpt2cu" ./train_gpt2cu -h
check "--help prints the usage" 0 0 "^usage: ./train_gpt2cu" ./train_gpt2cu --help
# generate_gpt2cu checks everything the user gives before it looks for a GPU (the fixture model has V = 1000: "!" is
# token 0, "Hello" is not in its vocabulary)
source tests/lib/lib.sh  # use_test_data
use_test_data
if [ -x ./generate_gpt2cu ]; then
    G=(./generate_gpt2cu --vocab-dir "$VOCAB")
    empty=$(mktemp); trap 'rm -f "$empty"' EXIT
    check "generate: no GPU after the inputs check out" 1 1 "no NVIDIA driver found" "${G[@]}" -e tests/fixtures/tiny_model.bin -p "!" -g 8
    check "generate: bad flag, one line" 1 1 "error: flag -sp: expected a number in (0, 1], got '2' (./generate_gpt2cu --help lists the flags)" "${G[@]}" -e m -p x -sp 2
    check "generate: -n, the old name of -g, one line" 1 1 "error: flag -n: the number of new tokens is -g" "${G[@]}" -e m -p x -n 8
    check "generate: missing model, one line naming it" 1 1 "error: no_such_model.bin" "${G[@]}" -e no_such_model.bin -p "!"
    check "generate: missing vocabulary, one line naming the flag" 1 1 "(--vocab-dir names the directory" ./generate_gpt2cu --vocab-dir /nonexistent -e m -p x
    check "generate: prompt outside the model's vocabulary" 1 1 "error: -p: token id 15496 is outside the model's vocabulary (V = 1000)" "${G[@]}" -e tests/fixtures/tiny_model.bin -p "Hello"
    check "generate: empty prompt file" 1 1 "is empty: one prompt per line" "${G[@]}" -e tests/fixtures/tiny_model.bin -pf "$empty"
    check "generate: --ids where it cannot write" 1 1 "error: flag --ids /nonexistent_dir/ids.txt: its directory /nonexistent_dir does not exist" "${G[@]}" -e tests/fixtures/tiny_model.bin -p "!" --ids /nonexistent_dir/ids.txt
    check "generate: -h prints the usage" 0 0 "^usage: ./generate_gpt2cu" ./generate_gpt2cu -h
fi
# serve_gpt2cu (built where the server's libraries are) checks its flags, vocabulary and model before it looks for a
# GPU. The tiny fixture's head size is 16 (no KV cache): with NH 1 instead of 4 (the same parameters) it is 64.
if [ -x ./serve_gpt2cu ]; then
    S=(./serve_gpt2cu --vocab-dir "$VOCAB")
    hs64=$(mktemp); cp tests/fixtures/tiny_model.bin "$hs64"
    printf '\x01' | dd of="$hs64" bs=1 seek=20 conv=notrunc 2>/dev/null  # header[5] = NH
    check "serve: no GPU after the inputs check out" 1 1 "no NVIDIA driver found" "${S[@]}" -e "$hs64" --port 0
    check "serve: bad flag, one line" 1 1 "error: flag --port: expected a port in \[0, 65535\], got 'x' (./serve_gpt2cu --help lists the flags)" "${S[@]}" -e m --port x
    check "serve: head size without a KV cache, one line" 1 1 "head size 16 (C 64, NH 4): the server needs a KV cache" "${S[@]}" -e tests/fixtures/tiny_model.bin
    check "serve: context over the model's, one line" 1 1 "flag --max-context: 100 is over the model's context of 64" "${S[@]}" -e "$hs64" --max-context 100
    check "serve: missing model, one line naming it" 1 1 "error: no_such_model.bin" "${S[@]}" -e no_such_model.bin
    check "serve: -h prints the usage" 0 0 "^usage: ./serve_gpt2cu" ./serve_gpt2cu -h
    check "serve: --version" 0 0 "^serve_gpt2cu " ./serve_gpt2cu --version
    rm -f "$hs64"
fi
[ $fail = 0 ] && echo "GPU programs without a GPU: all checks passed"
exit $fail
