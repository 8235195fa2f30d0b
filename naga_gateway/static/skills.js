// The skills view (skills17; docs/design/skills.md, docs/adr/0044-console-skills-view.md):
// the library's skills, one skill's SKILL.md rendered and its files, and its
// history (every version, newest first). Read-only: a change is the owner's
// CLI's (`naga skill import|archive|revert ...`), each a ledger effect.
//
// Each request goes to the core with the owner's console login, which the
// core checks itself; a refusal is shown as the core words it.
"use strict";
(function (Naga) {
  const { el, clock, plural } = Naga.util;
  const rpc = Naga.rpc;
  const pages = Naga.pages;

  function table(headers, rows, id) {
    const t = el("table", { class: "grid wide", id: id || null });
    t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col", text: h })))));
    const tb = el("tbody");
    for (const r of rows) tb.append(el("tr", {}, ...r.map((c, i) => el("td", { "data-label": headers[i] || null }, c))));
    t.append(tb);
    return t;
  }
  const short = (hex) => el("code", { title: hex, text: hex.slice(0, 12) });
  // SKILL.md without its YAML frontmatter (name and description are shown above it).
  function bodyOf(text) {
    const m = /^---\r?\n[\s\S]*?\r?\n---\r?\n?/.exec(text);
    return m ? text.slice(m[0].length) : text;
  }

  async function detail(box, s) {
    box.textContent = "";
    box.setAttribute("aria-busy", "true");
    const args = { name: s.name, scope: s.scope };
    const [shown, log] = await Promise.all([rpc.request("skill.show", args), rpc.request("skill.log", args)]);
    const k = shown.skill;
    box.append(el("h3", { id: "skill-title", text: k.name }),
      el("p", { class: "hint", id: "skill-meta", text: k.scope + " · " + plural(k.versions, "version") + " · by " + k.author + " · " + (k.uses ? "viewed in " + plural(k.uses, "turn") : "never viewed yet") + (k.archived ? " · archived" : "") + (k.pinned ? " · pinned" : "") }),
      el("p", { id: "skill-description", text: k.description }));
    const body = el("div", { class: "md", id: "skill-body" });
    box.append(body);
    await Naga.md.ready;
    const doc = shown.files.find((f) => f.path === "SKILL.md");
    Naga.md.render(body, bodyOf(doc && doc.text ? doc.text : ""));
    const others = shown.files.filter((f) => f.path !== "SKILL.md");
    if (others.length) {
      box.append(el("h3", { text: "Files" }));
      const list = el("div", { id: "skill-files" });
      for (const f of others) {
        const d = el("details", { class: "skill-file", "data-path": f.path },
          el("summary", {}, el("code", { text: f.path }), " " + f.size + " bytes" + (f.executable ? ", executable" : "")));
        d.append(f.text === null ? el("p", { class: "hint", text: "Not text: `naga skill export " + k.name + " -o DIR` writes it." })
          : el("pre", { class: "mono", text: f.text + (f.cut ? "\n…" : "") }));
        list.append(d);
      }
      box.append(list);
    }
    box.append(el("h3", { text: "History" }),
      table(["version", "action", "by", "when", "reason"], log.versions.map((v) => [
        short(v.version), v.action + (v.parents.length > 1 ? " of " + v.parents.length : ""), v.author,
        el("time", { text: clock(v.time_ns) }), v.reason,
      ]), "skill-history"));
    box.setAttribute("aria-busy", "false");
    box.dataset.ready = "1";
  }

  pages.register({
    id: "skills", title: "Skills",
    lead: "What the agent has learnt and the skills you imported: each a SKILL.md folder whose every version is kept. Read-only here; `naga skill import|archive|restore|revert` change them (each a ledger entry undo can revert).",
    async render(body) {
      const res = await rpc.request("skills", { archived: true });
      const box = el("section", { id: "skill-detail", "aria-live": "polite" });
      const open = async (s) => {
        try { await detail(box, s); } catch (e) { box.textContent = ""; box.append(el("p", { class: "error-box", text: e.message })); }
        box.scrollIntoView({ block: "nearest" });
      };
      if (!res.skills.length) {
        body.append(el("p", { class: "hint", id: "skills-empty", text: "No skill yet. `naga skill import PATH` adds a SKILL.md folder; with `skills.review` on, the agent proposes its own." }));
        return;
      }
      body.append(table(["skill", "scope", "what it is for", "versions", "used"], res.skills.map((s) => [
        el("button", { type: "button", class: "skill-open", "data-skill": s.name, "data-scope": s.scope, onclick: () => open(s) }, s.name),
        s.scope + (s.archived ? " (archived)" : ""), s.description, String(s.versions), s.uses ? plural(s.uses, "turn") : "never",
      ]), "skills-list"), box);
    },
  });
})(window.Naga);
