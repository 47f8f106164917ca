#!/usr/bin/env bash
# scripts/tools/test_streams.sh against tests/run_tests.sh: every suite (the kernel families and d12 backends
# expanded) in exactly one of the gate's parallel streams, so that none is left out of the gate or run twice; the
# suites run only as another's prerequisite (PREREQ=1) are exempt.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
. tests/lib/cli_checks.sh
begin_checks
. scripts/tools/test_streams.sh

names=()
while read -r prereq name; do
    name=${name//\"/}
    [ "$prereq" = PREREQ ] && continue
    if [[ "$name" == *'${family#test_}'* ]]; then
        for src in tests/gpu/kernels/test_*.cu; do f=$(basename "$src" .cu); names+=("${name//'${family#test_}'/${f#test_}}"); done
    elif [[ "$name" == *'$backend'* ]]; then
        for b in materialized flash flash-nondet; do names+=("${name//'$backend'/$b}"); done
    else
        names+=("$name")
    fi
done < <(grep -o '\(PREREQ=1 \)\{0,1\}run_suite [^ ]*' tests/run_tests.sh | sed 's/^PREREQ=1 run_suite/PREREQ/; s/^run_suite/-/')
streams_of() {  # how many streams select $1
    local n=0 s
    for s in "${STREAMS[@]}"; do [[ "$1" =~ $s ]] && n=$((n + 1)); done
    echo $n
}
check "the suites read from tests/run_tests.sh (at least 50)" test "${#names[@]}" -ge 50
check "the kernel families expanded (gpu-kernels-attention among them)" grep -qx "gpu-kernels-attention" < <(printf '%s\n' "${names[@]}")
check "a name that is no suite is in no stream" test "$(streams_of no-such-suite)" = 0
check "the prerequisites (gpu-data, d12-reference-make) are not counted" bash -c '! grep -qx "gpu-data\|d12-reference-make" <<<"$1"' _ "$(printf '%s\n' "${names[@]}")"
bad=()
for n in "${names[@]}"; do
    c=$(streams_of "$n")
    [ "$c" = 1 ] || bad+=("$n ($c streams)")
done
check "every suite in exactly one stream${bad[*]:+: not ${bad[*]}}" test ${#bad[@]} = 0
end_checks test_streams.sh
