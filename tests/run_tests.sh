#!/usr/bin/env bash
# Runs every test suite, prints each one's output, and ends with one summary line
# "tests: N passed, N failed". Exits non-zero if any suite failed.
# Environment: DATA_MIRROR (GPT-2 vocab + text corpora), GPU_TESTS=1 to add the GPU suites.
set -u
cd "$(dirname "$0")/.."
DATA_MIRROR=${DATA_MIRROR:-../shared/data}
export DATA_MIRROR

passed=0; failed=0; failed_names=()
run_suite() {  # name, command...
    local name=$1; shift
    echo "==== $name: $*"
    if "$@"; then
        passed=$((passed + 1)); echo "==== $name: PASS"
    else
        failed=$((failed + 1)); failed_names+=("$name"); echo "==== $name: FAIL"
    fi
}

# ---- CPU suites (everywhere)
run_suite cpu-reference ./test_gpt2 tests/fixtures/tiny
run_suite unit-tests ./tests/unit_tests
run_suite tokenizer-tools bash tests/test_tokenizer_tools.sh

# ---- GPU suites (only when a GPU is visible)
if [ "${GPU_TESTS:-0}" = 1 ]; then
    run_suite gpu-reference-tiny ./test_gpt2cu -r tests/fixtures/tiny
fi

[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]}"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
