"""The curator (``naga skill curate``): what it may do, and nothing more.

* archive a skill unused for ``skills.stale_days`` (no view, no new
  version in that time): archived, never deleted; ``naga skill restore``
  brings it back;
* merge near-duplicates of one scope (similarity at or above
  ``skills.duplicate_threshold``) into one new version of the most used of
  them, whose parents are every merged head; the others are archived and
  stay in the tree;
* never touch a pinned skill; never move a skill between scopes.

Every action is one kernel effect by the ``curator`` author, so a rollback
undoes any of them. A dry run plans the same actions and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from naga_core.skills._format import SKILL_FILE, render
from naga_core.skills._lint import similarity
from naga_core.skills._store import SkillRef, SkillStore

_NS_PER_DAY = 86_400 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class CurateAction:
    kind: str  # archive | merge
    scope: str
    name: str
    merged: tuple[str, ...] = ()
    why: str = ""


def plan(
    store: SkillStore,
    uses: dict[str, tuple[int, int]],
    *,
    now_ns: int,
    stale_days: int,
    threshold: float,
) -> list[CurateAction]:
    actions: list[CurateAction] = []
    live: list[SkillRef] = []
    for ref in store.refs(archived=False):
        if ref.pinned or ref.forgotten:  # a forgotten one cannot be read, so not merged
            continue
        last = max(uses.get(ref.key, (0, 0))[1], store.version(ref.commit).commit.time_ns)
        idle = (now_ns - last) // _NS_PER_DAY
        if idle >= stale_days:
            actions.append(CurateAction("archive", ref.scope, ref.name, why=f"unused {idle} days"))
        else:
            live.append(ref)
    taken: set[str] = set()
    docs = {f"{r.scope}/{r.name}": store.doc(store.version(r.commit)) for r in live}
    ranked = sorted(live, key=lambda r: (-uses.get(r.key, (0, 0))[0], r.name))
    for target in ranked:
        tkey = f"{target.scope}/{target.name}"
        if tkey in taken:
            continue
        t = docs[tkey]
        group: list[str] = []
        for other in ranked:
            okey = f"{other.scope}/{other.name}"
            if okey == tkey or okey in taken or other.scope != target.scope:
                continue
            o = docs[okey]
            sim = similarity(
                (target.name, t.description, t.body), (other.name, o.description, o.body)
            )
            if sim >= threshold:
                group.append(okey)
        if group:
            taken.add(tkey)
            taken.update(group)
            actions.append(
                CurateAction(
                    "merge",
                    target.scope,
                    target.name,
                    tuple(group),
                    why=f"near-duplicates (similarity >= {threshold:.2f})",
                )
            )
    return actions


def apply(store: SkillStore, actions: list[CurateAction]) -> int:
    """Carry out ``actions``, one effect each; the last effect's seq (0: none)."""
    seq = 0
    for act in actions:
        if act.kind == "archive":
            seq = store.archive(act.scope, act.name, author="curator", reason=act.why)
            continue
        head = store.need(act.scope, act.name)
        version = store.version(head.commit)
        doc = store.doc(version)
        body = doc.body.rstrip("\n") + "\n"
        have = set(body.splitlines())
        for key in act.merged:
            scope, _, name = key.rpartition("/")
            other = store.doc(store.version(store.need(scope, name).commit))
            new = [line for line in other.body.splitlines() if line.strip() and line not in have]
            if new:
                body += f"\n## Also (from {name})\n\n" + "\n".join(new) + "\n"
                have.update(new)
        files = {**store.files(version), SKILL_FILE: render(act.name, doc.description, body)}
        sources = [(k.rpartition("/")[0], k.rpartition("/")[2]) for k in act.merged]
        store.merge(
            act.scope,
            act.name,
            sources,
            files,
            version.tree.executable,
            author="curator",
            reason=act.why,
        )
        seq = store.kernel.ledger.next_seq - 1
    return seq


__all__ = ["CurateAction", "apply", "plan"]
