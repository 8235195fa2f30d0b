// The WebChat console: one WebSocket to the gateway (docs/protocol/websocket.md),
// a chat, sessions and pages in one frame (docs/console.md).
//
// Sections, each a small namespace on `Naga` so that later pages and cards are
// additions, not edits: util, rpc (the connection), md (Markdown), chat,
// sessions, pages (the registry: Naga.pages.register), the built-in pages,
// keys (shortcuts), boot.
"use strict";
window.Naga = (function () {
  const Naga = {};

  // --- util ------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  }
  function clock(ns) {
    const d = ns ? new Date(ns / 1e6) : new Date();
    const today = new Date().toDateString() === d.toDateString();
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return today ? hm : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + hm;
  }
  function ago(ns) {
    if (!ns) return "";
    const s = Math.max(0, (Date.now() - ns / 1e6) / 1000);
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return clock(ns);
  }
  function seconds(ms) { return ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(1) + " s"; }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many || one + "s"); }
  function pretty(v) {
    if (v === null || v === undefined || v === "") return "";
    if (typeof v === "string") { try { v = JSON.parse(v); } catch (e) { return v; } }
    return typeof v === "string" ? v : JSON.stringify(v, null, 2);
  }
  // What a person reads for a refused request: the code in words and the
  // message without a validation library's dump (its type tags and URLs).
  const CODE_WORDS = {
    invalid_params: "The gateway refused the request",
    bad_frame: "The gateway could not read the request",
    forbidden: "Not allowed",
    busy: "Busy",
    rate_limited: "Too many requests",
    core_error: "Not done",
    not_connected: "Not connected",
    unknown_method: "This gateway does not know that request",
  };
  function humanError(code, message) {
    let text = String(message || "")
      .split("\n")
      .filter((l) => !/errors\.pydantic\.dev|For further information visit/.test(l))
      .map((l) => l.replace(/\s*\[type=[^\]]*\]/g, "").replace(/\binput_value=.*$/, "").trim())
      .filter(Boolean)
      .join("; ")
      .replace(/\b\d+ validation errors? for \w+;?\s*/g, "");
    // The core's refusal as the gateway passes it on: "Method: what (STATUS)";
    // a person reads the what (the RPC and the status name are for logs).
    if (code === "core_error") text = text.replace(/^[A-Z][A-Za-z]+: /, "").replace(/ \([A-Z_]+\)$/, "");
    if (text.length > 400) text = text.slice(0, 400) + "…";
    const lead = CODE_WORDS[code];
    return lead ? lead + ": " + text : text;
  }
  class RequestError extends Error {
    constructor(code, message) { super(humanError(code, message)); this.code = code; this.raw = message; }
  }
  Naga.util = { $, el, clock, ago, seconds, plural, pretty, humanError, RequestError };

  // --- rpc: the connection ------------------------------------------------------
  const rpc = (function () {
    const store = window.sessionStorage;
    let ws = null;
    let nextId = 0;
    let backoff = 250;
    let lastSeq = Number(store.getItem("naga.seq") || 0);
    let streamId = store.getItem("naga.stream") || "";
    const waiting = new Map();
    const onEvent = [];
    const onOpen = [];
    const onState = [];
    const self = { hello: null, open: false };

    let lost = false; // the connection was up once: later attempts are reconnects
    function setState(state, why) {
      self.open = state === "open";
      if (state === "open") lost = false;
      if (state === "closed") lost = true;
      const shown = lost && state === "connecting" ? "closed" : state;
      $("conn").dataset.state = shown;
      $("conn").textContent = { open: "connected", connecting: "connecting", closed: "offline" }[shown];
      const banner = $("banner");
      if (state === "open") banner.hidden = true;
      else if (state === "closed") {
        banner.hidden = false;
        banner.textContent = why || "The gateway is not reachable (the core or its gateway stopped?). " +
          "Reconnecting… Start it with `naga daemon start`.";
      }
      for (const f of onState) f(state);
    }
    self.coreDown = function (down, why) {
      if (!self.open) return;
      const banner = $("banner");
      banner.hidden = !down;
      if (down) banner.textContent = why;
    };

    self.request = function (method, params) {
      return new Promise((resolve, reject) => {
        if (!ws || ws.readyState !== WebSocket.OPEN) {
          reject(new RequestError("not_connected", "the gateway is not connected")); return;
        }
        const id = "c" + (++nextId);
        waiting.set(id, { resolve, reject });
        ws.send(JSON.stringify({ type: "req", id, method, params: params || {} }));
      });
    };
    self.on = (f) => onEvent.push(f);
    self.onOpen = (f) => onOpen.push(f);
    self.onState = (f) => onState.push(f);

    self.connect = function () {
      setState("connecting");
      ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
      ws.onopen = async () => {
        ws.opened = true;
        const params = { protocol: 1, client: "webchat/2" };
        if (streamId) params.resume = { stream: streamId, after: lastSeq };
        let hello;
        try { hello = await self.request("connect", params); } catch (e) {
          setState("closed", "The gateway refused the console: " + e.message); return;
        }
        backoff = 250;
        self.hello = hello;
        const resumed = hello.resumed;
        lastSeq = resumed ? lastSeq : hello.last_seq;
        streamId = hello.stream;
        store.setItem("naga.stream", streamId);
        store.setItem("naga.seq", String(lastSeq));
        setState("open");
        for (const f of onOpen) await f(hello, resumed);
      };
      ws.onmessage = (msg) => {
        const frame = JSON.parse(msg.data);
        if (frame.type === "res") {
          const w = waiting.get(frame.id);
          if (!w) return;
          waiting.delete(frame.id);
          if (frame.ok) w.resolve(frame.result);
          else w.reject(new RequestError(frame.error.code, frame.error.message));
          return;
        }
        if (frame.type !== "event") return;
        const gap = lastSeq && frame.seq !== lastSeq + 1;
        lastSeq = frame.seq;
        store.setItem("naga.seq", String(lastSeq));
        for (const f of onEvent) f(frame, gap);
      };
      ws.onclose = async () => {
        const was = ws;
        for (const w of waiting.values()) w.reject(new RequestError("not_connected", "connection closed"));
        waiting.clear();
        // Refused before it opened: the upgrade checks the login, and a
        // browser cannot read why, so ask /session (a login revoked or
        // expired meanwhile says so, and the console stops retrying).
        if (!was.opened && !(await Naga.loggedIn())) return;
        setState("closed");
        setTimeout(() => { if (ws === was) Naga.start(); }, backoff);
        backoff = Math.min(backoff * 2, 4000);
      };
    };
    return self;
  })();
  Naga.rpc = rpc;

  // --- md: Markdown, rendered and sanitized -------------------------------------
  const md = (function () {
    // The vendored renderer and sanitizer run after this script (index.html),
    // so that the connection opens while they load; every deferred script
    // has run by DOMContentLoaded, and drawing waits for it (md.ready).
    let ok = false;
    const ready = new Promise((resolve) => {
      if (document.readyState !== "loading") resolve();
      else document.addEventListener("DOMContentLoaded", () => resolve());
    });
    function usable() {
      if (ok) return ok;
      ok = typeof window.marked !== "undefined" && typeof window.DOMPurify !== "undefined";
      if (ok) {
        window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
          if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
        });
      }
      return ok;
    }
    function copyButton(pre) {
      const b = el("button", { type: "button", class: "copy", "aria-label": "Copy the code", text: "Copy" });
      b.addEventListener("click", async () => {
        const text = pre.textContent.replace(/\n$/, "");
        try { await navigator.clipboard.writeText(text); } catch (e) {
          const r = document.createRange(); r.selectNodeContents(pre);
          const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); document.execCommand("copy");
        }
        b.textContent = "Copied"; setTimeout(() => { b.textContent = "Copy"; }, 1500);
      });
      return b;
    }
    return {
      ready,
      // Into `target`: the text as sanitized HTML, each code block with a copy button.
      render(target, text) {
        if (!usable()) { target.textContent = text; return; }
        const html = window.marked.parse(text, { gfm: true, breaks: true }).trim();
        target.innerHTML = window.DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });
        for (const pre of target.querySelectorAll("pre")) {
          const wrap = el("div", { class: "codeblock" });
          pre.replaceWith(wrap);
          wrap.append(pre, copyButton(pre));
        }
      },
    };
  })();
  Naga.md = md;

  // --- chat ------------------------------------------------------------------------
  const chat = (function () {
    const list = () => $("messages");
    const scroller = () => $("scroller");
    let stick = true; // follow new text while the user has not scrolled up
    const live = new Map(); // session -> the turn being streamed {li, raw, body, tools, pending}
    const running = new Set();
    const outbox = JSON.parse(window.localStorage.getItem("naga.outbox") || "{}");
    const cards = []; // extra renderers of history entries: (entry) => element | null
    const saveOutbox = () => window.localStorage.setItem("naga.outbox", JSON.stringify(outbox));
    const self = { running, outbox, cards };

    function atBottom() { const s = scroller(); return s.scrollHeight - s.scrollTop - s.clientHeight < 48; }
    function follow() {
      if (stick) scroller().scrollTop = scroller().scrollHeight;
      else $("jump").hidden = false;
    }
    scroller().addEventListener("scroll", () => {
      stick = atBottom();
      if (stick) $("jump").hidden = true;
    });
    $("jump").onclick = () => { stick = true; $("jump").hidden = true; follow(); };

    function meta(ns, extra) {
      return el("span", { class: "meta" }, el("time", { datetime: new Date((ns || Date.now() * 1e6) / 1e6).toISOString(), text: clock(ns) }), extra || "");
    }
    function userItem(text, ns, seq) {
      const li = el("li", { class: "user", "data-seq": seq }, el("div", { class: "bubble", text }), meta(ns));
      return li;
    }
    function assistantItem(seq) {
      const body = el("div", { class: "md" });
      const tools = el("div", { class: "tools" });
      const li = el("li", { class: "assistant", "data-seq": seq }, tools, el("div", { class: "bubble" }, body));
      return { li, body, tools, raw: "" };
    }
    function usageText(u) {
      if (!u) return "";
      const parts = [];
      if (u.prompt_tokens || u.completion_tokens) parts.push(u.prompt_tokens + " + " + u.completion_tokens + " tokens");
      parts.push(plural(u.model_calls || 0, "model call"));
      if (u.tool_calls) parts.push(plural(u.tool_calls, "tool call"));
      if (u.duration_ms) parts.push(seconds(u.duration_ms));
      return " · " + parts.join(" · ");
    }
    function errorNote(kind, message) {
      const words = kind === "aborted" ? "Stopped" : "Error (" + kind + ")";
      return el("div", { class: "turn-error", role: "note" }, words + (message && kind !== "aborted" ? ": " + humanError("", message) : kind === "aborted" ? " before the reply ended." : ""));
    }
    // Tools (docs/design/tools.md). The approval card (tool.approval): the
    // call's arguments, allow once or deny (approval.decide); its
    // tool.finished settles it (the run, a deny, no answer in time).
    // The time left to answer, counted down each second: the deadline is
    // the core's (expires_ns, wall clock, the same machine's), capped by
    // the timeout itself (expires_ns - asked_ns) should the clocks differ.
    function timeLeft(ms) {
      const s = Math.max(0, Math.ceil(ms / 1000));
      return s >= 60 ? Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0") : s + " s";
    }
    function countdown(card, d) {
      const out = el("div", { class: "expires", "aria-live": "off" });
      const span = d.expires_ns && d.asked_ns ? (d.expires_ns - d.asked_ns) / 1e6 : 0;
      if (!span) return out;
      const deadline = Date.now() + Math.min(span, Math.max(0, d.expires_ns / 1e6 - Date.now()));
      const tick = () => {
        const ms = deadline - Date.now();
        out.textContent = ms > 0 ? "Answer within " + timeLeft(ms) + ", or it is denied." : "Time is up: denied.";
        if (ms <= 0) clearInterval(timer);
      };
      const timer = setInterval(tick, 1000);
      card.answered = () => { clearInterval(timer); out.remove(); };  // allowed, denied or settled
      tick();
      return out;
    }
    function approvalCard(d) {
      const state = el("div", { class: "astate" });
      const card = el("div", { class: "approval", "data-id": d.id, "data-call": d.call, role: "group", "aria-label": "Approval" },
        el("div", { text: "Allow " + d.tool + " (" + d.risk + ")?" }), el("pre", { class: "arguments", text: d.arguments }), state);
      card.append(countdown(card, d));
      for (const [label, allow] of [["allow once", true], ["deny", false]]) {
        card.append(el("button", { type: "button", class: allow ? "allow" : "deny", onclick: async () => {
          for (const b of card.querySelectorAll("button")) b.disabled = true;
          try {
            await rpc.request("approval.decide", { id: d.id, allow });
            card.dataset.state = allow ? "allowed" : "denied";
            if (card.answered) card.answered();
            if (!card.dataset.settled) state.textContent = allow ? "allowed" : "denied";
          } catch (e) { state.textContent = e.message; }
        } }, label));
      }
      return card;
    }
    function settleApproval(call, text) {
      for (const card of list().querySelectorAll(".approval")) {
        if (card.dataset.call !== String(call) || card.dataset.settled) continue;
        for (const b of card.querySelectorAll("button")) b.disabled = true;
        if (!card.dataset.state) card.dataset.state = "settled";
        card.dataset.settled = "1";
        if (card.answered) card.answered();
        card.querySelector(".astate").textContent = text;
      }
    }
    // A turn a rollback in force undid: shown (append-only), marked.
    function undoneMark(li) { li.classList.add("undone"); li.title = "undone by a rollback"; }

    function toolCard(t) {
      const state = el("span", { class: "tstate" });
      const summary = el("summary", {}, el("span", { class: "tname", text: t.tool }), " ", state);
      const body = el("div", { class: "tbody" });
      const card = el("details", { class: "tool", "data-call": t.call }, summary, body);
      card.update = (f) => {
        Object.assign(t, f);
        const done = t.ok !== undefined && t.ok !== null;
        state.dataset.ok = done ? String(!!t.ok) : "";
        let words = done ? (t.ok ? "done" : "failed") : "running…";
        if (t.duration_ms) words += " · " + seconds(t.duration_ms);
        if (t.approval) words += " · approval: " + t.approval;
        state.textContent = words;
        body.textContent = "";
        body.append(el("div", { class: "hint", text: "arguments" }), el("pre", { text: pretty(t.arguments) || "{}" }));
        if (done && t.ok) body.append(el("div", { class: "hint", text: "result" }), el("pre", { text: pretty(t.result) }));
        if (done && !t.ok) body.append(el("div", { class: "hint", text: "error" }), el("pre", { text: t.error || "failed" }));
      };
      card.update({});
      return card;
    }
    self.toolCard = toolCard;

    function add(li) { list().append(li); follow(); return li; }

    // History: the recorded truth, replacing what is shown. A turn streaming
    // now stays (its li is kept); a message or an end recorded while the
    // history was on its way makes it load again.
    let generation = 0;
    let loading = null; // {session, dirty}
    self.load = async function (session) {
      const mine = ++generation;
      const kept = live.get(session);
      if (!kept) list().textContent = "";
      loading = { session, dirty: false };
      const state = loading;
      let res;
      try {
        res = await rpc.request("history", { session, limit: 200, detail: true });
      } catch (e) {
        // A session with nothing recorded yet has no history: empty, not an error.
        res = { entries: [], error: e.code === "core_error" && /NOT_FOUND/.test(e.raw) ? null : e };
      }
      await md.ready;
      if (mine !== generation) return; // another session was chosen meanwhile
      loading = null;
      list().textContent = "";
      if (res.error) add(el("li", { class: "notice" }, el("div", { class: "turn-error", text: res.error.message })));
      let turn = null;
      for (const e of res.entries) {
        if (e.role === "user") { const u = add(userItem(e.text, e.time_ns, e.seq)); if (e.undone) undoneMark(u); turn = null; continue; }
        if (e.role === "note") { add(el("li", { class: "notice" }, el("div", { class: "turn-note", text: e.text }))); continue; }
        const extra = cards.map((f) => f(e)).find(Boolean);
        if (extra) { add(extra); continue; }
        if (!turn || turn.turnId !== e.turn) { turn = assistantItem(e.seq); turn.turnId = e.turn; add(turn.li); }
        if (e.role === "tool") turn.tools.append(toolCard({ tool: e.tool, call: e.call, arguments: e.arguments, ok: e.ok, result: e.result, error: e.error, duration_ms: e.duration_ms, approval: e.approval }));
        else if (e.role === "assistant") {
          md.render(turn.body, e.text); turn.li.dataset.seq = e.seq; turn.li.classList.add("final");
          if (e.undone) undoneMark(turn.li);
          turn.li.append(meta(e.time_ns, usageText(e.usage)));
        } else if (e.role === "error") {
          if (e.partial) md.render(turn.body, e.partial); else turn.li.querySelector(".bubble").remove();
          turn.li.classList.add("error", "final");
          turn.li.append(errorNote(e.kind, e.message), meta(e.time_ns, usageText(e.usage)));
        }
      }
      const now = live.get(session);
      if (now && !now.done && !res.entries.some((e) => e.turn && e.turn === now.turnId && e.role !== "tool")) add(now.li);
      for (const [key, m] of Object.entries(outbox)) if (m.session === session) add(pendingItem(key, m.text));
      stick = true; follow();
      self.refreshControls(session);
      if (state.dirty) self.load(session);
    };

    function pendingItem(key, text) {
      const li = userItem(text, 0, null);
      li.classList.add("pending");
      li.dataset.key = key;
      li.append(el("span", { class: "state", text: rpc.open ? "sending…" : "will send when reconnected" }));
      return li;
    }
    self.markPending = function () {
      for (const s of list().querySelectorAll("li.pending .state")) s.textContent = rpc.open ? "sending…" : "will send when reconnected";
      $("queued-note").hidden = rpc.open;
      $("send").textContent = rpc.open ? "Send" : "Queue";
    };

    self.refreshControls = function (session) {
      $("abort").disabled = !(rpc.open && running.has(session));
    };

    function turnOf(session) {
      let t = live.get(session);
      if (!t) { t = assistantItem(null); t.body.className = "md thinking"; t.body.textContent = "Thinking"; add(t.li); live.set(session, t); }
      return t;
    }
    let paint = null;
    function repaint(t) {
      if (paint) return;
      paint = requestAnimationFrame(() => { paint = null; t.body.className = "md"; md.render(t.body, t.raw); follow(); });
    }

    // Live events of the session shown.
    self.onEvent = function (ev, current) {
      const d = ev.data;
      if (ev.event === "turn.accepted") running.add(ev.session);
      if (ev.event === "turn.final" || ev.event === "turn.error") running.delete(ev.session);
      if (ev.session !== current) return;
      if (loading && loading.session === ev.session && ["message", "turn.final", "turn.error"].includes(ev.event)) loading.dirty = true;
      if (ev.event === "message") {
        const pending = [...list().querySelectorAll("li.user.pending")].find((li) => li.querySelector(".bubble").textContent === d.text);
        if (pending) { pending.classList.remove("pending"); pending.dataset.seq = d.seq; pending.querySelector(".state")?.remove(); }
        else add(userItem(d.text, 0, d.seq));
      } else if (ev.event === "lane.queued") {
        const t = turnOf(ev.session); t.body.textContent = "Queued behind the running reply (" + d.position + " ahead)";
      } else if (ev.event === "turn.accepted") {
        const t = turnOf(ev.session); t.turnId = d.turn; t.body.className = "md thinking"; t.body.textContent = "Thinking";
      } else if (ev.event === "turn.delta") {
        const t = turnOf(ev.session); t.raw += d.text; repaint(t);
      } else if (ev.event === "tool.started") {
        const t = turnOf(ev.session);
        t.tools.append(toolCard({ tool: d.tool, call: d.call, arguments: d.arguments, started: Date.now(), approval: d.approval }));
        follow();
      } else if (ev.event === "tool.approval") {
        turnOf(ev.session).tools.append(approvalCard(d));
        follow();
      } else if (ev.event === "tool.finished") {
        settleApproval(d.call, d.ok ? "ran" : "not run: " + d.error);
        const t = turnOf(ev.session);
        const card = t.tools.querySelector('[data-call="' + CSS.escape(String(d.call)) + '"]');
        if (card) card.update({ ok: d.ok, result: d.result, error: d.error, duration_ms: d.duration_ms || (Date.now() - (card.started || Date.now())) });
      } else if (ev.event === "turn.final") {
        const t = turnOf(ev.session);
        if (paint) { cancelAnimationFrame(paint); paint = null; }
        t.body.className = "md"; md.render(t.body, d.text);
        t.li.classList.add("final"); t.li.dataset.seq = d.reply_seq;
        t.meta = meta(0, ""); t.li.append(t.meta);
        t.done = true;
        follow();
      } else if (ev.event === "turn.usage") {
        const t = live.get(ev.session);
        if (t && t.meta) t.meta.append(usageText(Object.assign({ duration_ms: t.started ? Date.now() - t.started : 0 }, d)));
        live.delete(ev.session);
      } else if (ev.event === "turn.error") {
        const t = turnOf(ev.session);
        if (paint) { cancelAnimationFrame(paint); paint = null; }
        // Keep what was streamed: the partial text stays, the error beside it.
        const partial = d.partial || t.raw;
        if (partial) { t.body.className = "md"; md.render(t.body, partial); } else t.li.querySelector(".bubble").remove();
        t.li.classList.add("error", "final");
        t.li.append(errorNote(d.kind, d.message), meta(0, ""));
        live.delete(ev.session);
        follow();
      }
      if (ev.event === "turn.accepted") { const t = live.get(ev.session); if (t) t.started = Date.now(); }
      self.refreshControls(current);
    };

    self.send = async function (session, text, mode, key) {
      outbox[key] = { session, text, mode };
      saveOutbox();
      if (!rpc.open) return; // kept; sent on reconnect with the same key
      try {
        await rpc.request("send", mode ? { session, text, key, mode } : { session, text, key });
        delete outbox[key];
        saveOutbox();
      } catch (e) {
        if (e.code === "not_connected") { self.markPending(); return; } // resent on reconnect
        delete outbox[key];
        saveOutbox();
        const li = list().querySelector('li.pending[data-key="' + CSS.escape(key) + '"]');
        if (li) { li.classList.remove("pending"); li.querySelector(".state")?.remove(); li.append(el("div", { class: "turn-error", text: "Not sent. " + e.message })); }
      }
    };
    self.resend = function () {
      for (const [key, m] of Object.entries(outbox)) self.send(m.session, m.text, m.mode, key);
    };
    self.compose = function (session) {
      const box = $("text");
      const text = box.value;
      if (!text.trim()) return;
      box.value = ""; grow();
      const key = (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : Date.now() + "-" + Math.random().toString(16).slice(2);
      stick = true;
      add(pendingItem(key, text));
      self.send(session, text, $("mode").value, key);
    };
    function grow() {
      const box = $("text");
      box.style.height = "auto";
      box.style.height = Math.min(box.scrollHeight + 2, window.innerHeight * 0.4) + "px";
    }
    $("text").addEventListener("input", grow);
    return self;
  })();
  Naga.chat = chat;

  // --- sessions -------------------------------------------------------------------
  const sessions = (function () {
    const store = window.sessionStorage;
    // A link may name the session: /#s=NAME (a name, never a credential).
    const linked = /^#s=([a-z0-9][a-z0-9_.:-]{0,127})$/.exec(location.hash);
    const self = { current: linked ? linked[1] : store.getItem("naga.session") || "", known: [] };
    self.render = function () {
      const ul = $("sessions");
      ul.textContent = "";
      const rows = self.known.slice();
      if (self.current && !rows.some((s) => s.session === self.current)) rows.unshift({ session: self.current, preview: "", last_time_ns: 0, turns: 0 });
      for (const s of rows) {
        const here = s.session === self.current && pages.current === "chat";
        const sub = (s.running ? "replying… · " : "") + (s.last_time_ns ? ago(s.last_time_ns) + " · " : "") + (s.preview || "no messages yet");
        const b = el("button", { type: "button", "data-session": s.session, "aria-current": here ? "true" : "false", onclick: () => self.open(s.session) },
          el("span", { class: "name", text: s.title || s.session, title: s.title ? s.session : null }), el("span", { class: "sub", text: sub }));
        ul.append(el("li", {}, b));
      }
    };
    self.refresh = async function () {
      try { self.known = (await rpc.request("sessions", { limit: 100 })).sessions; rpc.coreDown(false); } catch (e) {
        if (e.code === "core_error") rpc.coreDown(true, "The core is not answering: " + e.message);
      }
      self.render();
    };
    self.open = async function (name) {
      self.current = name;
      store.setItem("naga.session", name);
      pages.show("chat", true);
      self.render();
      await chat.load(name);
    };
    return self;
  })();
  Naga.sessions = sessions;

  // --- pages: the registry ---------------------------------------------------------
  // Naga.pages.register({id, title, render(section) -> Promise}) adds a page to
  // the frame: a link in the side bar and a section rendered when shown.
  const pages = (function () {
    const self = { current: "chat", list: [] };
    self.register = function (page) {
      self.list.push(page);
      if (page.id !== "chat") {
        const sec = el("section", { id: "page-" + page.id, class: "page doc", "aria-label": page.title, hidden: true });
        $("view").append(sec);
        page.section = sec;
      }
      const b = el("button", { type: "button", "data-page": page.id, onclick: () => self.show(page.id) }, el("span", { class: "name", text: page.title }));
      $("pages").append(el("li", {}, b));
    };
    self.show = async function (id, quiet) {
      const was = self.current;
      self.current = id;
      $("side").classList.remove("open");
      $("menu").setAttribute("aria-expanded", "false");
      for (const p of self.list) {
        const sec = p.id === "chat" ? $("page-chat") : p.section;
        sec.hidden = p.id !== id;
      }
      for (const b of $("pages").querySelectorAll("button")) b.setAttribute("aria-current", b.dataset.page === id ? "true" : "false");
      sessions.render();
      if (id === "chat") {
        if (!quiet) { $("text").focus(); if (was !== "chat") await chat.load(sessions.current); }
        return;
      }
      const page = self.list.find((p) => p.id === id);
      const sec = page.section;
      sec.textContent = "";
      sec.append(el("h2", { text: page.title }));
      if (page.lead) sec.append(el("p", { class: "lead", text: page.lead }));
      const body = el("div", { class: "body", "aria-busy": "true" });
      sec.append(body);
      try { await page.render(body); } catch (e) { body.append(el("p", { class: "error-box", text: e.message })); }
      body.setAttribute("aria-busy", "false");
      body.dataset.ready = "1";
    };
    return self;
  })();
  Naga.pages = pages;

  // --- built-in pages --------------------------------------------------------------
  function table(headers, rows, wide) {
    const t = el("table", { class: "grid" + (wide ? " wide" : "") });
    t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col", text: h })))));
    const tb = el("tbody");
    for (const r of rows) tb.append(el("tr", {}, ...r.map((c, i) => el("td", { "data-label": headers[i] || null }, c))));
    t.append(tb);
    return t;
  }
  function shown(v) { return v === null || v === undefined ? "(none)" : v === "" ? '""' : typeof v === "boolean" ? (v ? "true" : "false") : String(v); }

  pages.register({ id: "chat", title: "Chat" });
  // Settings, model, plugins and the other owner pages that change things: admin.js.
  // The ledger in words: "set agent.max_steps", "enable plugin clock".
  function entryWords(e) {
    if (e.description) return e.description;
    const k = e.kind;
    if (k.startsWith("turn.")) return { "turn.message": "a message", "turn.reply": "a reply", "turn.error": "a turn ended without an answer", "turn.tool": "a tool call's result", "turn.tool_call": "a tool call", "turn.tool_effect": "a tool call's file changes", "turn.model": "a model call", "turn.steer": "a steering message", "turn.resumed": "a turn started again after a restart", "turn.compact": "a summary of older messages", "turn.read_result": "more of a tool's result read", "turn.skill_review": "a skill review" }[k] || k;
    return k.replace(/[._]/g, " ");
  }
  function ledgerRow(e, undo) {
    const when = el("time", { datetime: new Date(e.time_ns / 1e6).toISOString(), text: clock(e.time_ns) });
    const what = el("span", {}, entryWords(e), e.irreversible ? " " : "", e.irreversible ? el("span", { class: "tag bad", text: "cannot be undone" }) : null);
    const cells = ["#" + e.seq, when, what];
    if (undo) cells.push(el("button", { type: "button", class: "undo", "data-seq": e.seq, "aria-label": "Undo everything after #" + e.seq, onclick: () => undo(e.seq) }, "Undo to here"));
    return cells;
  }
  pages.register({
    id: "ledger", title: "Ledger history",
    lead: "What this Naga did, newest first, as the hash-chained ledger records it.",
    async render(body) {
      const filter = el("input", { type: "search", placeholder: "filter (e.g. plugin, trust, setting)", "aria-label": "Filter the entries" });
      body.append(el("div", { class: "filter" }, filter));
      const res = await rpc.request("ledger", { limit: 200 });
      const holder = el("div");
      body.append(holder);
      const draw = () => {
        const q = filter.value.toLowerCase();
        const rows = res.entries.filter((e) => !q || (entryWords(e) + " " + e.kind).toLowerCase().includes(q));
        holder.textContent = "";
        holder.append(table(["entry", "when", "what"], rows.map((e) => ledgerRow(e))));
      };
      filter.addEventListener("input", draw);
      draw();
    },
  });

  // Rollback: what undo restores and what it cannot undo, before it acts.
  // A preview's change: `before` is the value now, `after` the value once
  // undone (null: the entry goes). The same words as `naga rollback`.
  function changeWords(c) {
    const name = String(c.key).replace(/:/g, " ");
    const gone = c.after === null || c.after === undefined;
    switch (c.family) {
      case "component.enabled": return (gone ? "disable " : "enable ") + name;
      case "component": return (gone ? "stop " : "start ") + name;
      case "setting": return gone ? "reset " + c.key + " to its default" : "set " + c.key + " back to " + shown(c.after);
      case "trust": return gone ? "remove " + c.key + " from the trust table" : "set " + c.key + "'s trust back to " + shown(c.after);
      case "plugin.version": return "switch plugin " + c.key + " back to version " + shown(c.after);
      case "budget.spent": return gone ? "refund what token " + c.key + " spent" : "set what token " + c.key + " spent back to " + shown(c.after);
      case "token.revoked": return gone ? "lift the revocation of token " + c.key : "revoke token " + c.key;
      default: return (gone ? "remove " : "restore ") + c.family + " " + c.key;
    }
  }
  function previewCard(p, seq, onConfirm, onCancel) {
    const changes = p.changes.map(changeWords);
    const files = p.changes.filter((c) => /^(file|files|workspace)\b/.test(c.family)).length;
    const card = el("div", { class: "card", id: "preview", role: "region", "aria-label": "Undo preview" });
    card.append(el("h3", { text: "Undo everything after #" + seq }));
    card.append(el("p", { id: "preview-summary", text: "This undoes " + plural(p.effects, "effect") + " (#" + (seq + 1) + " to #" + p.through_seq + ")" + (files ? " and restores " + plural(files, "file") : "") + ". The undo is itself a ledger entry." }));
    card.append(changes.length ? el("ul", { id: "preview-changes" }, ...changes.map((w) => el("li", { text: w }))) : el("p", { class: "hint", id: "preview-changes", text: "No setting, trust entry or plugin changes: only later entries are marked undone." }));
    // In words (the gateway reads the entries): what it restores, what stays done.
    const words = [...(p.restored || []).map((e) => el("li", { class: "restored", text: "undoes #" + e.seq + ": " + e.text })),
      ...(p.cannot_undo || []).map((e) => el("li", { class: "irreversible", text: "cannot be undone #" + e.seq + ": " + e.text })),
      ...(p.kept || []).map((e) => el("li", { class: "kept", text: "stays #" + e.seq + " (a revocation is never lifted): " + e.text }))];
    if (words.length) card.append(el("ul", { id: "preview-words" }, ...words));
    if (p.irreversible.length) card.append(el("p", { class: "error-box", text: "Cannot be undone (they stay done): " + p.irreversible.map((s) => "#" + s).join(", ") + "." }));
    card.append(el("div", { class: "filter" }, el("button", { type: "button", class: "primary", id: "confirm-undo", onclick: onConfirm }, "Undo"), el("button", { type: "button", id: "cancel-undo", onclick: onCancel }, "Cancel")));
    return card;
  }
  pages.register({
    id: "rollback", title: "Undo (rollback)",
    lead: "Pick an entry to keep: everything after it is undone. You see what would change before anything does.",
    async render(body) {
      const res = await rpc.request("ledger", { limit: 100 });
      const slot = el("div");
      const undo = async (seq) => {
        slot.textContent = "";
        let pv;
        try { pv = await rpc.request("rollback.preview", { to_seq: seq }); } catch (e) { slot.append(el("p", { class: "error-box", text: e.message })); return; }
        slot.append(previewCard(pv.preview, seq, async () => {
          try {
            const done = await rpc.request("rollback", { to_seq: seq });
            slot.textContent = "";
            slot.append(el("p", { class: "card", id: "undone", text: "Undone: entry #" + done.seq + " records it." }));
            await pages.show("rollback");
          } catch (e) { slot.append(el("p", { class: "error-box", text: e.message })); }
        }, () => { slot.textContent = ""; }));
        slot.scrollIntoView({ block: "nearest" });
      };
      body.append(slot, table(["entry", "when", "what", ""], res.entries.map((e) => ledgerRow(e, undo)), true));
    },
  });

  // --- keys: shortcuts --------------------------------------------------------------
  document.addEventListener("keydown", (e) => {
    if (e.altKey && (e.key === "n" || e.key === "N")) { e.preventDefault(); $("side").classList.add("open"); $("new-name").focus(); }
    else if (e.key === "/" && document.activeElement.tagName !== "TEXTAREA" && document.activeElement.tagName !== "INPUT") { e.preventDefault(); pages.show("chat"); }
    else if (e.key === "Escape") {
      if ($("side").classList.contains("open")) { $("side").classList.remove("open"); return; }
      if (!$("abort").disabled) $("abort").click();
    }
  });
  $("text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  });

  // --- boot -------------------------------------------------------------------------
  $("menu").onclick = () => {
    const open = $("side").classList.toggle("open");
    $("menu").setAttribute("aria-expanded", String(open));
  };
  $("new-session").onsubmit = (e) => {
    e.preventDefault();
    const box = $("new-name");
    const name = box.value.trim();
    if (!name || !box.checkValidity()) { box.reportValidity(); return; }
    box.value = "";
    sessions.open((rpc.hello ? rpc.hello.session_prefix : "") + name);
    $("text").focus();
  };
  $("composer").onsubmit = (e) => { e.preventDefault(); chat.compose(sessions.current); };
  $("abort").onclick = () => rpc.request("abort", { session: sessions.current }).catch((e) => {
    $("messages").append(el("li", {}, el("div", { class: "turn-error", text: e.message })));
  });
  rpc.onState(() => { chat.markPending(); chat.refreshControls(sessions.current); });
  rpc.onOpen(async (hello, resumed) => {
    loginRefusal = "";
    $("title").textContent = "Naga ";
    $("title").append(el("span", { class: "tag", title: hello.peer, text: hello.trust }));
    if (hello.trust !== "owner") for (const b of $("pages").querySelectorAll("button")) if (b.dataset.page !== "chat") b.parentElement.hidden = true;
    if (!sessions.current) sessions.current = hello.session_prefix + "main";
    // The side bar and the history at once: neither waits for the other.
    await Promise.all([sessions.refresh(), pages.current === "chat" ? chat.load(sessions.current) : null]);
    chat.resend();
    if (!document.body.dataset.ready) performance.mark("naga-interactive"); // bench/console.py
    document.body.dataset.ready = "1";
  });
  rpc.on((ev, gap) => {
    if (gap) { chat.load(sessions.current); return; } // events were lost: the history is the truth
    chat.onEvent(ev, sessions.current);
    if (ev.event === "message" || ev.event === "turn.final" || ev.event === "turn.error" || ev.event === "turn.accepted") sessions.refresh();
  });
  // The core behind a live gateway can stop too: ask now and then.
  setInterval(() => { if (rpc.open && !document.hidden) sessions.refresh(); }, 15000);
  // --- the owner's proof (docs/adr/0007-console-owner-proof.md) --------------
  // The login link's one-time code is in the fragment, which no request
  // carries; it leaves the address bar (and this history entry) at once and
  // is traded for an HttpOnly cookie. Without that cookie the gateway refuses.
  function loggedOut(refusal) {
    $("conn").dataset.state = "logged out";
    $("conn").textContent = "logged out";
    $("banner").hidden = true;
    $("login").textContent = refusal;
    $("login").hidden = false;
  }
  let loginRefusal = "";
  // Whether this browser is logged in as the owner; if not, the page says
  // why (the login link's refusal first) and false.
  Naga.loggedIn = async function () {
    let s;
    try { s = await fetch("/session", { credentials: "same-origin", cache: "no-store" }); } catch (e) {
      return true; // the gateway is not reachable: not a login problem, retry
    }
    if (s.ok || s.status === 503) { $("login").hidden = true; return true; } // 503: the core cannot say now
    let why = "";
    try { why = (await s.json()).error; } catch (e) { why = "not logged in (HTTP " + s.status + ")"; }
    loggedOut(loginRefusal || why);
    return false;
  };
  // Straight to the WebSocket: its upgrade checks the owner's cookie, so a
  // separate /session check first would cost every load a round trip to
  // the core (bench/console.py); /session is asked only when it is refused.
  Naga.start = async function () {
    const m = /^#login=([A-Za-z0-9_-]{16,64})$/.exec(location.hash);
    if (m) {
      history.replaceState(null, "", location.pathname + location.search);
      try {
        const r = await fetch("/login", {
          method: "POST", credentials: "same-origin",
          headers: { "content-type": "application/json" }, body: JSON.stringify({ code: m[1] }),
        });
        loginRefusal = r.ok ? "" : (await r.json()).error;
      } catch (e) {
        setTimeout(Naga.start, 1000); // the gateway is not reachable yet
        return;
      }
    }
    rpc.connect();
  };
  // A login link opened in a tab already here changes only the fragment.
  window.addEventListener("hashchange", () => { if (/^#login=/.test(location.hash)) location.reload(); });
  Naga.start();
  return Naga;
})();
