#!/usr/bin/env python3
"""serve_gpt2cu under a compute-sanitizer tool, for tests/gpu/check_sanitizers.sh (Python's standard library only):

    tests/gpu/sanitize_serve.py --sanitizer "compute-sanitizer --tool memcheck ..." --model M --vocab-dir D --log LOG

Starts the server under the tool (prompts over 16 tokens prefilled in chunks), then sends: /health; greedy, sampled
and logprobs completions together (one decode batch); a long prompt (chunked prefill); a stream; a bad request
(400); /health again (no request failed). Then SIGTERM goes to the server itself, not to compute-sanitizer (which
would die of it before printing its summary), so the server drains and exits and the tool prints its summary into
LOG. Exit: the tool's exit status (its --error-exitcode when it found errors, else the server's), or 1 when a
request went wrong or the server did not stop (what went wrong on stderr).
"""
import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serving"))
from check_serve import PROMPTS, Client, Server, together  # noqa: E402


def descendants(pid):
    """Every process below pid (the kernel's children lists, thread by thread)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def server_pid(sanitizer_pid, name):
    for p in descendants(sanitizer_pid):
        try:
            if os.path.basename(os.readlink(f"/proc/{p}/exe")) == name:
                return p
        except OSError:
            pass
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sanitizer", required=True, help="the tool's command line, put before the server's")
    ap.add_argument("--server", default="./serve_gpt2cu")
    ap.add_argument("--model", required=True)
    ap.add_argument("--vocab-dir", default="data/cache/gpt2")
    ap.add_argument("--log", required=True, help="the tool's and the server's output")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--stop-timeout", type=float, default=300)
    args = ap.parse_args()
    args.server_args = "--max-batch 8 --prefill-chunk 16"
    name = os.path.basename(args.server)
    args.server = f"{args.sanitizer} {args.server}"

    problems = []

    def expect(cond, what):
        if not cond:
            problems.append(what)

    srv = Server(args, [], args.log)
    c = Client(srv.port, timeout=args.start_timeout)
    try:
        s, h, _ = c.request("GET", "/health")
        expect(s == 200, f"GET /health: {s}")
        model = c.request("GET", "/v1/models")[1]["data"][0]["id"]
        body = {"model": model, "max_tokens": 12, "ignore_eos": True}
        bodies = [dict(body, prompt=PROMPTS[0], temperature=0),
                  dict(body, prompt=PROMPTS[1], temperature=0.9, top_k=40, seed=3),
                  dict(body, prompt=PROMPTS[2], temperature=0.8, top_p=0.9, seed=5),
                  dict(body, prompt=PROMPTS[3], temperature=0, logprobs=2),
                  dict(body, prompt=" ".join(PROMPTS), temperature=0)]  # over 16 tokens: chunked prefill
        for i, (s, r, _) in enumerate(together([lambda b=b: c.complete(b) for b in bodies])):
            expect(s == 200 and r["usage"]["completion_tokens"] == 12, f"completion {i}: {s} {r}")
        s, ctype, events = c.stream(dict(body, prompt=PROMPTS[4], temperature=0, stream=True))
        expect(s == 200 and events[-1:] == ["[DONE]"], f"stream: {s} {ctype} {events[-1:]}")
        s, r, _ = c.complete({"model": model, "prompt": PROMPTS[0], "max_tokens": -1})
        expect(s == 400, f"bad request (max_tokens -1): {s} {r}")
        s, h, _ = c.request("GET", "/health")
        expect(s == 200 and h["errors"] == 0 and h["running"] == 0, f"GET /health after the requests: {s} {h}")
    except Exception as e:  # a request that could not be made: the server is reported as it ended below
        problems.append(f"requests: {e!r}")
    finally:
        pid = None
        deadline = time.time() + 10
        while pid is None and time.time() < deadline and srv.proc.poll() is None:
            pid = server_pid(srv.proc.pid, name)
            if pid is None:
                time.sleep(0.2)
        rc = None
        if pid is not None:
            os.kill(pid, signal.SIGTERM)  # the server drains; compute-sanitizer then prints its summary
            try:
                rc = srv.proc.wait(timeout=args.stop_timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"the server did not stop within {args.stop_timeout:.0f} s of SIGTERM")
        else:
            problems.append(f"no {name} process under compute-sanitizer (pid {srv.proc.pid})")
        if rc is None:
            srv.proc.kill()
        srv.stop(timeout=30)  # the tool has exited (or was killed): this only closes the log
    if rc is not None and rc < 0:
        problems.append(f"the tool ended by signal {-rc}: no drain, no summary")
    for p in problems:
        print(f"sanitize_serve: {p}", file=sys.stderr)
    if problems:
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
