// The memory page (docs/adr/0045-console-memory-delete.md): the items memory
// holds, by subject, decrypted by the core for the owner, and one deleted.
//
// Deleting is the core's: an entry in the ledger that takes the item out of
// every list, search and recall (undo can bring it back). Erasing a subject
// for good is `naga memory forget SUBJECT`, which destroys its key.
"use strict";
(function (Naga) {
  const { el, ago } = Naga.util;
  const rpc = Naga.rpc;
  const pages = Naga.pages;
  let subject = "";

  function when(ns) { return ago(ns); }

  pages.register({
    id: "memory", title: "Memory",
    lead: "What Naga remembers, about whom, and where it came from. Delete takes an item out of every recall (an entry in the ledger that undo can revert); `naga memory forget SUBJECT` erases everything about a person for good.",
    async render(body) {
      const res = await rpc.request("memory", { subject });
      const status = el("p", { id: "memory-status", class: "hint", role: "status", "aria-live": "polite" });
      const say = (text, bad) => { status.className = bad ? "error-box" : "card done"; status.textContent = text; };
      const pick = el("select", { id: "memory-subject", "aria-label": "Subject" },
        el("option", { value: "", text: "every subject", selected: subject === "" }),
        ...res.subjects.map((s) => el("option", { value: s, text: s, selected: s === subject })));
      pick.addEventListener("change", () => { subject = pick.value; pages.show("memory", true); });
      body.append(el("div", { class: "filter" }, pick), status);
      const del = async (item) => {
        try {
          const done = await rpc.request("memory.delete", { id: item.id });
          const words = "Deleted " + done.id + " about " + done.subject + " (ledger entry #" + done.seq + "; undo can revert it).";
          await pages.show("memory", true);
          const again = document.getElementById("memory-status");
          if (again) { again.className = "card done"; again.textContent = words; }
        } catch (e) { say(e.message, true); }
      };
      if (!res.items.length) {
        body.append(el("p", { class: "hint", id: "memory-empty", text: subject ? "Nothing remembered about " + subject + "." : "Nothing remembered yet." }));
        return;
      }
      const list = el("ul", { class: "memory-items", id: "memory-items" });
      for (const item of res.items.slice().reverse()) {
        const text = item.forgotten ? el("em", { text: "forgotten (its subject's key was destroyed)" }) : el("span", { class: "memory-text", text: item.text });
        const meta = el("p", { class: "hint", text: [item.subject, item.layer, "from " + (item.session || "?") + " (" + (item.writer_trust || "?") + ")", when(item.created_ns)].filter(Boolean).join(" · ") });
        const button = el("button", { type: "button", class: "memory-delete", "aria-label": "Delete " + item.id, onclick: () => del(item) }, "Delete");
        list.append(el("li", { class: "card memory-item", "data-id": item.id }, text, meta, button));
      }
      body.append(list);
    },
  });
})(window.Naga);
