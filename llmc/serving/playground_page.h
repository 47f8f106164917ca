// GET /: a page to try the server in a browser (llama.cpp's server has one): a prompt, the sampling settings, the
// tokens streaming in (server-sent events from POST /v1/completions or /v1/chat/completions, read with fetch),
// time to first token and tokens/s, and the API's error message when a request fails. One static page, no build
// step, nothing fetched from elsewhere. Tested in headless Chromium (tests/serving/check_page.py). Host-only.
#pragma once

inline constexpr const char kPlaygroundPage[] = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmc playground</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
  header { padding: 12px 20px; background: #1d2330; color: #fff; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 17px; margin: 0; }
  header span { opacity: .75; font-size: 13px; }
  main { display: grid; grid-template-columns: 1fr 250px; gap: 16px; padding: 16px 20px; max-width: 1100px; }
  textarea { width: 100%; box-sizing: border-box; height: 110px; font: 14px/1.4 ui-monospace, monospace; padding: 8px; }
  #output { white-space: pre-wrap; font: 14px/1.5 ui-monospace, monospace; background: #fff; border: 1px solid #d5d9e0;
            min-height: 240px; padding: 10px; border-radius: 4px; overflow-wrap: anywhere; }
  #output .prompt { color: #6b7280; }
  #output .user { color: #1f4fa8; }
  aside label { display: flex; justify-content: space-between; align-items: center; margin: 6px 0; font-size: 13px; }
  aside input, aside select { width: 110px; }
  .buttons { display: flex; gap: 8px; margin: 8px 0; }
  button { font-size: 14px; padding: 6px 16px; cursor: pointer; }
  #stats { font-size: 13px; color: #374151; margin-top: 12px; display: grid; gap: 3px; }
  #error { color: #b42318; font-size: 14px; margin: 6px 0; min-height: 1em; }
</style>
</head>
<body>
<header><h1>llmc playground</h1><span id="model">model: ?</span><span id="status">idle</span></header>
<main>
  <section>
    <textarea id="prompt" placeholder="Type a prompt, then Send (Ctrl+Enter)">Once upon a time</textarea>
    <div class="buttons">
      <button id="send">Send</button><button id="stop" disabled>Stop</button><button id="clear">Clear</button>
    </div>
    <div id="error"></div>
    <div id="output"></div>
  </section>
  <aside>
    <label>mode <select id="mode"><option value="completion">completion</option><option value="chat">chat</option></select></label>
    <label>max_tokens <input id="max_tokens" type="number" min="1" value="128"></label>
    <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.05" value="0.8"></label>
    <label>top_p <input id="top_p" type="number" min="0.01" max="1" step="0.05" value="1"></label>
    <label>top_k <input id="top_k" type="number" min="0" value="0"></label>
    <label>seed <input id="seed" type="number" placeholder="random"></label>
    <div id="stats">
      <div>time to first token: <b id="ttft">-</b></div>
      <div>tokens: <b id="tokens">-</b></div>
      <div>tokens/s after the first: <b id="tps">-</b></div>
    </div>
  </aside>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let controller = null, chat = [];  // chat: the conversation so far ({role, content})

fetch("/v1/models").then((r) => r.json()).then((j) => { $("model").textContent = "model: " + j.data[0].id; })
  .catch(() => {});

function settings() {
  const body = { max_tokens: +$("max_tokens").value, temperature: +$("temperature").value, top_p: +$("top_p").value,
                 stream: true, stream_options: { include_usage: true } };
  if (+$("top_k").value > 0) body.top_k = +$("top_k").value;
  if ($("seed").value !== "") body.seed = +$("seed").value;
  return body;
}
function append(text, cls) {
  const span = document.createElement("span");
  if (cls) span.className = cls;
  span.textContent = text;
  $("output").appendChild(span);
  return span;
}
function finish(status) {
  controller = null;
  $("send").disabled = false; $("stop").disabled = true; $("status").textContent = status;
}

async function send() {
  if (controller) return;
  const prompt = $("prompt").value, mode = $("mode").value, body = settings();
  $("error").textContent = ""; $("ttft").textContent = "-"; $("tokens").textContent = "-"; $("tps").textContent = "-";
  let path;
  if (mode === "chat") {
    chat.push({ role: "user", content: prompt });
    body.messages = chat;
    path = "/v1/chat/completions";
    append((chat.length > 1 ? "\n\n" : "") + "User: " + prompt + "\n", "user");
    append("Assistant: ");
  } else {
    body.prompt = prompt;
    path = "/v1/completions";
    $("output").textContent = "";
    append(prompt, "prompt");
  }
  const reply = append("", "reply");
  controller = new AbortController();
  $("send").disabled = true; $("stop").disabled = false; $("status").textContent = "running";
  const t0 = performance.now();
  let first = null, last = null, chunks = 0, text = "";
  try {
    const res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                    body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const j = await res.json().catch(() => null);
      throw new Error(j && j.error ? j.error.message : "HTTP " + res.status);
    }
    const reader = res.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
          const j = JSON.parse(line.slice(6));
          if (j.error) throw new Error(j.error.message);
          if (j.usage) {
            const n = j.usage.completion_tokens;
            $("tokens").textContent = n;
            if (n > 1 && last > first) $("tps").textContent = ((n - 1) / ((last - first) / 1000)).toFixed(1);
          }
          if (!j.choices || !j.choices.length) continue;
          const piece = mode === "chat" ? (j.choices[0].delta.content || "") : j.choices[0].text;
          if (!piece) continue;
          const now = performance.now();
          if (first === null) { first = now; $("ttft").textContent = (now - t0).toFixed(0) + " ms"; }
          last = now;
          text += piece;
          reply.textContent = text;
          $("tokens").textContent = "~" + (++chunks);  // pieces so far; the usage chunk at the end has the count
          if (chunks > 1 && last > first) $("tps").textContent = "~" + ((chunks - 1) / ((last - first) / 1000)).toFixed(1);
        }
      }
    }
    if (mode === "chat") chat.push({ role: "assistant", content: text });
    finish("done");
  } catch (e) {
    if (mode === "chat" && chat.length && chat[chat.length - 1].role === "user") chat.pop();
    if (e.name === "AbortError") { finish("stopped"); return; }
    $("error").textContent = e.message;
    finish("error");
  }
}

$("send").onclick = send;
$("stop").onclick = () => controller && controller.abort();
$("clear").onclick = () => { chat = []; $("output").textContent = ""; $("error").textContent = ""; };
$("mode").onchange = () => { chat = []; $("output").textContent = ""; };
$("prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) send(); });
</script>
</body>
</html>
)PAGE";
