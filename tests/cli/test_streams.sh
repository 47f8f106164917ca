#!/usr/bin/env bash
# scripts/tools/test_streams.sh against tests/run_tests.sh: every suite in exactly one of the gate's parallel
# streams, so that none is left out of the gate or run twice; the suites run only as another's prerequisite
# (PREREQ=1) are exempt.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
. tests/lib/cli_checks.sh
begin_checks
. scripts/tools/test_streams.sh

# a name built in a loop (gpu-kernels-${family#test_}, gpu-reference-d12-$backend) stands as its prefix + "x": the
# streams select those families by prefix
names=()
while read -r prereq name; do
    name=${name//\"/}
    [ "$prereq" = PREREQ ] || names+=("$(sed 's/\$[{]\{0,1\}[A-Za-z_#]*[}]\{0,1\}/x/g' <<<"$name")")
done < <(grep -o '\(PREREQ=1 \)\{0,1\}run_suite [^ ]*' tests/run_tests.sh | sed 's/^PREREQ=1 run_suite/PREREQ/; s/^run_suite/-/')
streams_of() {  # how many streams select $1
    local n=0 s
    for s in "${STREAMS[@]}"; do [[ "$1" =~ $s ]] && n=$((n + 1)); done
    echo $n
}
check "the suites read from tests/run_tests.sh (at least 50)" test "${#names[@]}" -ge 50
check "a name built in a loop read as its prefix (gpu-kernels-x)" grep -qx "gpu-kernels-x" < <(printf '%s\n' "${names[@]}")
check "a name that is no suite is in no stream" test "$(streams_of no-such-suite)" = 0
check "the prerequisites (gpu-data, d12-reference-make) are not counted" bash -c '! grep -qx "gpu-data\|d12-reference-make" <<<"$1"' _ "$(printf '%s\n' "${names[@]}")"
bad=()
for n in "${names[@]}"; do
    c=$(streams_of "$n")
    [ "$c" = 1 ] || bad+=("$n ($c streams)")
done
check "every suite in exactly one stream${bad[*]:+: not ${bad[*]}}" test ${#bad[@]} = 0
end_checks test_streams.sh
