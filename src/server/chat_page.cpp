#include "server/chat_page.h"

namespace ferry::server {

// Kept as plain HTML + vanilla JS so it reads like the OpenAI API it drives: a streamed
// /v1/chat/completions call whose SSE chunks are rendered (markdown, built as DOM nodes, never
// as HTML) as they arrive; a conversation that outgrows the context drops its oldest turns.
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
  .msg.notice { align-self:center; background:#fef9c3; color:#713f12; font-size:.85rem; }
  .msg.assistant { white-space:normal; }
  .msg.assistant .content > :first-child { margin-top:0; } .msg.assistant .content > :last-child { margin-bottom:0; }
  .msg.assistant p, .msg.assistant ul, .msg.assistant ol, .msg.assistant blockquote { margin:.35rem 0; }
  .msg.assistant h1, .msg.assistant h2, .msg.assistant h3, .msg.assistant h4, .msg.assistant h5,
  .msg.assistant h6 { margin:.5rem 0 .3rem; font-size:1.05rem; }
  .msg.assistant h1 { font-size:1.2rem; } .msg.assistant h2 { font-size:1.12rem; }
  .msg.assistant ul, .msg.assistant ol { padding-left:1.4rem; }
  .msg.assistant blockquote { border-left:3px solid #cfd3d8; padding-left:.6rem; color:var(--muted); }
  .msg.assistant code { font:13px/1.4 ui-monospace, monospace; background:#f1f3f5; padding:0 .2rem; border-radius:.2rem; }
  .msg.assistant pre { background:#1f2328; color:#e6edf3; padding:.6rem .7rem; border-radius:.4rem;
                       overflow-x:auto; white-space:pre; }
  .msg.assistant pre code { background:none; padding:0; color:inherit; }
  .msg.assistant .error-text { color:#991b1b; white-space:pre-wrap; }
  #system { width:100%; display:none; }
  #system.show { display:block; }
  #system textarea { width:100%; height:3.2rem; padding:.4rem; font:inherit; border:1px solid #cfd3d8; border-radius:.4rem; }
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
  <button type="button" class="secondary" id="system_toggle">System prompt</button>
  <span id="keybox"><label for="apikey">API key</label><input id="apikey" type="password" style="width:14rem">
    <button type="button" id="savekey">Use key</button></span>
  <div id="system"><textarea id="system_prompt" placeholder="System prompt (sent first with every message; empty: none)"></textarea></div>
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
// The conversation as sent: {msg: {role, content}, el: its bubble}, so turns dropped to fit
// the context can be shown as dropped.
const turns = [];
let controller = null;
let epoch = 0;  // New chat starts a new one: a reply still finishing belongs to the old
let apiKey = localStorage.getItem("ferry_api_key") || "";
let maxModelLen = 0;

// Markdown to DOM nodes, never through innerHTML: the model's output stays text, the only
// markup is what this renderer builds (no raw HTML; links only to http and https).
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]+?)\*\*|__(?=\S)([\s\S]+?)__|\*([^*\s](?:[^*]*?[^*\s])?)\*|(^|[^\w])_([^_\s](?:[^_]*?[^_\s])?)_(?![\w])|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g;
function renderInline(text, parent) {
  const re = new RegExp(INLINE.source, "g");
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    let el;
    if (m[1]) { el = document.createElement("code"); el.textContent = m[2]; }
    else if (m[3] !== undefined || m[4] !== undefined) {
      el = document.createElement("strong"); renderInline(m[3] !== undefined ? m[3] : m[4], el);
    } else if (m[5] !== undefined || m[7] !== undefined) {
      // _x_ only between non-word characters (so snake_case stays text); the character
      // before it is matched (no lookbehind: older Safari refuses the whole script) and kept.
      if (m[6]) parent.appendChild(document.createTextNode(m[6]));
      el = document.createElement("em"); renderInline(m[5] !== undefined ? m[5] : m[7], el);
    } else {
      el = document.createElement("a"); el.href = m[9]; el.target = "_blank"; el.rel = "noopener noreferrer";
      renderInline(m[8], el);
    }
    parent.appendChild(el);
    last = re.lastIndex;
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}
function renderMarkdown(src) {
  const root = document.createElement("div");
  const lines = src.replace(/\r\n?/g, "\n").split("\n");
  let para = null, list = null;
  const endBlock = () => { para = null; list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = line.match(/^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$/))) {
      // A fence runs to its closing fence, or to the end while the reply still streams.
      endBlock();
      const pre = document.createElement("pre"), code = document.createElement("code");
      if (m[2]) code.className = "language-" + m[2];
      const body = [];
      let j = i + 1;
      while (j < lines.length && !lines[j].trim().startsWith(m[1])) body.push(lines[j++]);
      code.textContent = body.join("\n");
      pre.appendChild(code);
      root.appendChild(pre);
      i = j;
      continue;
    }
    if (!line.trim()) { endBlock(); continue; }
    if ((m = line.match(/^\s{0,3}(#{1,6})\s+(.*?)(\s+#+)?\s*$/))) {
      endBlock();
      const h = document.createElement("h" + m[1].length);
      renderInline(m[2], h);
      root.appendChild(h);
      continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      endBlock();
      root.appendChild(document.createElement("hr"));
      continue;
    }
    if (/^\s{0,3}>/.test(line)) {
      endBlock();
      const quoted = [];
      while (i < lines.length && (m = lines[i].match(/^\s{0,3}>\s?(.*)$/))) { quoted.push(m[1]); i++; }
      i--;
      const bq = document.createElement("blockquote");
      bq.append(...renderMarkdown(quoted.join("\n")).childNodes);
      root.appendChild(bq);
      continue;
    }
    const ul = line.match(/^\s{0,3}[-*+]\s+(.*)$/), ol = line.match(/^\s{0,3}(\d{1,9})[.)]\s+(.*)$/);
    if (ul || ol) {
      const tag = ul ? "UL" : "OL";
      if (!list || list.tagName !== tag) {
        list = document.createElement(tag);
        if (ol && ol[1] !== "1") list.start = parseInt(ol[1], 10);
        root.appendChild(list);
      }
      para = null;
      const li = document.createElement("li");
      renderInline(ul ? ul[1] : ol[2], li);
      list.appendChild(li);
      continue;
    }
    if (list && /^\s+\S/.test(line)) {  // an indented line continues the last item
      list.lastChild.appendChild(document.createElement("br"));
      renderInline(line.trim(), list.lastChild);
      continue;
    }
    list = null;
    if (!para) { para = document.createElement("p"); root.appendChild(para); }
    else para.appendChild(document.createElement("br"));
    renderInline(line, para);
  }
  return root;
}

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
function addBubble(role, text, before) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  div.appendChild(body);
  if (before) $("log").insertBefore(div, before); else $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}
function markDropped(el, why) {
  el.style.opacity = "0.45";
  el.title = why;
}
async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.status === 401) { askForKey(); return; }
    const j = await r.json();
    if (j.data && j.data.length) {
      $("model").textContent = j.data[0].id;
      maxModelLen = j.data[0].max_model_len || 0;
    }
  } catch (e) { $("model").textContent = "(server unreachable)"; }
}
function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
}
$("system_prompt").value = localStorage.getItem("ferry_system") || "";
if ($("system_prompt").value) $("system").classList.add("show");
$("system_prompt").oninput = () => localStorage.setItem("ferry_system", $("system_prompt").value);
$("system_toggle").onclick = () => { $("system").classList.toggle("show"); $("system_prompt").focus(); };
$("stop").onclick = () => { if (controller) controller.abort(); };
$("clear").onclick = () => {
  epoch++;
  if (controller) controller.abort();
  turns.length = 0;
  $("log").innerHTML = "";
};
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
function messages() {
  const sys = $("system_prompt").value.trim();
  return (sys ? [{ role: "system", content: sys }] : []).concat(turns.map((t) => t.msg));
}
class ServerError extends Error {
  constructor(status, error) {
    super((error && error.message) || ("HTTP " + status));
    this.status = status;
    this.code = error && error.code;
    this.param = error && error.param;
  }
}
// Takes the oldest turn out, up to the next user message, so the conversation still opens
// with a user; none when only the new message is left.
function takeOldestTurn() {
  let end = 1;
  while (end < turns.length && turns[end].msg.role !== "user") end++;
  return end >= turns.length ? [] : turns.splice(0, end);
}
$("form").onsubmit = async (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  const userTurn = { msg: { role: "user", content: text }, el: addBubble("user", text) };
  turns.push(userTurn);
  const bubble = addBubble("assistant", "");
  const content = bubble.querySelector(".content");
  const stats = document.createElement("span");
  stats.className = "stats";
  bubble.appendChild(stats);
  controller = new AbortController();
  busy(true);
  const t0 = performance.now();
  const mine = epoch;
  let tFirst = 0, chunks = 0, usage = null, finish = "", reply = "", drawTimer = 0;
  let dropped = [];  // turns taken out to fit, put back if even that does not
  const draw = () => {
    content.replaceChildren(...renderMarkdown(reply).childNodes);
    $("log").scrollTop = $("log").scrollHeight;
  };
  try {
    let r;
    for (;;) {
      r = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers(), signal: controller.signal,
        body: JSON.stringify({ messages: messages(), stream: true, stream_options: { include_usage: true },
                               max_tokens: parseInt($("max_tokens").value) || 256,
                               temperature: parseFloat($("temperature").value) || 0 }),
      });
      if (r.ok || r.status === 401) break;
      const j = await r.json().catch(() => ({}));
      const err = new ServerError(r.status, j.error);
      // The conversation (or it and max_tokens) is too long for the context: the oldest
      // turns give way, as long as there are any; if even that fails they are put back.
      if (err.code === "context_length_exceeded") {
        const taken = takeOldestTurn();
        if (taken.length) { dropped = dropped.concat(taken); continue; }
      }
      turns.unshift(...dropped);
      dropped = [];
      throw err;
    }
    if (dropped.length) {
      for (const t of dropped) markDropped(t.el, "dropped to fit the model's context");
      const n = dropped.length;
      addBubble("notice", `Dropped the ${n} oldest message${n === 1 ? "" : "s"} to fit ` +
                `the model's context${maxModelLen ? " of " + maxModelLen + " tokens" : ""}.`, userTurn.el);
    }
    if (r.status === 401) {
      turns.pop(); userTurn.el.remove(); bubble.remove(); askForKey(); return;
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
          if (j.error) throw new ServerError(200, j.error);  // failed after the stream began
          if (j.usage) usage = j.usage;
          for (const c of j.choices || []) {
            const piece = (c.delta && c.delta.content) || "";
            if (piece) {
              if (!tFirst) tFirst = performance.now();
              chunks++;
              reply += piece;
              if (!drawTimer) {  // re-rendered at most every 50 ms while it streams
                drawTimer = setTimeout(() => { drawTimer = 0; draw(); }, 50);
              }
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      }
    }
  } catch (err) {
    if (err.name === "AbortError") finish = "stopped";
    else {
      finish = "error";
      bubble.classList.add("error");
      const note = document.createElement("div");
      note.className = "error-text";
      note.textContent = "[" + err.message + "]";
      bubble.insertBefore(note, stats);
    }
  } finally {
    // The last draw happens now, and no timer left behind redraws a finished reply (its
    // elements would be replaced under anyone holding them, as a test's stale lookup showed).
    clearTimeout(drawTimer);
    draw();
    if (mine !== epoch) {  // New chat was pressed: this exchange is not part of the new one
      controller = null;
      busy(false);
      return;
    }
    // No reply (an error, or stopped at once): the message leaves the conversation, so the
    // next one neither fails on it again nor follows it as a second user turn.
    if (!reply && turns.includes(userTurn)) {
      turns.splice(turns.indexOf(userTurn), 1);
      markDropped(userTurn.el, "not in the conversation: no reply");
    }
    const tEnd = performance.now();
    const tokens = usage ? usage.completion_tokens : chunks;
    const ttft = tFirst ? (tFirst - t0) : (tEnd - t0);
    const rate = tFirst && tEnd > tFirst && tokens > 1 ? (tokens - 1) / ((tEnd - tFirst) / 1000) : 0;
    stats.textContent = `TTFT ${ttft.toFixed(0)} ms · ${rate.toFixed(1)} tok/s · ${tokens} tokens` +
                        (finish ? ` · ${finish}` : "");
    if (reply) turns.push({ msg: { role: "assistant", content: reply }, el: bubble });
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
