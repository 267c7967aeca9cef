"use strict";
const log = document.getElementById("log");
const statusEl = document.getElementById("status");
const input = document.getElementById("input");
const tokenInput = document.getElementById("token");
const bubbles = new Map();
let ws = null, retry = 0, counter = 0, stopped = false;
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

document.getElementById("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || !ws || ws.readyState !== WebSocket.OPEN) return;
  add("user", text);
  ws.send(JSON.stringify({ type: "message", text, id: `${Date.now().toString(36)}-${counter++}` }));
  input.value = "";
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); document.getElementById("send").click(); }
});
document.getElementById("save-token").addEventListener("click", () => {
  localStorage.setItem("clawgate.token", tokenInput.value);
  if (stopped) { stopped = false; retry = 0; connect(); } else if (ws) ws.close();
});
connect();
