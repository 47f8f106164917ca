#!/usr/bin/env python3
"""Load test of a running serve_gpt2cu (docs/SERVING.md), Python's standard library only, loopback only.

    ./serve_gpt2cu -e MODEL --max-batch 64 &
    python3 scripts/bench/bench_serve.py --url http://127.0.0.1:8000 --rates 2,4,8,16,32 --duration 60 --out bench_serve.md

For each offered rate (requests/s), requests arrive as a Poisson process for --duration seconds (at most
--max-requests) and are sent by a pool of --clients threads (64), each request streamed: a prompt of
--prompt-min..--prompt-max random token ids (16-512; ids, so the length is exact), --max-tokens-min..max new tokens
(16-256), ignore_eos so each makes all of them; --shared-prefix N puts the same N tokens before every prompt (a system
prompt: measure a server with and without --prefix-cache 1). The clients are spread over --procs processes (threads of one Python
process read about 100K stream events a second at most, less than a saturated server sends). Open loop: a request's
clock starts at its arrival, so time it waits for a free client counts. Measured per rate: completed / refused (429) / failed requests, output tokens/s, TTFT
(arrival to the first token) and TPOT (the time per output token after the first) p50 and p99, and the server's
batch occupancy (sequences per decode step, from GET /health's counters before and after). One markdown table
printed and written to --out. Bounded: nothing is sent after --duration, and in-flight requests get --drain-timeout.
"""
import argparse
import http.client
import multiprocessing as mp
import os
import ipaddress
import json
import random
import socket
import sys
import threading
import time
import urllib.parse


def shared_prefix(args, vocab):
    """The --shared-prefix tokens: the same ids for every request of a run (seeded by --seed)."""
    r = random.Random(args.seed + 0x5EED)
    return [r.randrange(vocab - 1) for _ in range(args.shared_prefix)]


def loopback_only(url):
    u = urllib.parse.urlparse(url)
    if u.scheme != "http" or not u.hostname:
        raise SystemExit(f"error: --url {url}: expected http://HOST:PORT")
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(u.hostname, u.port or 80)}
    except socket.gaierror as e:
        raise SystemExit(f"error: --url {url}: {e}")
    if not addrs or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        raise SystemExit(f"error: --url {url}: not a loopback address; this benchmark only loads this machine")
    return u.hostname, u.port or 80


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def health(host, port, timeout):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request("GET", "/health")
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    return body


class Worker(threading.Thread):
    """Takes (arrival, body) jobs; streams each; records the outcome."""

    def __init__(self, host, port, jobs, results, timeout):
        super().__init__(daemon=True)
        self.host, self.port, self.jobs, self.results, self.timeout = host, port, jobs, results, timeout
        self.conn = None

    def run(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self.results.append(self.one(*job))

    def send(self, body):
        """The response; a kept-alive connection the server has closed meanwhile is opened again, once."""
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
                return self.conn.getresponse()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise

    def one(self, arrival, body):
        out = {"arrival": arrival, "status": 0, "tokens": 0, "first": None, "end": None}
        try:
            r = self.send(body)
            out["status"] = r.status
            if r.status != 200:
                r.read()
                return out
            while True:
                line = r.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    out["end"] = time.monotonic()
                    r.read()  # the chunked body's end: the connection is free for the next request
                    break
                if out["first"] is None and b'"choices":[{' in data:
                    out["first"] = time.monotonic()
                if b'"usage"' in data or b'"error"' in data:  # parsed only where read: most events are one token
                    chunk = json.loads(data)
                    if chunk.get("usage"):
                        out["tokens"] = chunk["usage"]["completion_tokens"]
                    if "error" in chunk:
                        out["status"] = 500
            if out["end"] is None:
                out["status"] = -1
        except (OSError, http.client.HTTPException, ValueError):
            out["status"] = -1
            if self.conn is not None:
                self.conn.close()
            self.conn = None
        return out


def client_process(host, port, jobs, out, clients, timeout):
    """One process of the client pool: `clients` threads on the shared job queue; its results, when they stop."""
    results = []
    workers = [Worker(host, port, jobs, results, timeout) for _ in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(results)


def run_rate(args, host, port, rate, rng, vocab):
    """One offered rate: its row of numbers."""
    before = health(host, port, args.timeout)
    jobs, out = mp.Queue(), mp.Queue()
    procs = min(args.procs, args.clients)
    per = [args.clients // procs + (i < args.clients % procs) for i in range(procs)]
    workers = [mp.Process(target=client_process, args=(host, port, jobs, out, n, args.timeout), daemon=True)
               for n in per]
    for w in workers:
        w.start()
    t0 = time.monotonic()
    t, sent = 0.0, 0
    while sent < args.max_requests:
        t += rng.expovariate(rate)
        if t > args.duration:
            break
        prompt = shared_prefix(args, vocab) + \
            [rng.randrange(vocab - 1) for _ in range(rng.randint(args.prompt_min, args.prompt_max))]
        body = json.dumps({"prompt": prompt, "max_tokens": rng.randint(args.max_tokens_min, args.max_tokens_max),
                           "temperature": args.temperature, "seed": rng.randrange(1 << 31), "ignore_eos": True,
                           "stream": True, "stream_options": {"include_usage": True}}).encode()
        delay = t0 + t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        jobs.put((t0 + t, body))
        sent += 1
    for _ in range(args.clients):
        jobs.put(None)
    deadline = time.monotonic() + args.drain_timeout
    results = []
    for _ in workers:
        try:
            results += out.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # queue.Empty: a process still waiting on requests past the drain timeout
            break
    for w in workers:
        w.join(timeout=max(0.1, deadline - time.monotonic()))
        if w.is_alive():
            w.terminate()
    wall = time.monotonic() - t0
    after = health(host, port, args.timeout)
    done = [r for r in results if r["status"] == 200 and r["first"] is not None]
    ttft = [r["first"] - r["arrival"] for r in done]
    tpot = [(r["end"] - r["first"]) / (r["tokens"] - 1) for r in done if r["tokens"] > 1]
    steps = after["decode_steps"] - before["decode_steps"]
    rows = after["decode_rows"] - before["decode_rows"]
    return {
        "rate": rate, "sent": sent, "completed": len(done),
        "refused": sum(r["status"] == 429 for r in results),
        "failed": sum(r["status"] not in (200, 429) for r in results) + (sent - len(results)),
        "wall": wall, "tok_s": sum(r["tokens"] for r in done) / wall if wall > 0 else 0.0,
        "ttft50": percentile(ttft, 0.5) * 1e3, "ttft99": percentile(ttft, 0.99) * 1e3,
        "tpot50": percentile(tpot, 0.5) * 1e3, "tpot99": percentile(tpot, 0.99) * 1e3,
        "occupancy": rows / steps if steps else 0.0, "slots": after["slots"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--rates", default="2,4,8,16,32", help="offered requests/s, comma-separated")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per rate")
    ap.add_argument("--max-requests", type=int, default=2000, help="at most this many requests per rate")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=min(8, os.cpu_count() or 1),
                    help="processes the clients are spread over (default: up to 8, one per core)")
    ap.add_argument("--prompt-min", type=int, default=16)
    ap.add_argument("--prompt-max", type=int, default=512)
    ap.add_argument("--max-tokens-min", type=int, default=16)
    ap.add_argument("--max-tokens-max", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--shared-prefix", type=int, default=0,
                    help="tokens of one fixed prefix (a system prompt) before every prompt, for --prefix-cache runs")
    ap.add_argument("--vocab", type=int, default=50257, help="prompt ids are drawn below vocab - 1 (<|endoftext|>)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take")
    ap.add_argument("--drain-timeout", type=float, default=600.0, help="seconds in-flight requests get after a rate")
    ap.add_argument("--out", default="", help="also write the table here")
    args = ap.parse_args()
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        raise SystemExit(f"error: --rates {args.rates}: expected numbers separated by commas")
    if not rates or any(r <= 0 for r in rates):
        raise SystemExit("error: --rates: every rate must be > 0")
    for name in ("duration", "clients", "procs", "max_requests", "prompt_min", "max_tokens_min", "vocab"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be > 0")
    if args.shared_prefix < 0:
        raise SystemExit("error: --shared-prefix must be >= 0")
    if args.prompt_min > args.prompt_max or args.max_tokens_min > args.max_tokens_max:
        raise SystemExit("error: a minimum over its maximum (--prompt-min/max, --max-tokens-min/max)")
    host, port = loopback_only(args.url)
    try:
        h = health(host, port, 10)
    except OSError as e:
        raise SystemExit(f"error: no server at {args.url}: {e}")
    print(f"bench_serve: {h['model']} at {args.url}, {h['slots']} slots, context {h['context']}; {args.clients} "
          f"clients, prompts {args.prompt_min}-{args.prompt_max} tokens, {args.max_tokens_min}-{args.max_tokens_max} new, "
          f"Poisson arrivals for {args.duration:g} s per rate", flush=True)
    if args.shared_prefix + args.prompt_max + args.max_tokens_max > h["context"]:
        raise SystemExit(f"error: prompts up to {args.shared_prefix + args.prompt_max} + {args.max_tokens_max} new "
                         f"tokens exceed the server's context of {h['context']}")
    rng = random.Random(args.seed)
    rows = []
    for rate in rates:
        row = run_rate(args, host, port, rate, rng, args.vocab)
        rows.append(row)
        print(f"  rate {rate:g}/s: {row['completed']}/{row['sent']} completed, {row['tok_s']:.0f} tok/s, "
              f"TTFT p50 {row['ttft50']:.1f} ms, TPOT p50 {row['tpot50']:.3f} ms, occupancy {row['occupancy']:.1f}", flush=True)
    lines = ["| offered req/s | sent | completed | 429 | failed | output tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
             "TPOT p99 ms | sequences per decode step (of slots) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['rate']:g} | {r['sent']} | {r['completed']} | {r['refused']} | {r['failed']} | "
                     f"{r['tok_s']:.0f} | {r['ttft50']:.1f} | {r['ttft99']:.1f} | {r['tpot50']:.3f} | {r['tpot99']:.3f} | "
                     f"{r['occupancy']:.1f} of {r['slots']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 1 if any(r["failed"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
