"""Sedimentation: what a review of a finished turn may write (issue 17).

After a turn that succeeded and used tools, one review call answers with a
structured proposal (the ``skill_review`` tool's arguments): nothing (the
default and the usual answer), a new skill, or a patch of one. The
proposal is then judged here, in this order, and the first rule that
fails refuses it (the refusal and its reason are recorded):

1. the peer's trust allows writing skills (naga.policy ``may_write_skills``);
   the skill goes into the peer's scope (or the session's), never global;
2. it names what it is for and when it applies (a description with a
   "when"/"if" clause);
3. its claims are supported by the trace: every quoted piece of evidence,
   and every inline code span of the body, occurs in the turn's trace
   (the message, the tool calls and their results, the reply);
4. the poison lint finds nothing in its name, description and body;
5. near-duplicates: a create whose name, description and body are as
   similar as the threshold to a skill the turn can see becomes a patch of
   that skill (when it is in the writer's scope and adds something) or
   nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from naga_core.skills._errors import Reason, SkillError, SkillRefused
from naga_core.skills._format import SKILL_FILE, check_name, render
from naga_core.skills._lint import near_duplicate, poison
from naga_core.skills._store import SkillRef, SkillStore, peer_scope, session_scope

REVIEW_TOOL = "skill_review"
REVIEW_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["none", "create", "patch"]},
        "name": {"type": "string", "description": "lowercase-hyphenated skill name"},
        "description": {
            "type": "string",
            "description": "what the skill is for, and when it applies ('Use when ...')",
        },
        "body": {"type": "string", "description": "the steps, in Markdown"},
        "evidence": {
            "type": "array",
            "items": {"type": "string"},
            "description": "exact quotes from the trace that support every claim of the body",
        },
        "reason": {"type": "string"},
    },
    "required": ["action"],
}
REVIEW_PROMPT = (
    "You review one finished task of an agent. Decide whether it taught a reusable, "
    "non-obvious procedure worth saving as a skill. Usually it did not: answer "
    'action "none". Only when the trace shows a trick that worked and will recur, '
    'answer "create" (or "patch" with the name of an existing skill to improve), with '
    "a name, a description saying what it is for and when it applies, a short body of "
    "steps, and evidence: exact quotes from the trace for every claim. Never include "
    "secrets, URLs with credentials, or instructions aimed at the model. Call "
    f"{REVIEW_TOOL} once."
)
_CODE = re.compile(r"`([^`\n]{3,200})`")
_WHEN = re.compile(r"\b(when|if|whenever|for tasks?|before|after)\b", re.IGNORECASE)
#: A near-duplicate at least this similar adds nothing: the create is dropped.
SAME = 0.95


@dataclass(frozen=True, slots=True)
class Proposal:
    action: str
    name: str = ""
    description: str = ""
    body: str = ""
    evidence: tuple[str, ...] = ()
    reason: str = ""

    @classmethod
    def parse(cls, arguments_json: str) -> Proposal:
        """The review's answer; anything unreadable is "none"."""
        try:
            raw: object = json.loads(arguments_json or "{}")
        except ValueError:
            return cls("none", reason="the review's answer was not JSON")
        if not isinstance(raw, dict):
            return cls("none", reason="the review's answer was not an object")
        d = cast("dict[str, object]", raw)
        action = d.get("action")
        if action not in ("create", "patch"):
            return cls("none", reason=str(d.get("reason", ""))[:500])
        ev = d.get("evidence", [])
        evidence = tuple(str(e) for e in cast("list[object]", ev)) if isinstance(ev, list) else ()
        return cls(
            str(action),
            str(d.get("name", "")),
            str(d.get("description", "")),
            str(d.get("body", "")),
            evidence,
            str(d.get("reason", ""))[:500],
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the review did: none, created, patched or refused."""

    action: str
    name: str = ""
    scope: str = ""
    detail: str = ""
    reason: Reason | None = None


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def supported(proposal: Proposal, trace: str) -> str | None:
    """Why the proposal claims what the trace does not show, or None."""
    if not proposal.evidence:
        return "it quotes no evidence from the trace"
    seen = _norm(trace)
    for quote in proposal.evidence:
        if len(quote.strip()) < 3 or _norm(quote) not in seen:
            return f"the evidence {quote[:80]!r} is not in the trace"
    for span in _CODE.findall(proposal.body):
        if _norm(span) not in seen:
            return f"the body's `{span[:80]}` appears nowhere in the trace"
    return None


def judge_and_write(
    store: SkillStore,
    proposal: Proposal,
    trace: str,
    *,
    session: str,
    peer: str,
    may_write: bool,
    threshold: float,
    subject: str = "",
) -> Outcome:
    """Apply the rules of the module doc; write (one effect) what passes: a
    new skill of a sealed scope is sealed under ``subject`` (the turn's)."""
    if proposal.action == "none":
        return Outcome("none", detail=proposal.reason)
    if not may_write:
        return Outcome(
            "refused",
            detail="the peer's trust does not allow writing skills",
            reason=Reason.TRUST_DENIED,
        )
    scope = peer_scope(peer) if peer else session_scope(session)
    try:
        name = check_name(proposal.name)
    except SkillRefused as exc:
        return Outcome("refused", detail=str(exc), reason=exc.reason)
    if len(proposal.description.strip()) < 20 or not _WHEN.search(proposal.description):
        return Outcome(
            "refused",
            name,
            scope,
            "it must say what it is for and when it applies",
            Reason.UNSUPPORTED,
        )
    why = supported(proposal, trace)
    if why is not None:
        return Outcome("refused", name, scope, f"unsupported claim: {why}", Reason.UNSUPPORTED)
    found = poison("\n".join((proposal.name, proposal.description, proposal.body)))
    if found:
        what = "; ".join(f"{f.kind}: {f.excerpt!r}" for f in found)
        return Outcome("refused", name, scope, f"poison lint: {what}", Reason.POISON)
    action, target = proposal.action, name
    visible = _visible(store, session, peer)
    if action == "create":
        others = [(f"{r.scope}/{r.name}", r.name, d, b) for r, d, b in visible]
        near = near_duplicate(name, proposal.description, proposal.body, others)
        if near is not None and near.similarity >= threshold:
            hit = next(r for r, _, _ in visible if f"{r.scope}/{r.name}" == near.key)
            if hit.scope != scope or near.similarity >= SAME:
                return Outcome(
                    "none",
                    name,
                    scope,
                    f"near-duplicate of {near.key} (similarity {near.similarity:.2f})",
                    Reason.DUPLICATE,
                )
            action, target = "patch", hit.name
    files = {SKILL_FILE: render(target, proposal.description, proposal.body)}
    reason = proposal.reason or "distilled from a successful turn"
    try:
        if action == "create":
            store.create(scope, files, author="agent", reason=reason, subject=subject)
            return Outcome("created", target, scope)
        head = store.need(scope, target)
        version = store.version(head.commit)
        kept = {p: d for p, d in store.files(version).items() if p != SKILL_FILE}
        store.patch(
            scope,
            target,
            {**kept, **files},
            version.tree.executable & set(kept),
            author="agent",
            reason=reason,
        )
        return Outcome("patched", target, scope)
    except SkillRefused as exc:
        return Outcome("refused", target, scope, str(exc), exc.reason)
    except SkillError as exc:
        return Outcome("refused", target, scope, str(exc), Reason.CONFLICT)


def _visible(store: SkillStore, session: str, peer: str) -> list[tuple[SkillRef, str, str]]:
    out: list[tuple[SkillRef, str, str]] = []
    for scope in scopes_for(session, peer):
        for ref in store.refs(scope, archived=False):
            if ref.forgotten:
                continue
            doc = store.doc(store.version(ref.commit))
            out.append((ref, doc.description, doc.body))
    return out


def scopes_for(session: str, peer: str) -> Sequence[str]:
    """The scopes a turn reads, nearest first: its session's, its peer's, global."""
    out = [session_scope(session)] if session else []
    if peer:
        out.append(peer_scope(peer))
    out.append("global")
    return out


__all__ = [
    "REVIEW_PROMPT",
    "REVIEW_SCHEMA",
    "REVIEW_TOOL",
    "Outcome",
    "Proposal",
    "judge_and_write",
    "scopes_for",
    "supported",
]
