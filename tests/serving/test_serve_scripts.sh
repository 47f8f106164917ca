#!/usr/bin/env bash
# The GPU session's scripts, run here against tests/serving/serve_mock (serve_gpt2cu's server code on the fake engine):
# their argument checks; tests/serving/check_serve.py's whole list (with the mock's stand-in for generate_gpt2cu); and
# tests/gpu/sanitize_serve.py with a thread that blocks no signal preloaded; scripts/bench/bench_serve.py for two seconds at two
# rates, then SIGTERM (the mock must drain and exit 0).
set -u
cd "$(dirname "$0")/../.."
fail=0
command -v python3 >/dev/null || { echo "serve scripts: python3 not found: skipped"; exit 0; }
[ -x tests/serving/serve_mock ] || { echo "FAIL: tests/serving/serve_mock is not built"; exit 1; }
source tests/lib/lib.sh  # use_test_data
use_test_data
tmp=$(mktemp -d); mock_pid=
cleanup() { [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

expect() {  # name, expected exit code ("nonzero" for any failure), pattern on the output, command...
    local name=$1 want=$2 pattern=$3; shift 3
    local out rc
    out=$("$@" 2>&1); rc=$?
    if { [ "$want" = nonzero ] && [ $rc -ne 0 ] || [ "$rc" = "$want" ]; } && printf '%s' "$out" | grep -q -- "$pattern"; then
        echo "ok: $name"
    else
        echo "FAIL: $name: exit $rc (want $want), output:"; printf '%s\n' "$out" | tail -n 15; fail=1
    fi
}

# ---- argument parsing
expect "check_serve.py --help" 0 "usage: check_serve.py" python3 tests/serving/check_serve.py --help
expect "bench_serve.py --help" 0 "usage: bench_serve.py" python3 scripts/bench/bench_serve.py --help
expect "bench_serve.py refuses a remote server" nonzero "not a loopback address" python3 scripts/bench/bench_serve.py --url http://10.1.2.3:8000
expect "bench_serve.py refuses a rate of 0" nonzero "every rate must be > 0" python3 scripts/bench/bench_serve.py --rates 0
expect "bench_serve.py: no server, one line" nonzero "no server at" python3 scripts/bench/bench_serve.py --url http://127.0.0.1:9
expect "check_serve.py needs --model" nonzero "required: --model" python3 tests/serving/check_serve.py

# ---- check_serve.py's rule for a sampled completion that differs alone and in a batch (the mock never does)
expect "check_serve.py: logprob_drift finds the first difference and the drift up to it" 0 "^drift ok$" python3 -c '
import sys; sys.path.insert(0, "tests/serving"); import check_serve as c
def ch(t, lp, top): return {"logprobs": {"tokens": t, "token_logprobs": lp, "top_logprobs": top}}
a = ch(["a", "b", "c"], [-1.0, -2.0, -0.5], [{"a": -1.0, "x": -2.0}, {"b": -2.0, "c": -2.1}, {"c": -0.5}])
b = ch(["a", "c", "d"], [-1.01, -2.08, -0.5], [{"a": -1.01, "x": -2.0}, {"b": -2.02, "c": -2.08}, {"d": -0.4}])
k, d = c.logprob_drift(a, b)
short = c.logprob_drift(a, ch(["a", "b"], [-1.0, -2.0], [{"a": -1.0}, {"b": -2.0}]))
print("drift ok" if k == 1 and abs(d - 0.02) < 1e-9 and c.logprob_drift(a, a) == (None, 0.0) and short == (2, 0.0)
      else f"drift wrong: {k} {d} {short}")'

# ---- check_serve.py against the mock (1 ms a decode step, so streams last long enough to interrupt)
expect "check_serve.py against tests/serving/serve_mock" 0 "check_serve: [0-9]* passed, 0 failed" \
    python3 tests/serving/check_serve.py --server tests/serving/serve_mock --server-args "--fake-step-us 1000" \
        --generate "tests/serving/serve_mock generate" --model mock --vocab-dir "$VOCAB" --out "$tmp/check" --long-tokens 300

# ---- the same with the prefix cache on (chunks of 8: prompts over 8 tokens are chunked, whole chunks reused)
expect "check_serve.py against tests/serving/serve_mock with --prefix-cache 1" 0 "check_serve: [0-9]* passed, 0 failed" \
    python3 tests/serving/check_serve.py --server tests/serving/serve_mock \
        --server-args "--fake-step-us 1000 --fake-chunk 8 --prefix-cache 1" --generate "tests/serving/serve_mock generate" \
        --model mock --vocab-dir "$VOCAB" --out "$tmp/check_prefix" --skip-small-server
grep -q "^prefix cache: [1-9][0-9]* of [0-9]* prompt tokens reused" "$tmp/check_prefix/server.log" &&
    echo "ok: the prefix cache reused prompt tokens (the server's stop line)" ||
    { echo "FAIL: no prefix-cache reuse in $tmp/check_prefix/server.log"; tail -n 3 "$tmp/check_prefix/server.log"; fail=1; }

# ---- the playground page in headless Chromium against the mock (20 ms a step, so a look catches it streaming)
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
    expect "check_page.py: the playground page in headless Chromium against tests/serving/serve_mock" 0 \
        "check_page: [0-9]* passed, 0 failed" python3 tests/serving/check_page.py --server tests/serving/serve_mock \
            --server-args "--fake-step-us 20000" --model mock --vocab-dir "$VOCAB" --require-mid-stream \
            --screenshot "$tmp/page.png" --out "$tmp/page"
else
    echo "skipped: check_page.py (the playground page in a browser): no Chromium here (Debian: apt-get install chromium)"
fi

# ---- tests/gpu/sanitize_serve.py (the sanitizer's server run) with `timeout` for the tool, and a thread from before main
# that blocks no signal preloaded into the mock, as compute-sanitizer's are: SIGTERM to the server still drains
if cc -shared -fPIC -o "$tmp/foreign_thread.so" tests/serving/serve_foreign_thread.c -pthread 2>"$tmp/cc.log"; then
    expect "sanitize_serve.py against tests/serving/serve_mock with a foreign thread: requests, then SIGTERM drains, exit 0" 0 \
        "^drained$" bash -c "python3 tests/gpu/sanitize_serve.py --sanitizer 'timeout 120 env LD_PRELOAD=$tmp/foreign_thread.so' \
            --server tests/serving/serve_mock --model mock --vocab-dir '$VOCAB' --log '$tmp/sanitize.log' &&
            grep -q '^SIGTERM: draining' '$tmp/sanitize.log' && grep -q '^stopped: 6 completions (0 cancelled, 0 failed)' \
                '$tmp/sanitize.log' && echo drained"
else
    echo "FAIL: cannot build tests/serving/serve_foreign_thread.c:"; cat "$tmp/cc.log"; fail=1
fi

# ---- bench_serve.py against the mock, then SIGTERM
tests/serving/serve_mock -e mock --vocab-dir "$VOCAB" --port 0 --max-batch 8 --fake-step-us 500 2>"$tmp/mock.log" &
mock_pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's/^serving .* on http:\/\/127.0.0.1:\([0-9]*\):.*/\1/p' "$tmp/mock.log")
    [ -n "$port" ] && break
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "FAIL: tests/serving/serve_mock did not start:"; cat "$tmp/mock.log"; fail=1
else
    expect "bench_serve.py against tests/serving/serve_mock (2 rates, 2 s each)" 0 "| 60 | " \
        python3 scripts/bench/bench_serve.py --url "http://127.0.0.1:$port" --rates 20,60 --duration 2 --clients 16 \
            --prompt-max 64 --max-tokens-max 32 --drain-timeout 60 --out "$tmp/bench.md"
    [ "$(grep -c '^| [0-9]' "$tmp/bench.md" 2>/dev/null)" = 2 ] && echo "ok: bench_serve.py wrote its table" ||
        { echo "FAIL: bench_serve.py's table"; cat "$tmp/bench.md"; fail=1; }
    kill -TERM "$mock_pid"
    wait "$mock_pid"; rc=$?
    mock_pid=
    # every request the benchmark sent completed once: none cancelled (a client that reuses a connection before
    # reading a stream to its end sends a request it then abandons), none failed
    [ $rc = 0 ] && grep -q "^stopped: .* (0 cancelled, 0 failed)" "$tmp/mock.log" &&
        echo "ok: the mock drains on SIGTERM and exits 0, no request cancelled or failed" ||
        { echo "FAIL: the mock on SIGTERM: exit $rc"; tail -n 5 "$tmp/mock.log"; fail=1; }
fi
[ $fail = 0 ] && echo "serve scripts: all checks passed"
exit $fail
