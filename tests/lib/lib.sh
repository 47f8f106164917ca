# What the test scripts share, sourced after `cd` to the repository's root.
# test_data_root: the directory holding every data file the tests read (the GPT-2 vocabulary, Tiny Shakespeare,
#   Alice): $DATA_MIRROR (default ../shared/data) if it holds them all, else data/cache (what `make data` fills;
#   TEST_DATA_CACHE points elsewhere for the check of this message). Prints it, absolute; without either, one line
#   on stderr saying what is missing and how to get it, and returns 1. make test runs it before it builds.
TEST_DATA_FILES="gpt2/encoder.json gpt2/vocab.bpe tinyshakespeare/input.txt alice/pg11.txt alice/pg11_lf.txt"
test_data_root() {
    local mirror=${DATA_MIRROR:-../shared/data} root f missing
    for root in "$mirror" "${TEST_DATA_CACHE:-data/cache}"; do
        missing=$(for f in $TEST_DATA_FILES; do [ -f "$root/$f" ] || echo "$f"; done)
        [ -z "$missing" ] && { (cd "$root" && pwd); return 0; }
    done
    missing=$(for f in $TEST_DATA_FILES; do [ -f "$mirror/$f" ] || printf '%s ' "$f"; done)
    echo "error: test data missing: ${missing% } (not in DATA_MIRROR=$mirror nor data/cache): run 'make data' (downloads it) or set DATA_MIRROR=DIR to a copy holding gpt2/, tinyshakespeare/, alice/" >&2
    return 1
}

# use_test_data: DATA (test_data_root) and VOCAB, its GPT-2 vocabulary; without them the one line and exit 1.
use_test_data() {
    DATA=$(test_data_root) || exit 1
    VOCAB=$DATA/gpt2
}

# begin_checks: for a script printing one line per check: TMP, a scratch directory removed at exit, and `fails`, the
# count of failed checks (tests/lib/cli_checks.sh's check counts there too). ok / bad print a check's line (bad counts
# it); end_checks NAME prints the last line and exits 1 if any check failed.
begin_checks() {
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    fails=0
}
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
# expect_line DESCRIPTION REGEX TEXT: some line of TEXT matches the extended regex.
expect_line() {
    if printf '%s\n' "$3" | grep -qE -- "$2"; then ok "$1"; else bad "$1 (no line matches $2)"; fi
}
end_checks() {
    if [ "$fails" = 0 ]; then echo "$1: all checks passed"; else echo "$1: $fails failed"; fi
    exit $((fails > 0))
}

# expect_error DESCRIPTION NEEDLE COMMAND...: the command must fail with exactly one line on stderr, "error: ..."
# holding NEEDLE, and no training step on stdout (a trainer's bad input stops it before any).
expect_error() {
    local what=$1 needle=$2; shift 2
    if "$@" >"$TMP/err.out" 2>"$TMP/err.log"; then bad "$what (exit 0)"; return; fi
    if [ "$(wc -l <"$TMP/err.log")" = 1 ] && grep -q '^error: ' "$TMP/err.log" && grep -qF -- "$needle" "$TMP/err.log" &&
        ! grep -q '^step ' "$TMP/err.out"; then
        ok "$what: $(cat "$TMP/err.log")"
    else bad "$what: stderr is not one line 'error: ...$needle...':"; tail -5 "$TMP/err.log"; fi
}
