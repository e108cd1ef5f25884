#include "server/chat_page.h"

namespace ferry::server {

// Kept as plain HTML + vanilla JS so it reads like the OpenAI API it drives: a streamed
// /v1/chat/completions call whose SSE chunks are appended as they arrive.
const std::string& chat_page_html() {
    static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ferry chat</title>
<style>
  :root { --bg:#f6f7f9; --fg:#1c1e21; --muted:#687078; --me:#dbeafe; --bot:#fff; --accent:#2563eb; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.45 system-ui, sans-serif; background:var(--bg); color:var(--fg);
         display:flex; flex-direction:column; height:100vh; }
  header { display:flex; gap:.75rem; align-items:center; padding:.6rem 1rem; background:#fff;
           border-bottom:1px solid #e3e5e8; flex-wrap:wrap; }
  header b { font-size:1.05rem; } header .model { color:var(--muted); }
  header label { color:var(--muted); font-size:.85rem; }
  header input { width:5rem; }
  #keybox { display:none; gap:.4rem; align-items:center; }
  #keybox.show { display:flex; }
  #log { flex:1; overflow-y:auto; padding:1rem; display:flex; flex-direction:column; gap:.6rem; }
  .msg { max-width:48rem; padding:.6rem .8rem; border-radius:.6rem; white-space:pre-wrap;
         word-wrap:break-word; box-shadow:0 1px 2px #0001; }
  .msg.user { align-self:flex-end; background:var(--me); }
  .msg.assistant { align-self:flex-start; background:var(--bot); }
  .msg.error { align-self:center; background:#fee2e2; color:#991b1b; }
  .stats { display:block; margin-top:.35rem; font-size:.78rem; color:var(--muted); white-space:normal; }
  form { display:flex; gap:.5rem; padding:.75rem 1rem; background:#fff; border-top:1px solid #e3e5e8; }
  textarea { flex:1; resize:none; height:3.2rem; padding:.5rem; font:inherit; border:1px solid #cfd3d8; border-radius:.4rem; }
  button { font:inherit; padding:.4rem .9rem; border-radius:.4rem; border:1px solid var(--accent);
           background:var(--accent); color:#fff; cursor:pointer; }
  button.secondary { background:#fff; color:var(--accent); }
  button:disabled { opacity:.45; cursor:default; }
</style>
</head>
<body>
<header>
  <b>ferry</b><span class="model" id="model">…</span>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="256"></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <button type="button" class="secondary" id="clear">New chat</button>
  <span id="keybox"><label for="apikey">API key</label><input id="apikey" type="password" style="width:14rem">
    <button type="button" id="savekey">Use key</button></span>
</header>
<main id="log"></main>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" class="secondary" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;
let apiKey = localStorage.getItem("ferry_api_key") || "";

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}
function askForKey(why) {
  $("keybox").classList.add("show");
  $("apikey").focus();
  addBubble("error", why || "This server needs an API key: enter it above.");
}
$("savekey").onclick = () => {
  apiKey = $("apikey").value.trim();
  localStorage.setItem("ferry_api_key", apiKey);
  $("keybox").classList.remove("show");
  loadModel();
};
function addBubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  div.appendChild(body);
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}
async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.status === 401) { askForKey(); return; }
    const j = await r.json();
    if (j.data && j.data.length) $("model").textContent = j.data[0].id;
  } catch (e) { $("model").textContent = "(server unreachable)"; }
}
function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
}
$("stop").onclick = () => { if (controller) controller.abort(); };
$("clear").onclick = () => { if (controller) controller.abort(); history.length = 0; $("log").innerHTML = ""; };
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("form").onsubmit = async (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  history.push({ role: "user", content: text });
  addBubble("user", text);
  const bubble = addBubble("assistant", "");
  const content = bubble.querySelector(".content");
  const stats = document.createElement("span");
  stats.className = "stats";
  bubble.appendChild(stats);
  controller = new AbortController();
  busy(true);
  const t0 = performance.now();
  let tFirst = 0, chunks = 0, usage = null, finish = "", reply = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({ messages: history, stream: true, stream_options: { include_usage: true },
                             max_tokens: parseInt($("max_tokens").value) || 256,
                             temperature: parseFloat($("temperature").value) || 0 }),
    });
    if (r.status === 401) { history.pop(); bubble.remove(); askForKey(); return; }
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || ("HTTP " + r.status));
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.usage) usage = j.usage;
          for (const c of j.choices || []) {
            const piece = (c.delta && c.delta.content) || "";
            if (piece) {
              if (!tFirst) tFirst = performance.now();
              chunks++;
              reply += piece;
              content.textContent = reply;
              $("log").scrollTop = $("log").scrollHeight;
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      }
    }
  } catch (err) {
    if (err.name === "AbortError") finish = "stopped";
    else { bubble.classList.add("error"); content.textContent = reply + "\n[" + err.message + "]"; }
  } finally {
    const tEnd = performance.now();
    const tokens = usage ? usage.completion_tokens : chunks;
    const ttft = tFirst ? (tFirst - t0) : (tEnd - t0);
    const rate = tFirst && tEnd > tFirst && tokens > 1 ? (tokens - 1) / ((tEnd - tFirst) / 1000) : 0;
    stats.textContent = `TTFT ${ttft.toFixed(0)} ms · ${rate.toFixed(1)} tok/s · ${tokens} tokens` +
                        (finish ? ` · ${finish}` : "");
    if (reply) history.push({ role: "assistant", content: reply });
    controller = null;
    busy(false);
    $("input").focus();
  }
};
loadModel();
</script>
</body>
</html>
)HTML";
    return page;
}

}  // namespace ferry::server
