#!/usr/bin/env bash
# make's one-line notes on what this machine lacks (detect.mk), for the piece a newcomer most often lacks: GoogleTest.
# A compiler stand-in that fails on anything naming gtest (and is g++ otherwise) plays a machine without
# libgtest-dev: make then says so in one line naming the package, and make test leaves the unit tests out instead of
# failing to build them. With the real compiler there is no such line.
# Prints one line per check; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
source tests/lib/lib.sh  # use_test_data, begin_checks, ok, bad, end_checks
use_test_data  # make test asks for the test data before anything else
begin_checks
# make of its own (not the make test running this), dry-run with every target out of date: nothing is built
dry_make() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -B "$@" DATA_MIRROR="$DATA"; }

cat >"$TMP/cxx" <<'STUB'
#!/usr/bin/env bash
for a in "$@"; do case "$a" in *gtest*) exit 1 ;; esac; done
input=$(cat)
case "$input" in *gtest*) exit 1 ;; esac
printf '%s' "$input" | exec g++ "$@"
STUB
chmod +x "$TMP/cxx"

dry_make test CXX="$TMP/cxx" >"$TMP/no_gtest.out" 2>&1
lines=$(grep -c -i 'gtest\|googletest' "$TMP/no_gtest.out" | head -1)
note=$(grep -i 'googletest' "$TMP/no_gtest.out" | head -1)
if [ "$(grep -ci 'googletest' "$TMP/no_gtest.out")" = 1 ] &&
    grep -qx 'note: GoogleTest not found (Debian: libgtest-dev): the unit tests (tests/unit/unit_tests, tests/serving/serve_tests) are skipped' "$TMP/no_gtest.out" &&
    ! grep -q -- '-o tests/unit/unit_tests\|-o tests/serving/serve_tests\|-lgtest' "$TMP/no_gtest.out" &&
    grep -q 'GTEST_TESTS=0' "$TMP/no_gtest.out"; then
    ok "without GoogleTest: one line ($note); make test builds no unit test and tells the runner"
else bad "without GoogleTest ($lines lines naming it):"; grep -i 'gtest\|googletest' "$TMP/no_gtest.out" | head -3 | sed 's/^/     /'; fi

dry_make test >"$TMP/gtest.out" 2>&1
if ! grep -qi 'googletest' "$TMP/gtest.out" && grep -q -- '-o tests/unit/unit_tests' "$TMP/gtest.out"; then
    ok "with GoogleTest: no note, the unit tests built"
else bad "a GoogleTest note with the real compiler:"; grep -i googletest "$TMP/gtest.out" | sed 's/^/     /'; fi
end_checks "detect"
