#!/usr/bin/env bash
# On a machine without a GPU (where CI runs), the GPU trainer must fail in one clear line: no driver or
# device is named as such (not the runtime's "driver version is insufficient"), a bad flag is one line
# pointing at --help (not the whole usage), and -h / --help print the usage and succeed.
set -u
cd "$(dirname "$0")/.."
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
check "no GPU: one line naming the missing driver" 1 1 "no NVIDIA driver found" ./train_gpt2cu -e d6
check "bad flag: one line and a pointer to --help" 1 1 "error: flag -b: expected an integer >= 1, got 'x' (./train_gpt2cu --help lists the flags)" ./train_gpt2cu -b x
check "huge B*T: one line, no arithmetic trap" 1 1 "B\*T = 1073741824\*1073741824" ./train_gpt2cu -b 1073741824 -t 1073741824 -pn 16
check "-h prints the usage" 0 0 "^usage: ./train_gpt2cu" ./train_gpt2cu -h
check "--help prints the usage" 0 0 "^usage: ./train_gpt2cu" ./train_gpt2cu --help
[ $fail = 0 ] && echo "GPU programs without a GPU: all checks passed"
exit $fail
