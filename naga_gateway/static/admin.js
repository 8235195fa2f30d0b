// The owner's pages that change things (docs/console.md, docs/adr/0029-console-owner-changes.md):
// settings, the model provider, plugins, trust, sessions, the core's log, WeChat.
//
// Every change is a request the gateway passes to the core with the owner's
// console login, and the core checks that login itself: nothing here decides
// who may do what. A refusal is shown as the core words it.
"use strict";
(function (Naga) {
  const { el, clock, ago, plural } = Naga.util;
  const rpc = Naga.rpc;
  const pages = Naga.pages;
  // The scale's words (R0 read-only .. R4 destructive): what a tool does is
  // its description's; a level says how careful to be, not what it reaches.
  const RISK = ["R0 read-only", "R1 low risk", "R2 changes things", "R3 high risk", "R4 destructive"];

  function shown(v) { return v === null || v === undefined ? "(none)" : v === "" ? '""' : typeof v === "boolean" ? (v ? "true" : "false") : String(v); }
  function table(headers, rows, wide) {
    const t = el("table", { class: "grid" + (wide ? " wide" : "") });
    t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col", text: h })))));
    const tb = el("tbody");
    for (const r of rows) tb.append(el("tr", {}, ...r.map((c, i) => el("td", { "data-label": headers[i] || null }, c))));
    t.append(tb);
    return t;
  }
  // One line that says how the last change went: role=status, or an error box.
  function statusLine(id) {
    const p = el("p", { id, class: "hint", role: "status", "aria-live": "polite" });
    p.say = (text, bad) => { p.className = bad ? "error-box" : "card done"; p.textContent = text; };
    return p;
  }
  function seqWords(seq) { return seq === null || seq === undefined ? " (unchanged: it already was so)" : " (ledger entry #" + seq + "; undo can revert it)"; }

  // --- settings ---------------------------------------------------------------------
  pages.register({
    id: "settings", title: "Settings",
    lead: "Every setting with its rule and the value in effect. A change is checked by its rule and is an entry in the ledger that undo can revert.",
    async render(body) {
      const res = await rpc.request("settings", {});
      const status = statusLine("setting-status");
      const name = el("select", { id: "setting-name", "aria-label": "Setting" }, ...res.settings.map((s) => el("option", { value: s.name, text: s.name })));
      const value = el("input", { id: "setting-value", "aria-label": "New value", autocomplete: "off", maxlength: "1024" });
      const rule = el("p", { class: "hint", id: "setting-rule" });
      const byName = new Map(res.settings.map((s) => [s.name, s]));
      const pick = () => {
        const s = byName.get(name.value);
        rule.textContent = s ? s.kind + ": " + s.rule + " (now " + shown(s.value) + ", default " + shown(s.default) + ")" : "";
        value.value = s && s.value !== null ? String(s.value) : "";
      };
      name.addEventListener("change", pick);
      const act = async (params, words) => {
        try {
          const done = await rpc.request("setting.set", params);
          status.say(words + " " + done.setting.name + " = " + shown(done.setting.value) + seqWords(done.seq));
          await pages.show("settings", true);
          const again = document.getElementById("setting-status");
          if (again) again.say(words + " " + done.setting.name + " = " + shown(done.setting.value) + seqWords(done.seq));
        } catch (e) { status.say(e.message, true); }
      };
      const form = el("form", { class: "filter", id: "setting-form", "aria-label": "Change a setting" }, name, value,
        el("button", { type: "submit", class: "primary", id: "setting-save" }, "Set"),
        el("button", { type: "button", id: "setting-reset", onclick: () => act({ name: name.value, reset: true }, "Reset") }, "Reset to default"));
      form.onsubmit = (e) => { e.preventDefault(); act({ name: name.value, value: value.value }, "Set"); };
      body.append(form, rule, status);
      const rows = res.settings.map((s) => [
        el("code", { text: s.name }),
        el("span", {}, el("strong", { text: shown(s.value) }), " ", el("span", { class: "tag" + (s.explicit ? " good" : ""), text: s.explicit ? "set" : "default" })),
        el("span", { text: s.kind + ": " + s.rule }),
        el("span", { text: shown(s.default) }),
        el("span", {}, s.doc, s.problem ? el("div", { class: "error-box", text: s.problem }) : null),
        el("button", { type: "button", class: "edit", "aria-label": "Change " + s.name, onclick: () => { name.value = s.name; pick(); value.focus(); } }, "Change"),
      ]);
      body.append(table(["setting", "in effect", "type and range", "default", "what it does", ""], rows, true));
      pick();
    },
  });

  // --- the model provider ------------------------------------------------------------------
  pages.register({
    id: "model", title: "Model",
    lead: "The providers of providers.json and which one answers. Keys stay in the file and never reach this page.",
    async render(body) {
      const res = await rpc.request("providers", {});
      const status = statusLine("provider-status");
      const use = async (name, words) => {
        try {
          const done = await rpc.request("provider.default", { name });
          await pages.show("model", true);
          const again = document.getElementById("provider-status");
          if (again) again.say(words + ": model calls now go to " + done.in_use + ".");
        } catch (e) { status.say(e.message, true); }
      };
      const inUse = res.in_use === "local" ? "the embedded local model" : res.in_use;
      body.append(el("div", { class: "card" }, el("p", { id: "provider-in-use" }, "Provider in use: ", el("strong", { text: inUse })),
        el("p", { class: "hint", text: res.setting ? "Chosen here (model.provider = " + res.setting + ")." : res.no_file ? "There is no providers.json." : "providers.json's default (model.provider is not set)." })));
      // No providers.json is how Naga starts: the embedded model answers. Not an error.
      if (res.no_file) body.append(el("p", { class: "hint", id: "provider-none", text: "No model provider is configured yet, so the embedded local model answers (small and slow, but private and offline). To use a provider, write credentials/providers.json in Naga's home (docs/design/models.md); it then shows here." }));
      else if (res.problem) body.append(el("p", { class: "error-box", id: "provider-problem", text: "providers.json: " + res.problem }));
      const rows = res.providers.map((p) => [
        el("strong", { text: p.name }),
        el("span", { text: p.api }),
        el("code", { text: p.host }),
        el("code", { text: p.model }),
        el("span", { text: p.context_window.toLocaleString() + " tokens" + (p.vision ? ", sees images" : "") }),
        el("span", {}, p.in_use ? el("span", { class: "tag good", text: "in use" }) : null, p.file_default ? " " : "", p.file_default ? el("span", { class: "tag", text: "file default" }) : null),
        p.in_use ? el("span", {}) : el("button", { type: "button", class: "use", "data-provider": p.name, onclick: () => use(p.name, "Switched") }, "Use " + p.name),
      ]);
      if (rows.length) body.append(table(["provider", "API", "host", "model", "context", "status", ""], rows, true));
      body.append(el("div", { class: "filter" },
        res.in_use === "local" ? null : el("button", { type: "button", id: "use-local", onclick: () => use("local", "Switched") }, "Use the local model"),
        res.setting ? el("button", { type: "button", id: "use-file-default", onclick: () => use("", "Back to providers.json's default") }, "Back to providers.json's default") : null), status);
    },
  });

  // --- plugins ------------------------------------------------------------------------------
  function asks(p) {
    const items = [];
    items.push(p.egress.length ? "network: " + p.egress.join(", ") + (p.capabilities.includes("egress_proxy") ? " (through the core's egress proxy, checked by host and port)" : "") : "no network");
    const caps = p.capabilities.filter((c) => c !== "egress_proxy");
    if (caps.length) items.push("capabilities: " + caps.join(", "));
    items.push(p.tools.length ? "tools: " + p.tools.map((t) => t.name + " (" + (RISK[t.risk] || "R" + t.risk) + ")").join(", ") : "no tools");
    return items;
  }
  pages.register({
    id: "plugins", title: "Plugins and tools",
    lead: "Installed plugins, their state, what each may reach and its tools with risk levels. Enabling or disabling one is an effect that undo can revert; new plugins are installed with `naga plugin install`.",
    async render(body) {
      const res = await rpc.request("plugins", {});
      // Which tools a turn is offered and which ask first are settings: say
      // so at each tool, or a running plugin's tool reads as the agent's.
      let maxRisk = 4, approveFrom = 5;
      try {
        const set = new Map((await rpc.request("settings", {})).settings.map((x) => [x.name, String(x.value)]));
        const level = (name, dflt) => { const m = /^R([0-4])$/.exec(set.get(name) || ""); return m ? Number(m[1]) : dflt; };
        maxRisk = level("tools.max_risk", maxRisk);
        approveFrom = level("tools.approve_from", approveFrom);
      } catch (e) { /* the page still shows the plugins, without these notes */ }
      const toolNotes = (p, t) => [
        p.shipped && t.risk > maxRisk ? el("span", { class: "tag bad not-offered", text: "not offered to the agent (tools.max_risk R" + maxRisk + ")" }) : null,
        t.risk >= approveFrom ? el("span", { class: "tag asks", text: "asks you first" }) : null,
      ].filter(Boolean).flatMap((n) => [" ", n]);
      const status = statusLine("plugin-status");
      body.append(status);
      const act = async (p, enabled) => {
        try {
          const done = await rpc.request("plugin.enable", { name: p.name, enabled });
          await pages.show("plugins", true);
          const again = document.getElementById("plugin-status");
          const state = done.plugin.state;
          if (again) again.say((enabled ? "Enabled " : "Disabled ") + p.name + " (now " + state + ")" + (done.changed ? "." : ": unchanged, it already was so.") + (done.plugin.last_failure ? " " + done.plugin.last_failure : ""), state === "failed");
        } catch (e) { status.say(e.message, true); }
      };
      const consent = (p, card) => {
        // As `naga plugin enable` would run it: say what it asks before it runs.
        for (const old of card.querySelectorAll(".consent")) old.remove();
        card.append(el("div", { class: "consent approval", role: "region", "aria-label": "Enable " + p.name },
          el("p", { text: "Enabling " + p.name + " runs it in its own sandbox with:" }),
          el("ul", {}, ...asks(p).map((w) => el("li", { text: w }))),
          el("button", { type: "button", class: "primary confirm-enable", onclick: () => act(p, true) }, "Enable " + p.name),
          el("button", { type: "button", onclick: (e) => e.target.parentElement.remove() }, "Cancel")));
      };
      for (const p of res.plugins) {
        const state = el("span", { class: "tag" + (p.state === "running" ? " good" : p.state === "failed" ? " bad" : ""), text: p.state });
        const tools = p.tools.length ? el("ul", {}, ...p.tools.map((t) => el("li", { "data-tool": t.name }, el("code", { text: t.name }), " ", el("span", { class: "tag", text: RISK[t.risk] || "R" + t.risk }), ...(p.enabled ? toolNotes(p, t) : []), t.description ? " " + t.description : ""))) : el("p", { class: "hint", text: "no tools" });
        const egress = el("p", { class: "egress hint", text: p.egress.length ? "Reaches: " + p.egress.join(", ") : "No network" });
        const card = el("div", { class: "card", "data-plugin": p.name });
        const button = p.enabled
          ? el("button", { type: "button", class: "toggle", "data-enabled": "true", onclick: () => act(p, false) }, "Disable")
          : el("button", { type: "button", class: "toggle", "data-enabled": "false", onclick: () => consent(p, card) }, "Enable…");
        card.append(...[
          el("div", {}, el("strong", { text: p.name }), " ", el("span", { class: "mono", text: p.version }), " ", state, " ", el("span", { class: "tag", text: p.kind.replace(/_/g, " ") }), p.shipped ? " " : "", p.shipped ? el("span", { class: "tag", text: "shipped" }) : null, " ", button),
          egress, p.last_failure ? el("p", { class: "error-box", text: p.last_failure }) : null, tools].filter(Boolean));
        body.append(card);
      }
      if (!res.plugins.length) body.append(el("p", { text: "No plugins installed." }));
      // Installing: the core reads the folder or archive and says what it
      // asks; the owner's yes installs exactly that code (its sha256).
      const source = el("input", { id: "install-source", placeholder: "/path/to/plugin-folder-or-archive", "aria-label": "Plugin folder or archive on this machine", autocomplete: "off", maxlength: "4096" });
      const slot = el("div", { id: "install-consent" });
      const form = el("form", { class: "filter", id: "install-form", "aria-label": "Install a plugin" }, source, el("button", { type: "submit" }, "Show what it asks"));
      form.onsubmit = async (e) => {
        e.preventDefault();
        slot.textContent = "";
        if (!source.value.startsWith("/")) { slot.append(el("p", { class: "error-box", text: "Give the plugin's absolute path on this machine (it starts with /)." })); return; }
        let pv;
        try { pv = await rpc.request("plugin.preview", { source: source.value }); } catch (err) { slot.append(el("p", { class: "error-box", text: err.message })); return; }
        const install = async () => {
          try {
            const done = await rpc.request("plugin.install", { source: source.value, code_hash: pv.code_hash });
            await pages.show("plugins", true);
            const again = document.getElementById("plugin-status");
            if (again) again.say("Installed " + done.name + " " + done.version + " (ledger entry #" + done.seq + "; undo can revert it). " + (done.restart_needed ? "A new plugin: restart the core to load it." : "Enable it above to run it."));
          } catch (err) { slot.append(el("p", { class: "error-box", text: err.message })); }
        };
        slot.append(el("div", { class: "approval", role: "region", "aria-label": "Install " + pv.name },
          el("ul", {}, ...pv.consent.map((w) => el("li", { text: w.trim() }))),
          el("button", { type: "button", class: "primary", id: "confirm-install", onclick: install }, "Install " + pv.name + " " + pv.version),
          el("button", { type: "button", onclick: () => { slot.textContent = ""; } }, "Cancel")));
        slot.scrollIntoView({ block: "nearest" });
      };
      body.append(el("h3", { text: "Install a plugin" }), form, slot);
    },
  });

  // --- trust ----------------------------------------------------------------------------------
  const LEVELS = ["untrusted", "guest", "known", "owner"];
  const LEVEL_WORDS = {
    owner: "everything: every session, every tool (R0–R4), usage, rollback",
    known: "its own sessions; tools up to R2; replies as they stream, usage",
    guest: "its own sessions; read-only tools (R0); replies as they stream",
    untrusted: "its own messages' final answers only; no tools",
  };
  function levelPicker(id, label, now) {
    return el("select", { id, "aria-label": label }, ...LEVELS.map((l) => el("option", { value: l, text: l, selected: l === now })));
  }
  pages.register({
    id: "trust", title: "Trust and peers",
    lead: "Each peer's trust level and what it may see. A change is the owner's (as `naga trust set PEER LEVEL`): an entry in the ledger that undo can revert; lowering a peer ends its running turns.",
    async render(body) {
      const res = await rpc.request("trust", {});
      const status = statusLine("trust-status");
      const set = async (peer, level, reason) => {
        try {
          const done = await rpc.request("trust.set", { peer, level, reason });
          const words = "Set " + done.peer.peer + " to " + done.peer.level + seqWords(done.seq);
          await pages.show("trust", true);
          const again = document.getElementById("trust-status");
          if (again) again.say(words);
        } catch (e) { status.say(e.message, true); }
      };
      body.append(status);
      const rows = res.peers.map((p, i) => {
        const pick = levelPicker("trust-level-" + i, "New level for " + p.peer, p.level);
        const why = el("input", { class: "reason", placeholder: "reason (optional)", maxlength: "500", "aria-label": "Why, for " + p.peer, autocomplete: "off" });
        const form = el("form", { class: "filter trust-row", "data-peer": p.peer, onsubmit: (e) => { e.preventDefault(); set(p.peer, pick.value, why.value); } },
          pick, why, el("button", { type: "submit" }, "Change"));
        return [el("code", { text: p.peer }), el("span", { class: "tag" + (p.level === "owner" ? " good" : p.level === "untrusted" ? " bad" : ""), text: p.level }), form];
      });
      body.append(rows.length ? table(["peer", "level", "change"], rows, true)
        : el("p", { class: "hint", id: "trust-empty", text: "No peer in the table yet: every peer not listed is untrusted (this console, logged in as the owner, is the owner)." }));
      const peer = el("input", { id: "trust-peer", placeholder: "wechat:BOT/USER or webchat:NAME", maxlength: "200", "aria-label": "Peer id", autocomplete: "off", required: true });
      const level = levelPicker("trust-level", "Level", "known");
      const reason = el("input", { id: "trust-reason", placeholder: "reason (optional)", maxlength: "500", "aria-label": "Why", autocomplete: "off" });
      const form = el("form", { class: "filter", id: "trust-form", "aria-label": "Set a peer's trust" }, peer, level, reason, el("button", { type: "submit", class: "primary" }, "Set"));
      form.onsubmit = (e) => {
        e.preventDefault();
        set(peer.value.trim(), level.value, reason.value);
      };
      body.append(el("h3", { text: "Set a peer's trust" }), form);
      body.append(el("h3", { text: "What each level may see" }), table(["level", "may see and do"], Object.entries(LEVEL_WORDS).map(([k, v]) => [el("strong", { text: k }), v])));
    },
  });

  // --- sessions -----------------------------------------------------------------------------
  pages.register({
    id: "sessions", title: "Sessions",
    lead: "Rename a session or archive it (it leaves the side bar; unarchive brings it back). Each change is a ledger entry that undo can revert; `naga session list` shows the same.",
    async render(body) {
      const res = await rpc.request("sessions", { limit: 200, include_archived: true });
      const status = statusLine("session-status");
      body.append(status);
      const after = async (text) => {
        await Naga.sessions.refresh();
        await pages.show("sessions", true);
        const again = document.getElementById("session-status");
        if (again) again.say(text);
      };
      const rows = res.sessions.map((s) => {
        const box = el("input", { class: "title-box", value: s.title || "", placeholder: s.session, maxlength: "80", "aria-label": "Title of " + s.session });
        const rename = async (e) => {
          e.preventDefault();
          try {
            const done = await rpc.request("session.rename", { session: s.session, title: box.value });
            await after((done.title ? "Renamed " + s.session + " to “" + done.title + "”" : "Took the title of " + s.session + " away") + seqWords(done.seq));
          } catch (err) { status.say(err.message, true); }
        };
        const form = el("form", { class: "filter rename", "data-session": s.session, onsubmit: rename }, box, el("button", { type: "submit" }, "Rename"));
        const flip = async () => {
          try {
            const done = await rpc.request("session.archive", { session: s.session, archived: !s.archived });
            // The core answers before the distillation's model call: it
            // runs in the background, its outcome a memory.distill record.
            const distilling = done.distilling ? "; distilling its memories in the background" : "";
            await after((done.archived ? "Archived " : "Unarchived ") + s.session + seqWords(done.seq) + distilling);
          } catch (err) { status.say(err.message, true); }
        };
        return [
          el("span", {}, el("code", { text: s.session }), s.archived ? " " : "", s.archived ? el("span", { class: "tag", text: "archived" }) : null),
          form,
          el("span", { text: (s.last_time_ns ? ago(s.last_time_ns) : "no messages") + " · " + plural(s.turns, "turn") }),
          el("button", { type: "button", class: "archive", "data-session": s.session, onclick: flip }, s.archived ? "Unarchive" : "Archive"),
        ];
      });
      body.append(rows.length ? table(["session", "title", "activity", ""], rows, true) : el("p", { class: "hint", text: "No sessions yet." }));
    },
  });

  // --- the core's log -------------------------------------------------------------------------
  pages.register({
    id: "logs", title: "Logs",
    lead: "The core's log (run/core.log), newest first: the core, its gateway and the sandboxed workers it copies in. Filter by level and component; older lines page in below.",
    async render(body) {
      const level = el("select", { id: "log-level", "aria-label": "Lowest level shown" },
        ...[["", "every level"], ["info", "info and above"], ["warning", "warnings and errors"], ["error", "errors only"]].map(([v, t]) => el("option", { value: v, text: t })));
      const component = el("input", { id: "log-component", type: "search", list: "log-components", placeholder: "component (e.g. naga.gateway)", "aria-label": "Component", maxlength: "128" });
      const choices = el("datalist", { id: "log-components" });
      const holder = el("div", { id: "log-lines" });
      const more = el("button", { type: "button", id: "log-older", hidden: true }, "Older lines");
      const status = statusLine("log-status");
      let before = null;
      let rows = [];
      const draw = () => {
        holder.textContent = "";
        if (!rows.length) { holder.append(el("p", { class: "hint", text: "No line matches." })); return; }
        holder.append(table(["line", "time", "level", "component", "message"], rows.map((l) => [
          el("span", { text: "#" + l.number }),
          el("span", { class: "mono", text: l.time || "" }),
          l.level ? el("span", { class: "tag" + (l.level === "error" || l.level === "critical" ? " bad" : ""), text: l.level }) : el("span", {}),
          el("code", { text: l.component }),
          el("span", { class: "mono logmsg", text: l.message }),
        ]), true));
      };
      const load = async (older) => {
        if (!/^[A-Za-z0-9_.:-]*$/.test(component.value)) { status.say("A component is a logger name: letters, digits and . _ : - (e.g. naga.gateway).", true); return; }
        const params = { limit: 100, component: component.value };
        if (level.value) params.level = level.value;
        if (older && before) params.before = before;
        try {
          const res = await rpc.request("log", params);
          rows = older ? rows.concat(res.lines) : res.lines;
          before = res.next_before;
          more.hidden = !res.more;
          choices.textContent = "";
          for (const c of res.components) choices.append(el("option", { value: c }));
          status.className = "hint";
          status.textContent = plural(rows.length, "line") + " shown of " + res.total + " in the log" + (res.more ? "; older ones match too" : "") + ".";
          draw();
        } catch (e) { status.say(e.message, true); }
      };
      const form = el("form", { class: "filter", id: "log-filter", "aria-label": "Filter the log" }, level, component, choices,
        el("button", { type: "submit", class: "primary" }, "Show"));
      form.onsubmit = (e) => { e.preventDefault(); load(false); };
      level.addEventListener("change", () => load(false));
      more.onclick = () => load(true);
      body.append(form, status, holder, more);
      await load(false);
    },
  });

  // --- WeChat ---------------------------------------------------------------------------------
  function drawQr(rows) {
    const n = rows.length, quiet = 4, cell = 6, size = (n + 2 * quiet) * cell;
    const canvas = el("canvas", { id: "wechat-qr", width: String(size), height: String(size), role: "img", "aria-label": "QR code to scan with WeChat" });
    const g = canvas.getContext("2d");
    g.fillStyle = "#fff";
    g.fillRect(0, 0, size, size);
    g.fillStyle = "#000";
    rows.forEach((row, y) => { for (let x = 0; x < row.length; x++) if (row[x] === "1") g.fillRect((x + quiet) * cell, (y + quiet) * cell, cell, cell); });
    return canvas;
  }
  const STATUS_WORDS = {
    wait: "Waiting: scan the code with WeChat on your phone.",
    scaned: "Scanned: confirm the login on your phone.",
    need_verifycode: "WeChat asks for the number shown on your phone: type it below.",
    expired: "The code expired: here is a new one, scan it.",
    confirmed: "Bound.",
    failed: "The binding failed.",
  };
  function bindingRows(list) {
    return list.map((b) => [
      el("code", { text: b.bot_id }),
      el("code", { text: b.owner_user_id }),
      el("span", {}, el("span", { class: "tag" + (b.status === "active" ? " good" : " bad"), text: b.status }), b.detail ? " " + b.detail : ""),
      el("span", { text: b.received + " in · " + b.sent + " out" + (b.since_ns ? " · since " + clock(b.since_ns) : "") }),
      el("span", { text: b.last_error || "" }),
    ]);
  }
  let binding = 0; // the bind loop running now; a newer one (or leaving the page) ends it
  pages.register({
    id: "wechat", title: "WeChat",
    lead: "Bind a WeChat account: scan the code with WeChat on the phone whose account will talk to Naga. That account is the owner of its binding; others who write to it start untrusted. The same as `naga wechat bind`.",
    async render(body) {
      const res = await rpc.request("wechat.list", {});
      const list = el("div", { id: "wechat-bindings" });
      list.append(res.bindings.length ? table(["bot", "owner (WeChat user)", "status", "messages", "last error"], bindingRows(res.bindings), true) : el("p", { class: "hint", text: "No WeChat account is bound yet." }));
      const panel = el("div", { id: "wechat-bind", class: "card", hidden: true });
      const state = el("p", { id: "wechat-state", role: "status", "aria-live": "polite" });
      const qr = el("div", { class: "qr" });
      const link = el("p", { class: "hint mono", id: "wechat-url" });
      const code = el("input", { id: "wechat-code", inputmode: "numeric", pattern: "[0-9]{1,16}", maxlength: "16", "aria-label": "Number shown on the phone", autocomplete: "off" });
      const codeForm = el("form", { class: "filter", id: "wechat-code-form", hidden: true, "aria-label": "Verification number" }, code, el("button", { type: "submit", class: "primary" }, "Send the number"));
      const problem = el("p", { class: "error-box", id: "wechat-error", hidden: true });
      panel.append(state, qr, link, codeForm, problem);
      let pendingCode = "";
      codeForm.onsubmit = (e) => {
        e.preventDefault();
        if (!/^[0-9]{1,16}$/.test(code.value)) { problem.hidden = false; problem.textContent = "Type the digits shown on the phone (1 to 16 digits)."; return; }
        problem.hidden = true;
        pendingCode = code.value;
        code.value = "";
        codeForm.hidden = true;
      };
      const show = (answer) => {
        panel.dataset.status = answer.status;
        state.textContent = (STATUS_WORDS[answer.status] || answer.status) + (answer.detail ? " (" + answer.detail + ")" : "");
        if (answer.qr && answer.status !== "confirmed") { qr.textContent = ""; qr.append(drawQr(answer.qr)); link.textContent = answer.url; }
        if (answer.status === "confirmed" || answer.status === "failed") { qr.textContent = ""; link.textContent = ""; }
        codeForm.hidden = answer.status !== "need_verifycode" || !!pendingCode;
      };
      const start = async () => {
        const mine = ++binding;
        panel.hidden = false;
        problem.hidden = true;
        pendingCode = "";
        // The first answer takes WeChat's server a few seconds: say so at once.
        panel.dataset.status = "asking";
        state.textContent = "Asking WeChat for a login code…";
        qr.textContent = "";
        link.textContent = "";
        let answer;
        try { answer = await rpc.request("wechat.bind", {}); } catch (e) { problem.hidden = false; problem.textContent = e.message; return; }
        show(answer);
        while (mine === binding && pages.current === "wechat" && answer.status !== "confirmed" && answer.status !== "failed") {
          const params = { login_id: answer.login_id, wait_ms: 10000 };
          if (pendingCode) { params.verify_code = pendingCode; pendingCode = ""; }
          try { answer = Object.assign({}, answer, await rpc.request("wechat.bind", params)); } catch (e) {
            problem.hidden = false; problem.textContent = e.message; return;
          }
          if (mine !== binding) return;
          show(answer);
        }
        if (answer.status === "confirmed") {
          if (answer.binding) state.textContent = "Bound: bot " + answer.binding.bot_id + " for WeChat user " + answer.binding.owner_user_id + ".";
          startButton.textContent = "Bind another WeChat account";
          const now = await rpc.request("wechat.list", {});
          list.textContent = "";
          list.append(table(["bot", "owner (WeChat user)", "status", "messages", "last error"], bindingRows(now.bindings), true));
        }
      };
      const startButton = el("button", { type: "button", class: "primary", id: "wechat-start", onclick: start }, res.bindings.length ? "Bind another WeChat account" : "Bind WeChat");
      body.append(list, el("div", { class: "filter" }, startButton), panel);
    },
  });
})(window.Naga);
