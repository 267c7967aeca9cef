"use strict";
// The chat page (docs/chat.md). Everything arrives over one WebSocket. Replies are shown from the
// `html` the gateway rendered and sanitised (channels/web/render.py); nothing else is ever set as
// HTML: a person's words, titles and notices are text.

// -- theme: the system's, unless the person picked one (kept in localStorage) -----------------------
const THEME_KEY = "clawgate.theme";
const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
function effectiveTheme() {
  return document.documentElement.dataset.theme || (darkQuery.matches ? "dark" : "light");
}
function applyTheme(theme) {
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
  const button = document.getElementById("theme");
  if (!button) return;
  const other = effectiveTheme() === "dark" ? "light" : "dark";
  button.textContent = other === "dark" ? "☾" : "☀";
  button.setAttribute("aria-label", `Switch to ${other} theme`);
}
applyTheme(localStorage.getItem(THEME_KEY));

const log = document.getElementById("log");
const statusEl = document.getElementById("status");
const input = document.getElementById("input");
const tokenInput = document.getElementById("token");
const tokenBox = document.getElementById("token-box");
const fileInput = document.getElementById("files");
const attachedList = document.getElementById("attached");
const sendButton = document.getElementById("send");
const stopButton = document.getElementById("stop");
const menuButton = document.getElementById("menu");
const conversationList = document.getElementById("conversations");
const bubbles = new Map();
const STOPPED = "*(stopped)*"; // what the gateway appends to a reply stopped midway (gateway/turn/stops.py)
let ws = null, retry = 0, counter = 0, stopped = false, closesWithoutReady = 0;
let user = null, thinking = false, busy = false, fatalNotice = null, listed = [];
// Files chosen for the next message (button, drop or paste), and the most they may weigh together:
// the gateway says in its "ready" frame (channels.web.media), and checks again itself.
let pending = [], maxUpload = 0;
tokenInput.value = localStorage.getItem("clawgate.token") || "";
if (window.matchMedia("(max-width: 700px)").matches) input.placeholder = "Message";

// -- the conversation: its id lives in the URL's hash, so a reload stays on it ------------------------
function currentConversation() {
  const id = new URLSearchParams(location.hash.slice(1)).get("c");
  return id && /^[A-Za-z0-9._-]{1,64}$/.test(id) ? id : null;
}
function freshId() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return Date.now().toString(36) + "-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
function goTo(id) {
  if (id) location.hash = "#c=" + encodeURIComponent(id); // hashchange switches
  else { history.pushState(null, "", location.pathname + location.search); switchConversation(); }
}

// -- messages -------------------------------------------------------------------------------------
function showStatus() {
  if (!user) return;
  statusEl.textContent = `connected as ${user}` + (thinking ? " · thinking…" : "");
}

function setBusy(on) {
  busy = on;
  stopButton.hidden = !on;
  stopButton.disabled = false;
  stopButton.textContent = "Stop";
}

function fill(body, text, html) {
  if (typeof html === "string") {
    body.innerHTML = html; // sanitised by the gateway (render.py), never the raw text
    body.classList.add("rendered");
    addCopyButtons(body);
  } else {
    body.textContent = text;
    body.classList.remove("rendered");
  }
  body.parentElement.classList.toggle("stopped", text.endsWith(STOPPED));
}

function add(role, text, id, html) {
  const div = document.createElement("div");
  // What the gateway said in the conversation (a command's answer, the model failing) reads as the
  // assistant's, as it did when it arrived.
  const shown = role === "user" ? "user" : role === "error" ? "notice" : "assistant";
  div.className = "msg " + shown;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = shown === "user" ? "You" : shown === "notice" ? "Gateway" : "Assistant";
  const body = document.createElement("div");
  body.className = "body";
  div.append(who, body);
  fill(body, text, shown === "user" ? undefined : html);
  if (id) { div.dataset.id = id; bubbles.set(id, body); }
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return body;
}

// One notice for a refused token, however often it is refused: the last one, at the end.
function fatal(text) {
  if (fatalNotice && fatalNotice.isConnected) {
    fatalNotice.querySelector(".body").textContent = text;
    log.append(fatalNotice);
  } else {
    fatalNotice = add("error", text).parentElement;
  }
  statusEl.textContent = "not connected: " + text;
  tokenBox.open = true;
}

// -- code blocks get a copy button (a click handler here: the page runs no inline script) -----------
function addCopyButtons(body) {
  for (const pre of body.querySelectorAll("pre")) {
    const wrap = document.createElement("div");
    wrap.className = "code";
    pre.replaceWith(wrap);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy secondary";
    const code = pre.querySelector("code");
    const lang = code && [...code.classList].find((c) => c.startsWith("language-"));
    button.textContent = "Copy";
    button.setAttribute("aria-label", lang ? `Copy ${lang.slice(9)} code` : "Copy code");
    button.addEventListener("click", () => copy(pre.textContent, button));
    wrap.append(button, pre);
  }
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // No clipboard API (a page served over plain http on another machine): select the text instead.
    const range = document.createRange();
    range.selectNodeContents(button.nextElementSibling);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    button.textContent = "Press Ctrl+C";
    return;
  }
  button.textContent = "Copied";
  button.classList.add("copied");
  setTimeout(() => { button.textContent = "Copy"; button.classList.remove("copied"); }, 1500);
}

// -- the list of conversations ---------------------------------------------------------------------
function showConversations() {
  const current = currentConversation();
  const items = listed.slice();
  if (!items.some((c) => c.id === current)) items.unshift({ id: current, title: "" });
  conversationList.replaceChildren(...items.map((c) => {
    const li = document.createElement("li");
    const link = document.createElement("a");
    link.href = c.id ? "#c=" + encodeURIComponent(c.id) : "#";
    link.textContent = c.title || "New conversation";
    if (c.updated_at) link.title = new Date(c.updated_at).toLocaleString();
    if (c.id === current) link.setAttribute("aria-current", "page");
    link.addEventListener("click", (e) => { e.preventDefault(); goTo(c.id); closeSidebar(); });
    li.append(link);
    return li;
  }));
}

function openSidebar(open) {
  document.body.classList.toggle("sidebar-open", open);
  menuButton.setAttribute("aria-expanded", String(open));
}
function closeSidebar() { openSidebar(false); }

// -- the socket ---------------------------------------------------------------------------------------
function hello() {
  const frame = { type: "hello" };
  if (tokenInput.value) frame.token = tokenInput.value;
  const conv = currentConversation();
  if (conv) frame.conversation = conv;
  ws.send(JSON.stringify(frame));
}

let shownConversation = currentConversation();
function switchConversation() {
  if (currentConversation() === shownConversation) return;
  shownConversation = currentConversation();
  log.replaceChildren();
  bubbles.clear();
  setBusy(false);
  showConversations();
  if (ws && ws.readyState === WebSocket.OPEN) hello(); // the same socket says hello again
  else if (stopped) statusEl.textContent = "not connected: save a valid token";
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(`${proto}://${location.host}/ws`);
  ws.onopen = hello;
  ws.onmessage = (ev) => {
    const f = JSON.parse(ev.data);
    if (f.type === "ready") {
      retry = 0;
      closesWithoutReady = 0;
      user = f.user;
      thinking = false;
      showStatus();
      maxUpload = f.max_upload_bytes || 0;
      log.replaceChildren();
      bubbles.clear();
      fatalNotice = null;
      for (const m of f.history) add(m.role, m.text, null, m.html);
      setBusy(Boolean(f.running));
      listed = f.conversations || [];
      showConversations();
    } else if (f.type === "conversations") {
      listed = f.conversations;
      showConversations();
    } else if (f.type === "reply") {
      const body = bubbles.get(f.id) || add("assistant", "", f.id);
      fill(body, f.text, f.html);
      if (f.final) {
        thinking = false;
        showStatus();
        setBusy(false);
        ws.send(JSON.stringify({ type: "conversations" })); // a new conversation gets its title
      }
      log.scrollTop = log.scrollHeight;
    } else if (f.type === "typing") {
      thinking = f.on;
      showStatus();
    } else if (f.type === "stopping") {
      if (!f.running) setBusy(false);
    } else if (f.type === "error") {
      // Reconnecting cannot fix a refused token: wait until another one is saved.
      if (f.fatal) { stopped = true; fatal(f.error); return; }
      add("error", f.error);
      if (f.event) setBusy(false);
    }
  };
  ws.onclose = () => {
    user = null;
    if (stopped) return;
    // The status says it; the conversation gets no notice for each try.
    closesWithoutReady++;
    statusEl.textContent = closesWithoutReady > 3 ? "cannot reach the gateway, still trying…" : "disconnected, reconnecting…";
    setTimeout(connect, Math.min(10000, 500 * 2 ** retry++) * (0.75 + Math.random() / 2));
  };
}

// -- files --------------------------------------------------------------------------------------------
function size(n) {
  return n < 1000 ? `${n} bytes` : n < 1e6 ? `${Math.round(n / 1000)} KB` : `${(n / 1e6).toFixed(1)} MB`;
}

function showAttached() {
  attachedList.replaceChildren(...pending.map((file, i) => {
    const li = document.createElement("li");
    li.textContent = `${file.name} (${size(file.size)})`;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "secondary";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    remove.addEventListener("click", () => { pending.splice(i, 1); showAttached(); });
    li.append(remove);
    return li;
  }));
}

function attach(files) {
  for (const file of files) pending.push(file);
  showAttached();
}

function base64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

document.getElementById("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if ((!text && !pending.length) || !ws || ws.readyState !== WebSocket.OPEN) return;
  const chosen = pending;
  const total = chosen.reduce((sum, f) => sum + f.size, 0);
  if (maxUpload && total > maxUpload) {
    add("error", `Those files are ${size(total)} together; at most ${size(maxUpload)} go with one message.`);
    return;
  }
  pending = [];
  showAttached();
  input.value = "";
  const lines = chosen.map((f) => `[attached: ${f.name}, ${size(f.size)}]`);
  add("user", [text, ...lines].filter(Boolean).join("\n"));
  const frame = { type: "message", text, id: `${Date.now().toString(36)}-${counter++}` };
  if (chosen.length) {
    try {
      frame.files = await Promise.all(chosen.map(async (f) => ({ name: f.name, type: f.type, data: await base64(f) })));
    } catch (err) {
      add("error", `Could not read a file: ${err}`);
      return;
    }
  }
  ws.send(JSON.stringify(frame));
  setBusy(true);
});
stopButton.addEventListener("click", () => {
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  ws.send(JSON.stringify({ type: "stop" }));
  stopButton.disabled = true;
  stopButton.textContent = "Stopping…";
});
document.getElementById("attach").addEventListener("click", () => fileInput.click());
fileInput.addEventListener("change", () => { attach(fileInput.files); fileInput.value = ""; });
input.addEventListener("paste", (e) => {
  if (e.clipboardData && e.clipboardData.files.length) { e.preventDefault(); attach(e.clipboardData.files); }
});
document.addEventListener("dragover", (e) => {
  if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) { e.preventDefault(); document.body.classList.add("dropping"); }
});
document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) document.body.classList.remove("dropping"); });
document.addEventListener("drop", (e) => {
  document.body.classList.remove("dropping");
  if (e.dataTransfer && e.dataTransfer.files.length) { e.preventDefault(); attach(e.dataTransfer.files); }
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendButton.click(); }
});
document.getElementById("save-token").addEventListener("click", () => {
  localStorage.setItem("clawgate.token", tokenInput.value);
  tokenBox.open = false;
  retry = 0;
  closesWithoutReady = 0;
  if (stopped) { stopped = false; connect(); } else if (ws) ws.close();
});
document.getElementById("new-conversation").addEventListener("click", () => { goTo(freshId()); closeSidebar(); });
document.getElementById("theme").addEventListener("click", () => {
  const next = effectiveTheme() === "dark" ? "light" : "dark";
  localStorage.setItem(THEME_KEY, next);
  applyTheme(next);
});
darkQuery.addEventListener("change", () => applyTheme(localStorage.getItem(THEME_KEY)));
menuButton.addEventListener("click", () => openSidebar(!document.body.classList.contains("sidebar-open")));
document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeSidebar(); });
document.getElementById("chat").addEventListener("click", () => { if (document.body.classList.contains("sidebar-open")) closeSidebar(); });
window.addEventListener("hashchange", switchConversation);
window.addEventListener("popstate", switchConversation);
showConversations();
connect();
