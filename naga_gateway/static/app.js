// The WebChat console: one WebSocket to the gateway (docs/protocol/websocket.md).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const store = window.sessionStorage;
  const outbox = JSON.parse(window.localStorage.getItem("naga.outbox") || "{}");
  let ws = null;
  let nextId = 0;
  let backoff = 500;
  let prefix = "";
  let session = store.getItem("naga.session") || "";
  let lastSeq = Number(store.getItem("naga.seq") || 0);
  let streamId = store.getItem("naga.stream") || "";
  const waiting = new Map();
  const running = new Set();
  const bubbles = new Map(); // turn id -> assistant bubble

  function saveOutbox() { window.localStorage.setItem("naga.outbox", JSON.stringify(outbox)); }
  function setConn(state) { $("conn").dataset.state = state; $("conn").textContent = state; }
  function newKey() {
    if (window.crypto && window.crypto.randomUUID) return window.crypto.randomUUID();
    return String(Date.now()) + "-" + Math.random().toString(16).slice(2);
  }

  function request(method, params) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
      const id = "c" + (++nextId);
      waiting.set(id, { resolve, reject });
      ws.send(JSON.stringify({ type: "req", id, method, params: params || {} }));
    });
  }

  function connect() {
    setConn("connecting");
    ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    ws.onopen = async () => {
      const params = { protocol: 1, client: "webchat/1" };
      if (streamId) params.resume = { stream: streamId, after: lastSeq };
      let hello;
      try { hello = await request("connect", params); } catch (e) { return; }
      backoff = 500;
      prefix = hello.session_prefix;
      if (!hello.resumed) lastSeq = hello.last_seq;
      streamId = hello.stream;
      store.setItem("naga.stream", streamId);
      store.setItem("naga.seq", String(lastSeq));
      setConn("open");
      $("title").textContent = "Naga — " + hello.peer + " (" + hello.trust + ")";
      if (!session) session = prefix + "main";
      await refreshSessions();
      await showHistory();
      for (const [key, m] of Object.entries(outbox)) send(m.session, m.text, m.mode, key);
    };
    ws.onmessage = (msg) => {
      const frame = JSON.parse(msg.data);
      if (frame.type === "res") {
        const w = waiting.get(frame.id);
        if (w) {
          waiting.delete(frame.id);
          if (frame.ok) w.resolve(frame.result); else w.reject(new Error(frame.error.code + ": " + frame.error.message));
        } else if (!frame.ok) {
          showError(frame.error.code + ": " + frame.error.message);
        }
        return;
      }
      if (frame.type === "event") onEvent(frame);
    };
    ws.onclose = () => {
      setConn("closed");
      for (const w of waiting.values()) w.reject(new Error("connection closed"));
      waiting.clear();
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 5000);
    };
  }

  function onEvent(ev) {
    if (lastSeq && ev.seq !== lastSeq + 1) {
      // A gap: some events are lost to us; the history is the truth.
      lastSeq = ev.seq;
      showHistory();
      return;
    }
    lastSeq = ev.seq;
    store.setItem("naga.seq", String(lastSeq));
    if (ev.event === "turn.accepted") running.add(ev.session);
    if (ev.event === "turn.final" || ev.event === "turn.error") running.delete(ev.session);
    if (ev.session !== session) { if (ev.event === "message") refreshSessions(); return; }
    const d = ev.data;
    if (ev.event === "message") {
      const pending = [...$("messages").querySelectorAll("li.user.pending")].find((li) => li.textContent === d.text);
      if (pending) { pending.classList.remove("pending"); pending.dataset.seq = d.seq; }
      else addBubble("user", d.text).dataset.seq = d.seq;
    } else if (ev.event === "turn.accepted") {
      bubbles.set(d.turn, addBubble("assistant", ""));
    } else if (ev.event === "turn.delta") {
      currentBubble().textContent += d.text;
    } else if (ev.event === "turn.final") {
      const b = currentBubble();
      b.textContent = d.text;
      b.classList.add("final");
      b.dataset.seq = d.reply_seq;
    } else if (ev.event === "turn.error") {
      const b = currentBubble();
      b.classList.add("error");
      b.textContent = (d.partial ? d.partial + "\n" : "") + "[" + d.kind + "] " + d.message;
    } else if (ev.event === "tool.started") {
      addBubble("tool", "tool " + d.tool);
    }
    $("abort").disabled = !running.has(session);
  }

  function currentBubble() {
    const all = $("messages").querySelectorAll("li.assistant");
    return all.length ? all[all.length - 1] : addBubble("assistant", "");
  }

  function addBubble(role, text) {
    const li = document.createElement("li");
    li.className = role;
    li.textContent = text;
    $("messages").appendChild(li);
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function showError(text) { addBubble("error", text); }

  async function refreshSessions() {
    const res = await request("sessions", { limit: 100 });
    const ul = $("sessions");
    ul.textContent = "";
    const names = res.sessions.map((s) => s.session);
    if (!names.includes(session)) names.unshift(session);
    for (const name of names) {
      const li = document.createElement("li");
      li.textContent = name;
      li.dataset.session = name;
      if (name === session) li.className = "current";
      li.onclick = () => switchTo(name);
      ul.appendChild(li);
    }
  }

  async function switchTo(name) {
    session = name;
    store.setItem("naga.session", session);
    $("sessions-pane").classList.remove("open");
    await refreshSessions();
    await showHistory();
  }

  async function showHistory() {
    const res = await request("history", { session, limit: 200 });
    const ol = $("messages");
    ol.textContent = "";
    for (const e of res.entries) addBubble(e.role, e.text).dataset.seq = e.seq;
    for (const m of Object.values(outbox)) if (m.session === session) addBubble("user pending", m.text);
    $("abort").disabled = !running.has(session);
    if (!$("rollback").hidden) renderEntries(res.entries);
    return res.entries;
  }

  async function send(sess, text, mode, key) {
    outbox[key] = { session: sess, text, mode };
    saveOutbox();
    try {
      // No mode: the core's lanes.queue_mode setting decides.
      await request("send", mode ? { session: sess, text, key, mode } : { session: sess, text, key });
      delete outbox[key];
      saveOutbox();
    } catch (e) {
      // Unacknowledged: it stays in the outbox and is resent with the same key.
      if (!String(e.message).includes("connection closed") && !String(e.message).includes("not connected")) {
        delete outbox[key];
        saveOutbox();
        showError(e.message);
      }
    }
  }

  function renderEntries(entries) {
    const ol = $("entries");
    ol.textContent = "";
    for (const e of entries) {
      const li = document.createElement("li");
      li.dataset.seq = e.seq;
      li.textContent = "#" + e.seq + " " + e.role + ": " + e.text.slice(0, 80) + " ";
      const b = document.createElement("button");
      b.type = "button";
      b.className = "undo";
      b.textContent = "undo to here";
      b.onclick = () => preview(e.seq);
      li.appendChild(b);
      ol.appendChild(li);
    }
  }

  let undoTarget = null;
  async function preview(seq) {
    const res = await request("rollback.preview", { to_seq: seq });
    undoTarget = seq;
    const p = res.preview;
    $("preview-summary").textContent = "Undo " + p.effects + " entries after #" + seq + " (through #" + p.through_seq + ").";
    const ul = $("preview-changes");
    ul.textContent = "";
    for (const c of p.changes) {
      const li = document.createElement("li");
      li.textContent = c.family + " " + c.key + ": " + JSON.stringify(c.before) + " → " + JSON.stringify(c.after);
      ul.appendChild(li);
    }
    $("preview").hidden = false;
  }

  $("confirm-undo").onclick = async () => {
    if (undoTarget === null) return;
    await request("rollback", { to_seq: undoTarget });
    undoTarget = null;
    $("preview").hidden = true;
    await showHistory();
  };
  $("cancel-undo").onclick = () => { undoTarget = null; $("preview").hidden = true; };
  $("show-rollback").onclick = async () => {
    $("sessions-pane").classList.remove("open");  // on a phone it covers the view
    $("rollback").hidden = false;
    $("chat").hidden = true;
    renderEntries(await showHistory());
  };
  $("close-rollback").onclick = () => { $("rollback").hidden = true; $("chat").hidden = false; };
  $("menu").onclick = () => $("sessions-pane").classList.toggle("open");
  $("new-session").onsubmit = (e) => {
    e.preventDefault();
    const name = $("new-name").value.trim();
    if (name) { $("new-name").value = ""; switchTo(prefix + name); }
  };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = $("text").value;
    if (!text.trim()) return;
    $("text").value = "";
    addBubble("user pending", text);
    send(session, text, $("mode").value, newKey());
  };
  $("text").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  };
  $("abort").onclick = () => request("abort", { session }).catch((e) => showError(e.message));
  connect();
})();
