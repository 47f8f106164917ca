#!/usr/bin/env python3
"""The playground page (GET /, llmc/serving/playground_page.h) in a real browser: headless Chromium, driven through
its DevTools protocol (a small WebSocket client below, Python's standard library only), against a server this script
starts (--server: serve_gpt2cu, or tests/serving/serve_mock on the CPU):

  1. the page loads and shows the served model's name;
  2. a prompt typed in and sent (greedy) streams into the page: a screenshot while it streams (--screenshot), then
     the page's text equals the same request's non-streamed completion, and its time to first token, token count
     (the usage chunk's) and tokens/s are shown;
  3. a bad setting (temperature 5) shows the API's own error message;
  4. chat mode: the reply equals POST /v1/chat/completions for the same conversation, and a second turn carries the
     first (the conversation is kept).
One line per check, exit 1 on any failure; without Chromium, one line saying so and exit 0 (--require-browser: 1).

    python3 tests/serving/check_page.py --server tests/serving/serve_mock --server-args "--fake-step-us 20000" \\
        --model mock --vocab-dir data/cache/gpt2 --screenshot page.png
"""
import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import check_serve


class WebSocket:
    """A client for one WebSocket (RFC 6455): text frames out (masked), frames in (text, continuation, ping)."""

    def __init__(self, url, timeout=30):
        assert url.startswith("ws://")
        host_port, path = url[5:].split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"no WebSocket upgrade: {head[:100]!r}")

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the browser closed the connection")
            out += chunk
        return out

    def send(self, text):
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping: answer (unmasked payload echoed, our frames are masked)
                mask = os.urandom(4)
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask +
                                  bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the WebSocket")
            message += payload
            if b0 & 0x80:
                return message.decode("utf-8")


class Browser:
    """Headless Chromium with one page, driven by DevTools commands."""

    def __init__(self, chromium, width=1280, height=900):
        self.profile = tempfile.mkdtemp(prefix="llmc_page_")
        self.proc = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                      "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
                                      f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file, deadline = os.path.join(self.profile, "DevToolsActivePort"), time.time() + 60
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("Chromium did not start (no DevToolsActivePort)")
            time.sleep(0.1)
        port = int(open(port_file).read().split("\n")[0])
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        self.ws = WebSocket(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.js(expression):
                return True
            time.sleep(0.02)
        return False

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def run_page(b, c, ck, args, model):
    b.call("Page.enable")
    b.call("Page.navigate", url=f"http://127.0.0.1:{c.port}/")
    ck.ok(b.wait(f"document.getElementById('model') && document.getElementById('model').textContent === "
                 f"{json.dumps('model: ' + model)}", 30), f"the page loads and names the model ({model})")
    settings = {"max_tokens": args.max_tokens, "temperature": 0, "top_p": 1, "top_k": 0}

    def set_fields(values, prompt, mode):
        script = "".join(f"document.getElementById({json.dumps(k)}).value = {json.dumps(str(v))};"
                         for k, v in values.items())
        script += (f"document.getElementById('prompt').value = {json.dumps(prompt)};"
                   f"document.getElementById('mode').value = {json.dumps(mode)};")
        b.js(script)

    # 2. a completion streams in
    prompt = "The playground streams"
    b.js("document.getElementById('clear').click()")
    set_fields(settings, prompt, "completion")
    b.js("document.getElementById('send').click()")
    mid = b.wait("document.getElementById('status').textContent === 'running' && "
                 "document.querySelector('#output .reply') && "
                 "document.querySelector('#output .reply').textContent.length >= 8", 60)
    if mid and args.screenshot:
        b.screenshot(args.screenshot)
    reply_mid = b.js("(document.querySelector('#output .reply') || {}).textContent || ''")
    ck.ok(mid or not args.require_mid_stream, "the reply shows while it streams" + ("" if mid else " (not caught: "
                                              "the stream ended between two looks)"))
    ck.ok(b.wait("document.getElementById('status').textContent !== 'running'", 120) and
          b.js("document.getElementById('status').textContent") == "done", "the stream ends (status: done)",
          b.js("document.getElementById('status').textContent + ' ' + document.getElementById('error').textContent"))
    shown = b.js("document.querySelector('#output .reply').textContent")
    s, whole, _ = c.complete({"prompt": prompt, **settings})
    ck.ok(s == 200 and shown == whole["choices"][0]["text"] and shown.startswith(reply_mid),
          "the page's text is the non-streamed completion's", f"page {shown!r} vs {whole}")
    stats = b.js("['ttft', 'tokens', 'tps'].map(id => document.getElementById(id).textContent)")
    ck.ok(stats[0].endswith(" ms") and stats[1] == str(whole["usage"]["completion_tokens"]) and
          (whole["usage"]["completion_tokens"] < 2 or float(stats[2]) > 0),
          f"time to first token, tokens and tokens/s shown ({stats[0]}, {stats[1]} tokens, {stats[2]} tokens/s)",
          f"{stats}")
    if args.screenshot:
        if not mid:  # the stream ended between two looks: the page as it ended
            b.screenshot(args.screenshot)
        size = png_size(args.screenshot)
        ck.ok(size is not None and size[0] >= 800 and os.path.getsize(args.screenshot) > 10000,
              f"a screenshot {'mid-stream' if mid else 'at the end'}: {args.screenshot} {size}")

    # 3. a bad setting shows the API's message
    set_fields(dict(settings, temperature=5), prompt, "completion")
    b.js("document.getElementById('send').click()")
    b.wait("document.getElementById('status').textContent === 'error'", 30)
    s, err, _ = c.complete({"prompt": prompt, **dict(settings, temperature=5)})
    shown_error = b.js("document.getElementById('error').textContent")
    ck.ok(s == 400 and shown_error == err["error"]["message"], f"a bad setting shows the API's message ({shown_error})",
          f"{shown_error!r} vs {err}")

    # 4. chat, two turns, short replies: the check is that the page carries the conversation, and two long greedy
    # replies would overflow the model's context (the API's error then, which the page must show as it is)
    chat_settings = dict(settings, max_tokens=min(args.max_tokens, 48))
    b.js("document.getElementById('mode').value = 'chat'; document.getElementById('mode').onchange();")
    turns, conversation = ["Hello there", "And then?"], []
    for turn in turns:
        set_fields(chat_settings, turn, "chat")
        b.js("document.getElementById('send').click()")
        ended = b.wait("document.getElementById('status').textContent !== 'running' && "
                       "!document.getElementById('send').disabled", 120)
        status = b.js("document.getElementById('status').textContent")
        replies = b.js("[...document.querySelectorAll('#output .reply')].map(e => e.textContent)")
        conversation.append({"role": "user", "content": turn})
        s, chat, _ = c.request("POST", "/v1/chat/completions", {"messages": conversation, **chat_settings})
        name = f"chat turn {len(conversation) // 2 + 1}"
        if s == 200:
            want = chat["choices"][0]["message"]["content"]
            ck.ok(ended and status == "done" and replies and replies[-1] == want,
                  f"{name}: the page's reply is /v1/chat/completions' for the conversation so far",
                  f"status {status!r}, {replies} vs {want!r}")
        else:  # the page shows the API's own message for the same conversation
            want = (chat or {}).get("error", {}).get("message")
            shown = b.js("document.getElementById('error').textContent")
            ck.ok(ended and status == "error" and shown == want,
                  f"{name}: the page shows the API's error for the conversation so far ({s}: {want})",
                  f"status {status!r}, {shown!r} vs {want!r}")
        conversation.append({"role": "assistant", "content": want if s == 200 else ""})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model (-e of the server)")
    ap.add_argument("--server", default="./serve_gpt2cu")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--vocab-dir", default="data/cache/gpt2")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--screenshot", default="", help="where the screenshot goes (PNG)")
    ap.add_argument("--require-mid-stream", action="store_true", help="fail if no look caught the stream running")
    ap.add_argument("--require-browser", action="store_true", help="fail (not skip) without Chromium")
    ap.add_argument("--chromium", default="")
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--out", default="page_check")
    args = ap.parse_args()
    chromium = args.chromium or next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                                           "google-chrome")) if p), None)
    if not chromium:
        print("check_page: skipped: no Chromium found (Debian: apt-get install chromium)")
        return 1 if args.require_browser else 0
    os.makedirs(args.out, exist_ok=True)
    ck = check_serve.Checks()
    srv = check_serve.Server(args, [], os.path.join(args.out, "server.log"))
    c = check_serve.Client(srv.port)
    b = None
    try:
        s, m, _ = c.request("GET", "/v1/models")
        model = m["data"][0]["id"]
        b = Browser(chromium)
        run_page(b, c, ck, args, model)
    finally:
        if b:
            b.close()
        rc = srv.stop()
    ck.ok(rc == 0, f"the server drains and exits 0 (exit {rc})")
    print(f"check_page: {ck.passed} passed, {len(ck.failed)} failed" + (": " + "; ".join(ck.failed) if ck.failed else ""))
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
