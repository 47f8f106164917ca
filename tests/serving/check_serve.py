#!/usr/bin/env python3
"""Checks serve_gpt2cu end to end (docs/SERVING.md), Python's standard library only. For a GPU machine:

    python3 tests/serving/check_serve.py --model out/model.bin [--vocab-dir data/cache/gpt2] [--out serve_check]

It starts the server (--server, default ./serve_gpt2cu; --server-args adds flags) on a free loopback port and checks:
  1. GET /health, GET /v1/models;
  2. greedy completions of several prompts, sent together (so they share decode steps), against generate_gpt2cu's
     --ids output for each prompt alone (--generate): the same text, finish_reason and token count; a difference is
     allowed only at a near-tie (the server's top-2 logprobs within --near-tie nats, generate's token the server's
     second: the server's batch runs other GEMMs than generate's batch of 1, so BF16 rounding differs), and is
     reported with its gap;
  3. each prompt alone against the same prompt in the batch, greedy and seeded sampling: identical (the server's
     own determinism), or, for a sampled completion, identical up to a token where the two runs' logprobs up to and
     at it differ, but by no more than --near-tie nats: a request alone runs decode steps of fewer rows, whose
     products round differently in BF16, so a coin at a CDF boundary may fall on the other side (identical logprobs
     cannot flip a coin: a difference then fails; the coins themselves are checked on the CPU, serve_tests' batch
     mixes); seeded sampling against generate_gpt2cu -seed: reported (the host sampler sums in double, the GPU
     picker in fp32, so a coin at a CDF boundary may differ);
  4. streaming against non-streaming: OpenAI's chunk shape, the same text and usage, "data: [DONE]" last;
  5. stop strings (across token boundaries, left out), logprobs, ignore_eos;
  6. the bad-input table: every invalid field a 400 naming it, 404 (model, route), 405, 413;
  6b. chat completions, /tokenize, /detokenize, /metrics, the page at / and the openai client where installed
     (tests/serving/serve_endpoints.py);
  7. with a second server of one slot and no queue: 429 with Retry-After, a client that leaves a stream (its request
     cancelled), and SIGTERM: the running stream finishes, new requests are refused, exit 0.
One line per check, a summary, exit 1 on any failure. The servers' logs go to --out.
Against the CPU mock (tests/serving/test_serve_scripts.sh does this in make test):
    --server tests/serving/serve_mock --generate "tests/serving/serve_mock generate" --model mock --vocab-dir ../shared/data/gpt2
"""
import argparse
import http.client
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import serve_endpoints

PROMPTS = [
    "Once upon a time",
    "The meaning of life is",
    "In 1492, Columbus",
    "Paris est la capitale de la France, et",
    "def fibonacci(n):",
    "Caf\u00e9 cr\u00e8me and a \u20ac5 croissant:",
]


class Checks:
    def __init__(self):
        self.failed, self.passed = [], 0

    def ok(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print(f"ok: {what}")
        else:
            self.failed.append(what)
            print(f"FAIL: {what}" + (f": {detail}" if detail else ""))
        sys.stdout.flush()
        return cond

    def note(self, what):
        print(f"note: {what}")
        sys.stdout.flush()


# ---------------------------------------------------------------- GPT-2 bytes (to decode generate_gpt2cu's ids)
def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Vocab:
    def __init__(self, vocab_dir):
        with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
            enc = json.load(f)
        dec = byte_decoder()
        self.bytes = {i: bytes(dec[c] for c in s) for s, i in enc.items()}
        self.eot = enc["<|endoftext|>"]
        self.dir = vocab_dir

    def text(self, ids):
        return b"".join(self.bytes[i] for i in ids if i != self.eot).decode("utf-8", errors="replace")

    def display(self, i):  # the server's logprobs token strings (llmc/serving/completion_json.h)
        if i == self.eot:
            return "<|endoftext|>"
        b = self.bytes[i]
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{c:02x}" for c in b)


# ---------------------------------------------------------------- HTTP
class Client:
    def __init__(self, port, timeout=300):
        self.port, self.timeout = port, timeout

    def text(self, method, path, body=None, raw=None, headers=None):
        """status, the body as text, the headers"""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        return r.status, text, dict(r.getheaders())

    def request(self, method, path, body=None, raw=None, headers=None):
        """status, the body parsed as JSON (None if it is not), the headers"""
        status, text, headers = self.text(method, path, body, raw, headers)
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        return status, parsed, headers

    def complete(self, body):
        return self.request("POST", "/v1/completions", body)

    def stream(self, body, leave_after=None, path="/v1/completions"):
        """The events ("data: " payloads) of a streamed completion; leave_after: close after that many."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        ctype = r.getheader("Content-Type", "")
        events = []
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\n")
            if line.startswith("data: "):
                events.append(line[6:])
                if events[-1] == "[DONE]" or (leave_after and len(events) >= leave_after):
                    break
        c.close()
        return r.status, ctype, events


def together(fns):
    """Runs the functions at once (threads); their results in order."""
    out = [None] * len(fns)

    def run(i):
        out[i] = fns[i]()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


# ---------------------------------------------------------------- the server process
class Server:
    def __init__(self, args, extra, log_path):
        cmd = shlex.split(args.server) + ["-e", args.model, "--vocab-dir", args.vocab_dir, "--port", "0"]
        cmd += shlex.split(args.server_args) + extra
        self.log = open(log_path, "w")
        print(f"starting: {' '.join(cmd)} (log {log_path})")
        sys.stdout.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.time() + args.start_timeout
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            self.log.flush()
            m = re.match(r"serving .* on http://[^ ]*:(\d+):", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise SystemExit(f"error: the server did not start (see {log_path})")
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        finally:
            self.pump.join(timeout=5)
            self.log.close()


def generate_ids(args, prompt, n, extra, tmp):
    ids_path = os.path.join(tmp, "ids.txt")
    cmd = shlex.split(args.generate) + ["-e", args.model, "--vocab-dir", args.vocab_dir, "-p", prompt, "-g", str(n),
                                        "--ids", ids_path] + extra
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed: {r.stderr.strip()}")
    with open(ids_path) as f:
        return [int(x) for x in f.readline().split()]


# ---------------------------------------------------------------- checks
def check_against_generate(c, ck, args, vocab, tmp, model):
    n = args.max_tokens
    ref = {p: generate_ids(args, p, n, ["-st", "0"], tmp) for p in PROMPTS}
    bodies = [{"model": model, "prompt": p, "max_tokens": n, "temperature": 0, "logprobs": 2} for p in PROMPTS]
    batch = together([lambda b=b: c.complete(b) for b in bodies])
    for p, (status, r, _) in zip(PROMPTS, batch):
        if not ck.ok(status == 200, f"greedy '{p[:24]}' in a batch of {len(PROMPTS)}: 200", r):
            continue
        ids = ref[p]
        ch = r["choices"][0]
        want_text, want_finish = vocab.text(ids), "stop" if ids and ids[-1] == vocab.eot else "length"
        if ch["text"] == want_text:
            ck.ok(ch["finish_reason"] == want_finish and r["usage"]["completion_tokens"] == len(ids),
                  f"greedy '{p[:24]}': as generate_gpt2cu alone ({len(ids)} tokens, {want_finish})",
                  f"{ch['finish_reason']}, {r['usage']['completion_tokens']} tokens")
            continue
        toks, tops = ch["logprobs"]["tokens"], ch["logprobs"]["top_logprobs"]
        k = next((i for i in range(min(len(toks), len(ids))) if toks[i] != vocab.display(ids[i])), None)
        if k is None:
            ck.ok(False, f"greedy '{p[:24]}': as generate_gpt2cu", "the texts differ but not the tokens")
            continue
        lps = sorted(tops[k].values(), reverse=True)
        gap = lps[0] - lps[1] if len(lps) > 1 else float("inf")
        alt = vocab.display(ids[k]) in tops[k]
        ck.ok(alt and gap <= args.near_tie, f"greedy '{p[:24]}': as generate_gpt2cu up to token {k}, a near-tie there "
              f"(top-2 gap {gap:.4f} nats, generate's token the server's second)", f"server {toks[k]!r}, generate "
              f"{vocab.display(ids[k])!r}, top {tops[k]}")
    return batch


def logprob_drift(a, b):
    """Where two completions of one request first differ, and how far apart their logprobs were up to there.
    a, b: choices with logprobs (tokens, token_logprobs, top_logprobs). Returns (k, drift): k the first token that
    differs (None when the tokens are the same), drift the largest |difference| between the two runs' logprobs of a
    token both report, at positions 0..k (the chosen token's before k, the top lists' shared tokens up to k)."""
    la, lb = a["logprobs"], b["logprobs"]
    ta, tb = la["tokens"], lb["tokens"]
    n = min(len(ta), len(tb))
    k = next((i for i in range(n) if ta[i] != tb[i]), None if len(ta) == len(tb) else n)
    drift = 0.0
    for i in range(n if k is None else min(k + 1, n)):
        if k is None or i < k:
            drift = max(drift, abs(la["token_logprobs"][i] - lb["token_logprobs"][i]))
        tops_a, tops_b = la["top_logprobs"][i] or {}, lb["top_logprobs"][i] or {}
        for t in set(tops_a) & set(tops_b):
            drift = max(drift, abs(tops_a[t] - tops_b[t]))
    return k, drift


def check_alone_vs_batch(c, ck, args, vocab, tmp, model, batch):
    n = args.max_tokens
    for p, (status, r, _) in zip(PROMPTS, batch):
        s2, alone, _ = c.complete({"model": model, "prompt": p, "max_tokens": n, "temperature": 0, "logprobs": 2})
        ck.ok(s2 == 200 and status == 200 and alone["choices"][0]["text"] == r["choices"][0]["text"],
              f"greedy '{p[:24]}': alone = in the batch (the server's own)")
    sampled = {"temperature": 0.8, "top_k": 40, "seed": 1234, "logprobs": 5}
    bodies = [dict({"model": model, "prompt": p, "max_tokens": n}, **sampled) for p in PROMPTS]
    batch = together([lambda b=b: c.complete(b) for b in bodies])
    for p, b, (status, r, _) in zip(PROMPTS, bodies, batch):
        s2, alone, _ = c.complete(b)
        ok = status == 200 and s2 == 200
        same = ok and alone["choices"][0]["text"] == r["choices"][0]["text"]
        if same or not ok:
            ck.ok(same, f"sampled (seed 1234) '{p[:24]}': alone = in the batch", f"{status} {s2}")
        else:
            k, drift = logprob_drift(alone["choices"][0], r["choices"][0])
            ck.ok(k is not None and 0 < drift <= args.near_tie,
                  f"sampled (seed 1234) '{p[:24]}': alone = in the batch up to token {k}, where rounding moved a CDF "
                  f"boundary (logprobs up to there {drift:.4f} nats apart, within --near-tie)",
                  "the tokens are equal but not the texts" if k is None else
                  f"logprobs up to token {k} {drift:.4g} nats apart ({'identical: no rounding to excuse it' if drift == 0 else 'over --near-tie'})")
        ids = generate_ids(args, p, n, ["-st", "0.8", "-sk", "40", "-seed", "1234"], tmp)
        if same and alone["choices"][0]["text"] == vocab.text(ids):
            ck.note(f"sampled '{p[:24]}': the same text as generate_gpt2cu -seed 1234")
        elif same:
            ck.note(f"sampled '{p[:24]}': differs from generate_gpt2cu -seed 1234 (host double vs GPU fp32 sums at a "
                    f"CDF boundary, or a BF16 near-tie)")


def check_streaming(c, ck, model):
    for extra in ({"temperature": 0}, {"temperature": 0.9, "seed": 7}):
        body = dict({"model": model, "prompt": PROMPTS[1], "max_tokens": 40}, **extra)
        status, whole, _ = c.complete(body)
        s, ctype, events = c.stream(dict(body, stream=True, stream_options={"include_usage": True}))
        what = f"stream ({'greedy' if extra['temperature'] == 0 else 'seeded'})"
        if not ck.ok(status == 200 and s == 200 and ctype.startswith("text/event-stream") and len(events) >= 3 and
                     events[-1] == "[DONE]", f"{what}: 200, text/event-stream, ends with [DONE]", f"{s} {ctype} {events[-1:]}"):
            continue
        chunks = [json.loads(e) for e in events[:-1]]
        shape = all(ch["object"] == "text_completion" and ch["id"] == chunks[0]["id"] and ch["model"] == model and
                    "created" in ch for ch in chunks)
        body_chunks, usage = chunks[:-1], chunks[-1]
        finishes = [ch["choices"][0]["finish_reason"] for ch in body_chunks]
        shape = shape and all(f is None for f in finishes[:-1]) and finishes[-1] in ("stop", "length")
        shape = shape and usage["choices"] == [] and all(ch["usage"] is None for ch in body_chunks)
        ck.ok(shape, f"{what}: OpenAI's chunk shape (one id, finish_reason on the last, a usage chunk)")
        text = "".join(ch["choices"][0]["text"] for ch in body_chunks)
        ck.ok(text == whole["choices"][0]["text"] and finishes[-1] == whole["choices"][0]["finish_reason"] and
              usage["usage"] == whole["usage"], f"{what}: the same text, finish_reason and usage as without streaming")


def check_stop_logprobs_eos(c, ck, model):
    status, r, _ = c.complete({"model": model, "prompt": PROMPTS[0], "max_tokens": 48, "temperature": 0, "ignore_eos": True})
    text = r["choices"][0]["text"] if status == 200 else ""
    stop = next((text[i:i + 4] for i in range(8, max(8, len(text) - 4)) if text[i:i + 4].strip() and
                 text.find(text[i:i + 4]) == i), None)
    if ck.ok(stop is not None, "a stop string from the greedy text", repr(text)):
        s, r2, _ = c.complete({"model": model, "prompt": PROMPTS[0], "max_tokens": 48, "temperature": 0,
                               "ignore_eos": True, "stop": ["\u2603never", stop]})
        ck.ok(s == 200 and r2["choices"][0]["text"] == text[:text.find(stop)] and
              r2["choices"][0]["finish_reason"] == "stop", f"stop {stop!r}: the text ends before it, finish_reason stop",
              r2)
    s, r, _ = c.complete({"model": model, "prompt": PROMPTS[2], "max_tokens": 16, "temperature": 0, "logprobs": 3,
                          "ignore_eos": True})
    lp = r["choices"][0]["logprobs"] if s == 200 else None
    good = lp is not None and len(lp["tokens"]) == 16 and all(x <= 1e-6 for x in lp["token_logprobs"]) and \
        all(len(t) == 3 and abs(max(t.values()) - x) < 1e-4 for t, x in zip(lp["top_logprobs"], lp["token_logprobs"]))
    ck.ok(good, "logprobs 3 (greedy): a token each, <= 0, the chosen the most likely of its top 3")
    s, r, _ = c.complete({"model": model, "prompt": PROMPTS[3], "max_tokens": 30, "ignore_eos": True, "seed": 3})
    ck.ok(s == 200 and r["usage"]["completion_tokens"] == 30 and r["choices"][0]["finish_reason"] == "length",
          "ignore_eos: max_tokens tokens whatever comes")


BAD = [  # (what, method, path, body (dict, or bytes as sent), status, param)
    ("not JSON", "POST", "/v1/completions", b"{not json", 400, None),
    ("not an object", "POST", "/v1/completions", b"[1, 2]", 400, None),
    ("no prompt", "POST", "/v1/completions", {"max_tokens": 5}, 400, "prompt"),
    ("an empty prompt", "POST", "/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("a batch of prompts", "POST", "/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
    ("a token id past the vocabulary", "POST", "/v1/completions", {"prompt": [1, 10 ** 9]}, 400, "prompt"),
    ("max_tokens 0", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens a string", "POST", "/v1/completions", {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ("max_tokens past the context", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 10 ** 7}, 400, "max_tokens"),
    ("temperature 3", "POST", "/v1/completions", {"prompt": "x", "temperature": 3}, 400, "temperature"),
    ("top_p 0", "POST", "/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("top_k -5", "POST", "/v1/completions", {"prompt": "x", "top_k": -5}, 400, "top_k"),
    ("seed a string", "POST", "/v1/completions", {"prompt": "x", "seed": "1"}, 400, "seed"),
    ("5 stop strings", "POST", "/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("stream a string", "POST", "/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("logprobs 9", "POST", "/v1/completions", {"prompt": "x", "logprobs": 9}, 400, "logprobs"),
    ("n 2", "POST", "/v1/completions", {"prompt": "x", "n": 2}, 400, "n"),
    ("echo", "POST", "/v1/completions", {"prompt": "x", "echo": True}, 400, "echo"),
    ("an unknown field", "POST", "/v1/completions", {"prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ("another model", "POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ("chat with no messages", "POST", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("chat with a tool message", "POST", "/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, 400,
     "messages[0].role"),
    ("chat with a prompt", "POST", "/v1/chat/completions", {"prompt": "x"}, 400, "messages"),
    ("detokenize an id outside", "POST", "/detokenize", {"tokens": [1 << 30]}, 400, "tokens"),
    ("tokenize neither prompt nor messages", "POST", "/tokenize", {}, 400, "prompt"),
    ("no such endpoint", "POST", "/v1/embeddings", {"input": "x"}, 404, None),
    ("POST /metrics", "POST", "/metrics", {}, 405, None),
    ("GET completions", "GET", "/v1/completions", None, 405, None),
]


def check_bad_inputs(c, ck, args):
    for what, method, path, body, status, param in BAD:
        raw = body if isinstance(body, bytes) else None
        s, r, _ = c.request(method, path, body=None if raw is not None else body, raw=raw)
        good = s == status and isinstance(r, dict) and "error" in r and r["error"].get("message") and \
            r["error"].get("param") == param
        ck.ok(good, f"bad input, {what}: {status}" + (f" naming '{param}'" if param else ""), f"{s} {r}")
    big = b'{"prompt": "' + b"a" * (args.max_body + 16) + b'"}'
    s, r, _ = c.request("POST", "/v1/completions", raw=big)
    ck.ok(s == 413 and isinstance(r, dict) and "error" in r, f"bad input, a body over --max-body: 413", f"{s} {r}")
    s, r, _ = c.complete({"prompt": "still here", "max_tokens": 2})
    ck.ok(s == 200, "still serving after the bad inputs")


def check_small_server(args, ck, log_path, model):
    """One slot, no queue: 429 with Retry-After, a client leaving a stream, then SIGTERM's drain."""
    srv = Server(args, ["--max-batch", "1", "--max-queue", "0"], log_path)
    c = Client(srv.port)
    holder = threading.Thread(target=lambda: c.stream({"prompt": PROMPTS[0], "max_tokens": args.long_tokens,
                                                       "ignore_eos": True, "stream": True}))
    holder.start()
    health = None
    for _ in range(300):
        _, health, _ = c.request("GET", "/health")
        if health and health["running"] == 1:
            break
        time.sleep(0.01)
    s, r, headers = c.complete({"prompt": "x", "max_tokens": 2})
    ck.ok(s == 429 and headers.get("Retry-After") and r["error"]["code"] == "queue_full",
          "queue full (one slot busy, no queue): 429 with Retry-After", f"{s} {headers.get('Retry-After')} {r}")
    holder.join()
    _, before, _ = c.request("GET", "/health")
    s, _, events = c.stream({"prompt": PROMPTS[1], "max_tokens": args.long_tokens, "ignore_eos": True, "stream": True},
                            leave_after=2)
    h = None
    for _ in range(500):
        _, h, _ = c.request("GET", "/health")
        if h["cancelled"] > before["cancelled"] and h["running"] == 0:
            break
        time.sleep(0.01)
    ck.ok(h["cancelled"] == before["cancelled"] + 1 and h["running"] == 0,
          "a client that leaves a stream: its request is cancelled, its slot free", f"{h}")
    # SIGTERM while a stream runs: it finishes, new requests are refused, the server exits 0
    result = {}
    streamer = threading.Thread(target=lambda: result.update(
        out=c.stream({"prompt": PROMPTS[2], "max_tokens": args.long_tokens // 4, "ignore_eos": True, "stream": True})))
    streamer.start()
    for _ in range(300):
        _, h, _ = c.request("GET", "/health")
        if h["running"] == 1:
            break
        time.sleep(0.01)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    try:
        s, r, _ = c.complete({"prompt": "late", "max_tokens": 2})
        refused = s == 503 and r["error"]["type"] == "server_shutting_down"
    except OSError:
        refused = True  # the listener has stopped already
    ck.ok(refused, "SIGTERM: new requests are refused (503, or no listener)")
    streamer.join()
    s, _, events = result.get("out", (0, "", []))
    last = json.loads(events[-2]) if len(events) >= 2 else {}
    ck.ok(s == 200 and events and events[-1] == "[DONE]" and last.get("choices", [{}])[0].get("finish_reason") == "length",
          "SIGTERM: the running stream finishes (finish_reason length, [DONE])")
    rc = srv.stop(timeout=60)
    ck.ok(rc == 0, f"SIGTERM: the server exits 0 (exit {rc})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model file or directory (-e of both programs)")
    ap.add_argument("--server", default="./serve_gpt2cu")
    ap.add_argument("--server-args", default="", help="more flags for the server (e.g. '--max-batch 64')")
    ap.add_argument("--generate", default="./generate_gpt2cu")
    ap.add_argument("--vocab-dir", default="data/cache/gpt2")
    ap.add_argument("--max-tokens", type=int, default=64, help="new tokens per compared completion")
    ap.add_argument("--long-tokens", type=int, default=400, help="a long stream's tokens (the small server's checks)")
    ap.add_argument("--max-body", type=int, default=1 << 20, help="the server's --max-body (for the 413 check)")
    ap.add_argument("--near-tie", type=float, default=1.0,
                    help="top-2 logprob gap (nats) that excuses a difference from generate_gpt2cu (default 1.0: GPT-2's "
                         "logits are tens to a hundred or more, where one bf16 step is 0.125-0.5, and "
                         "check_generate_hf.py allows 2%% of the top logit; 0.001 for FP32 builds, whose GEMM shapes still "
                         "differ from generate_gpt2cu's)")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--out", default="serve_check")
    ap.add_argument("--skip-small-server", action="store_true", help="no 429 / client-left / SIGTERM checks")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    vocab = Vocab(args.vocab_dir)
    ck = Checks()
    srv = Server(args, [], os.path.join(args.out, "server.log"))
    c = Client(srv.port)
    try:
        s, h, _ = c.request("GET", "/health")
        ck.ok(s == 200 and h["status"] == "ok", "GET /health: 200, ok", f"{s} {h}")
        s, m, _ = c.request("GET", "/v1/models")
        model = m["data"][0]["id"] if s == 200 and m.get("data") else None
        ck.ok(model is not None and m["object"] == "list", f"GET /v1/models: {model}")
        first_scrape = serve_endpoints.scrape(c)[2]
        with tempfile.TemporaryDirectory() as tmp:
            batch = check_against_generate(c, ck, args, vocab, tmp, model)
            check_alone_vs_batch(c, ck, args, vocab, tmp, model, batch)
        check_streaming(c, ck, model)
        check_stop_logprobs_eos(c, ck, model)
        check_bad_inputs(c, ck, args)
        serve_endpoints.check_chat(c, ck, model)
        serve_endpoints.check_tokenize(c, ck, vocab, model)
        serve_endpoints.check_page(c, ck)
        serve_endpoints.check_openai_client(c, ck, model)
        serve_endpoints.check_metrics(c, ck, first_scrape)
        s, h, _ = c.request("GET", "/health")
        ck.ok(s == 200 and h["errors"] == 0 and h["running"] == 0, "no request failed inside the server", f"{h}")
    finally:
        rc = srv.stop()
    ck.ok(rc == 0, f"the server drains and exits 0 on SIGTERM (exit {rc})")
    if not args.skip_small_server:
        check_small_server(args, ck, os.path.join(args.out, "server_small.log"), model)
    print(f"check_serve: {ck.passed} passed, {len(ck.failed)} failed" +
          (": " + "; ".join(ck.failed) if ck.failed else ""))
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
