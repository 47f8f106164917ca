"""check_serve.py's checks of the endpoints beside completions, on a running server (the GPU engine or serve_mock):
chat completions (the reply is the completion of the rendered conversation with the template's stop, whole and
streamed, chat's shapes), /tokenize and /detokenize (against the vocabulary's own encoder), /metrics (read by
prometheus_client's parser where it is installed, and always by the strict reader below, every metric of
docs/SERVING.md present and moving), the page at / (served, self-contained), and the official `openai` client's
completions and chat calls where that package is installed."""
import json
import math
import re

# The default chat template (llmc/serving/chat_template.h)
def render_default(messages):
    frame = {"system": "{}\n\n", "developer": "{}\n\n", "user": "User: {}\n", "assistant": "Assistant: {}\n"}
    return "".join(frame[m["role"]].format(m["content"]) for m in messages) + "Assistant:"


CONVERSATION = [{"role": "system", "content": "You answer in one sentence."},
                {"role": "user", "content": "What is the capital of France?"}]


def check_chat(c, ck, model):
    for extra in ({"temperature": 0}, {"temperature": 0.8, "seed": 11}):
        what = f"chat ({'greedy' if extra['temperature'] == 0 else 'seeded'})"
        body = dict({"model": model, "messages": CONVERSATION, "max_tokens": 32}, **extra)
        s, chat, _ = c.request("POST", "/v1/chat/completions", body)
        s2, comp, _ = c.complete(dict({"model": model, "prompt": render_default(CONVERSATION), "max_tokens": 32,
                                       "stop": ["\nUser:"]}, **extra))
        if not ck.ok(s == 200 and s2 == 200, f"{what}: 200", f"{s} {chat}"):
            continue
        choice = chat["choices"][0]
        ck.ok(chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-") and chat["model"] == model and
              choice["message"]["role"] == "assistant",
              f"{what}: OpenAI's chat shape (chat.completion, chatcmpl- id, the assistant's message)", f"{chat}")
        ck.ok(choice["message"]["content"] == comp["choices"][0]["text"] and
              choice["finish_reason"] == comp["choices"][0]["finish_reason"] and chat["usage"] == comp["usage"],
              f"{what}: the reply is the completion of the rendered conversation (template's stop included)",
              f"{choice} vs {comp['choices'][0]}")
        s, ctype, events = c.stream(dict(body, stream=True), path="/v1/chat/completions")
        if not ck.ok(s == 200 and ctype.startswith("text/event-stream") and events and events[-1] == "[DONE]",
                     f"{what}, streamed: 200, text/event-stream, [DONE]", f"{s} {ctype} {events[-1:]}"):
            continue
        chunks = [json.loads(e) for e in events[:-1]]
        deltas = [ch["choices"][0]["delta"] for ch in chunks]
        shape = all(ch["object"] == "chat.completion.chunk" and ch["id"] == chunks[0]["id"] for ch in chunks)
        shape = shape and deltas[0].get("role") == "assistant" and all("role" not in d for d in deltas[1:])
        shape = shape and chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
        ck.ok(shape, f"{what}, streamed: chunks of one id, the role first, the finish reason last")
        ck.ok("".join(d.get("content", "") for d in deltas) == choice["message"]["content"],
              f"{what}, streamed: the deltas join to the whole reply")
    s, r, _ = c.request("POST", "/v1/chat/completions",
                        {"messages": CONVERSATION, "max_tokens": 4, "logprobs": True, "top_logprobs": 3,
                         "ignore_eos": True})
    content = (r or {}).get("choices", [{}])[0].get("logprobs", {}) or {}
    content = content.get("content", [])
    ck.ok(s == 200 and len(content) == 4 and all(len(t["top_logprobs"]) == 3 and t["logprob"] <= 0 and
                                                  isinstance(t["bytes"], list) for t in content),
          "chat logprobs: one entry per token with its bytes and the 3 most likely", f"{s} {r}")


def check_tokenize(c, ck, vocab, model):
    text = "Hello world! Ünïcödé, \u20ac and spaces   here."
    s, t, _ = c.request("POST", "/tokenize", {"model": model, "prompt": text, "return_token_strs": True})
    want = None
    try:  # tiktoken's GPT-2 encoder from the same vocabulary files, where tiktoken is installed
        import os
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench"))
        from bench_tokenizer import load_tiktoken
        want = load_tiktoken(vocab.dir)[0].encode_ordinary(text)
    except Exception:  # no tiktoken: the ids are checked by decoding them below
        pass
    ck.ok(s == 200 and t["count"] == len(t["tokens"]) == len(t["token_strs"]) and
          vocab.text(t["tokens"]) == text and (want is None or t["tokens"] == want),
          "/tokenize: ids that decode to the text" + (", tiktoken's" if want is not None else ""), f"{s} {t} want {want}")
    s, d, _ = c.request("POST", "/detokenize", {"model": model, "tokens": t["tokens"]})
    ck.ok(s == 200 and d["prompt"] == text, "/detokenize: the text back", f"{s} {d}")
    s, m, _ = c.request("POST", "/tokenize", {"messages": CONVERSATION})
    s2, p, _ = c.request("POST", "/tokenize", {"prompt": render_default(CONVERSATION)})
    ck.ok(s == 200 and s2 == 200 and m["tokens"] == p["tokens"], "/tokenize of messages: the rendered conversation's ids")


def parse_prometheus(text):
    """{sample name: [(labels dict, value)]}; raises ValueError on what the text format does not allow."""
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\[\\"n])*)",?')
    types, samples, seen = {}, {}, set()
    if not text.endswith("\n"):
        raise ValueError("no final line feed")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if not line or (line.startswith("#") and not line.startswith(("# HELP ", "# TYPE "))):
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                raise ValueError(f"line {n}: a bad TYPE")
            if parts[2] in types:
                raise ValueError(f"line {n}: a second TYPE for {parts[2]}")
            types[parts[2]] = parts[3]
            continue
        if line.startswith("# HELP "):
            continue
        m = line_re.match(line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        labels, rest = {}, m.group(3) or ""
        while rest:
            lm = label_re.match(rest)
            if not lm:
                raise ValueError(f"line {n}: bad labels {rest!r}")
            labels[lm.group(1)] = lm.group(2).replace('\\n', '\n').replace('\\"', '"').replace('\\\\', '\\')
            rest = rest[lm.end():]
        value = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(m.group(4))
        value = float(m.group(4)) if value is None else value
        key = (m.group(1), tuple(sorted(labels.items())))
        if key in seen:
            raise ValueError(f"line {n}: the series twice")
        seen.add(key)
        samples.setdefault(m.group(1), []).append((labels, value))
    for name, t in types.items():
        if t == "histogram":
            buckets = samples.get(name + "_bucket", [])
            les = [float(l["le"].replace("+Inf", "inf")) for l, _ in buckets]
            counts = [v for _, v in buckets]
            if not buckets or les != sorted(les) or les[-1] != math.inf or counts != sorted(counts) or \
                    samples[name + "_count"][0][1] != counts[-1] or name + "_sum" not in samples:
                raise ValueError(f"histogram {name}: buckets, +Inf, _sum or _count wrong")
    return samples


METRICS = ["llmc_time_to_first_token_seconds", "llmc_time_per_output_token_seconds", "llmc_e2e_request_latency_seconds",
           "llmc_request_queue_time_seconds", "llmc_request_prefill_time_seconds", "llmc_num_requests_running",
           "llmc_num_requests_waiting", "llmc_kv_cache_slots", "llmc_kv_cache_slots_in_use",
           "llmc_kv_cache_positions_in_use", "llmc_kv_cache_usage_ratio", "llmc_prefix_cache_hits_total",
           "llmc_prefix_cache_queries_total", "llmc_request_success_total", "llmc_generation_tokens_total",
           "llmc_prompt_tokens_total", "llmc_requests_accepted_total", "llmc_requests_refused_total"]


def scrape(c):
    s, text, headers = c.text("GET", "/metrics")
    return s, headers.get("Content-Type", ""), text


def check_metrics(c, ck, before):
    """before: the first scrape's text (taken before any request)."""
    s, ctype, text = scrape(c)
    try:
        samples, first = parse_prometheus(text), parse_prometheus(before)
    except ValueError as e:
        ck.ok(False, "GET /metrics: Prometheus' text format", str(e))
        return
    ck.ok(s == 200 and ctype.startswith("text/plain; version=0.0.4"), "GET /metrics: 200, text/plain; version=0.0.4")
    try:
        from prometheus_client.parser import text_string_to_metric_families
        names = {f.name for f in text_string_to_metric_families(text)}
        ck.ok(all(n.removesuffix("_total") in names or n in names for n in METRICS),
              "GET /metrics: prometheus_client's parser reads every family", f"{sorted(names)}")
    except ImportError:
        pass
    missing = [n for n in METRICS if n not in samples and n + "_count" not in samples]
    ck.ok(not missing, f"GET /metrics: all {len(METRICS)} metrics present", f"missing {missing}")

    def total(smp, name):
        return sum(v for _, v in smp.get(name, []))
    moved = [n for n in ("llmc_time_to_first_token_seconds_count", "llmc_time_per_output_token_seconds_count",
                         "llmc_e2e_request_latency_seconds_count", "llmc_request_queue_time_seconds_count",
                         "llmc_request_prefill_time_seconds_count", "llmc_request_success_total",
                         "llmc_generation_tokens_total", "llmc_prompt_tokens_total", "llmc_requests_accepted_total")
             if total(samples, n) <= total(first, n)]
    ck.ok(not moved, "GET /metrics: latency histograms and counters moved with the requests", f"did not move: {moved}")


def check_page(c, ck):
    s, page, headers = c.text("GET", "/")
    external = re.findall(r'(?:src|href)="(?:https?:)?//', page)
    ck.ok(s == 200 and headers.get("Content-Type", "").startswith("text/html") and "<textarea" in page and
          not external, "GET /: the playground page, self-contained (no external address)", f"{s} {external}")


def check_openai_client(c, ck, model):
    try:
        import openai
    except ImportError:
        print("note: the openai package is not installed: its client's calls are not checked")
        return
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{c.port}/v1", api_key="unused")
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
    ck.ok(r.choices[0].text is not None and r.usage.completion_tokens >= 1, "openai client: completions.create")
    r = client.chat.completions.create(model=model, messages=CONVERSATION, max_tokens=8, temperature=0)
    ck.ok(r.choices[0].message.role == "assistant" and r.choices[0].message.content is not None,
          "openai client: chat.completions.create")
    pieces = [ch.choices[0].delta.content or "" for ch in
              client.chat.completions.create(model=model, messages=CONVERSATION, max_tokens=8, temperature=0,
                                             stream=True) if ch.choices]
    ck.ok("".join(pieces) == r.choices[0].message.content, "openai client: chat.completions.create(stream=True)")
