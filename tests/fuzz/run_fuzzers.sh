#!/usr/bin/env bash
# Runs every libFuzzer target (bin/fuzz_*) for SECONDS each, JOBS at a time (default: all cores), on its
# committed seed corpus (corpus/<target>/, read only: what the run finds goes to a scratch directory that is
# removed afterwards). Prints one line per target (executions, and ok or the finding) and exits non-zero on
# any finding: a crash or sanitizer report, an uncaught exception, a leak, a timeout (-timeout, default 10 s
# per input) or an out-of-memory (-rss_limit_mb / -malloc_limit_mb, default 2048). A finding's input and
# log are saved in findings/ (FUZZ_FINDINGS=DIR to change); reproduce with bin/fuzz_<target> <input>.
#   tests/fuzz/run_fuzzers.sh SECONDS [JOBS] [TARGET...]    e.g. run_fuzzers.sh 2 2 (make test), 600 16
# Builds the targets first (make) when clang++ is here; runs prebuilt ones where it is not (FUZZ_BIN=DIR
# to take them from elsewhere); with neither it prints one line and exits 0. FUZZ_SKIP="fuzz_a fuzz_b" leaves
# targets out (say, while their known finding is being fixed); each is named in a line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
seconds=${1:?usage: run_fuzzers.sh SECONDS [JOBS] [TARGET...]}
jobs=${2:-$(nproc 2>/dev/null || echo 1)}
shift $(($# < 2 ? $# : 2))
bin=${FUZZ_BIN:-$here/bin}
findings=${FUZZ_FINDINGS:-$here/findings}
timeout_s=${FUZZ_TIMEOUT:-10}
memory_mb=${FUZZ_MEMORY_MB:-2048}

if [ -z "${FUZZ_BIN:-}" ] && command -v "${CLANGXX:-clang++}" >/dev/null 2>&1; then
    make -s -C "$here" all >&2 || { echo "fuzzers: build failed"; exit 1; }
fi
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in "$bin"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
kept=()
for t in ${targets[@]+"${targets[@]}"}; do
    if [[ " ${FUZZ_SKIP:-} " == *" $t "* ]]; then echo "fuzzers: $t skipped (FUZZ_SKIP)"; else kept+=("$t"); fi
done
[ ${#targets[@]} -gt 0 ] && [ ${#kept[@]} -eq 0 ] && { echo "fuzzers: every target skipped"; exit 0; }
targets=(${kept[@]+"${kept[@]}"})
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzzers skipped: no clang++ with libFuzzer here and no built targets in $bin"
    exit 0
fi

# Scratch in memory where possible: the writers the targets call fsync every file.
scratch=${TMPDIR:-/dev/shm}
[ -d "$scratch" ] && [ -w "$scratch" ] || scratch=/tmp
work=$(mktemp -d "$scratch/llmc_fuzz_run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$findings"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# run_one TARGET: runs it, writes "<line>" to $work/TARGET.result, exit status 0 = nothing found.
run_one() {
    local t=$1 name=${1#fuzz_}
    local log=$work/$t.log artifacts=$work/$t.artifacts
    mkdir -p "$work/$t.corpus" "$work/$t.tmp" "$artifacts"
    [ -x "$bin/$t" ] || { echo "$t: no such target in $bin" > "$work/$t.result"; return 1; }
    local seeds=()
    [ -d "$here/corpus/$name" ] && seeds=("$here/corpus/$name")
    TMPDIR=$work/$t.tmp "$bin/$t" -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$memory_mb" \
        -malloc_limit_mb="$memory_mb" -report_slow_units=1000000 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$work/$t.corpus" "${seeds[@]}" > "$log" 2>&1
    local rc=$?
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    local found=()
    for a in "$artifacts"/*; do
        [ -f "$a" ] || continue
        cp "$a" "$findings/$t-$(basename "$a")"
        found+=("findings/$t-$(basename "$a")")
    done
    if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
        printf '%-22s %10s runs in %ss: ok\n' "$t" "${runs:-?}" "$seconds" > "$work/$t.result"
        return 0
    fi
    cp "$log" "$findings/$t.log"
    local what
    what=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)[^(]*|runtime error: .*|FUZZ FINDING: .*|terminate called .*|ALARM: .*|out-of-memory .*' "$log" | head -c 160)
    printf '%-22s %10s runs: FINDING (exit %d) %s -> %s (log %s)\n' "$t" "${runs:-?}" "$rc" "${what:-see log}" \
        "${found[*]:-no input saved}" "findings/$t.log" > "$work/$t.result"
    return 1
}

echo "fuzzers: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

failed=0
for t in "${targets[@]}"; do
    cat "$work/$t.result"
    grep -q ': ok$' "$work/$t.result" || failed=$((failed + 1))
done
echo "fuzzers: $((${#targets[@]} - failed)) ok, $failed with findings"
[ $failed -eq 0 ]
