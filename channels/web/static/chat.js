"use strict";
const log = document.getElementById("log");
const statusEl = document.getElementById("status");
const input = document.getElementById("input");
const tokenInput = document.getElementById("token");
const fileInput = document.getElementById("files");
const attachedList = document.getElementById("attached");
const bubbles = new Map();
let ws = null, retry = 0, counter = 0, stopped = false;
// Files chosen for the next message (button, drop or paste), and the most they may weigh together:
// the gateway says in its "ready" frame (channels.web.media), and checks again itself.
let pending = [], maxUpload = 0;
tokenInput.value = localStorage.getItem("clawgate.token") || "";

function add(role, text, id) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "You" : role === "notice" ? "Gateway" : "Assistant";
  const body = document.createElement("span");
  body.className = "body";
  body.textContent = text;
  div.append(who, body);
  if (id) { div.dataset.id = id; bubbles.set(id, body); }
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return body;
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(`${proto}://${location.host}/ws`);
  ws.onopen = () => {
    retry = 0;
    const hello = { type: "hello" };
    if (tokenInput.value) hello.token = tokenInput.value;
    ws.send(JSON.stringify(hello));
  };
  ws.onmessage = (ev) => {
    const f = JSON.parse(ev.data);
    if (f.type === "ready") {
      statusEl.textContent = `connected as ${f.user}`;
      maxUpload = f.max_upload_bytes || 0;
      log.replaceChildren();
      bubbles.clear();
      for (const m of f.history) add(m.role, m.text);
    } else if (f.type === "reply") {
      const body = bubbles.get(f.id) || add("assistant", "", f.id);
      body.textContent = f.text;
      if (f.final) statusEl.textContent = statusEl.textContent.replace(" · thinking…", "");
      log.scrollTop = log.scrollHeight;
    } else if (f.type === "typing") {
      const base = statusEl.textContent.replace(" · thinking…", "");
      statusEl.textContent = f.on ? base + " · thinking…" : base;
    } else if (f.type === "error") {
      add("notice", f.error);
      // Reconnecting cannot fix a refused token: wait until another one is saved.
      if (f.fatal) { stopped = true; statusEl.textContent = "not connected: " + f.error; }
    }
  };
  ws.onclose = () => {
    if (stopped) return;
    statusEl.textContent = "disconnected, reconnecting…";
    setTimeout(connect, Math.min(10000, 500 * 2 ** retry++));
  };
}

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
    add("notice", `Those files are ${size(total)} together; at most ${size(maxUpload)} go with one message.`);
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
      add("notice", `Could not read a file: ${err}`);
      return;
    }
  }
  ws.send(JSON.stringify(frame));
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
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); document.getElementById("send").click(); }
});
document.getElementById("save-token").addEventListener("click", () => {
  localStorage.setItem("clawgate.token", tokenInput.value);
  if (stopped) { stopped = false; retry = 0; connect(); } else if (ws) ws.close();
});
connect();
