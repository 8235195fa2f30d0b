"""``naga memory list [--subject S] | show ID | search TEXT | forget SUBJECT |
export [--subject S]``: the owner's view of what Naga remembers, decrypted
by the core (docs/design/memory.md). ``forget`` destroys the subject's key:
everything sealed under it is unreadable for good, and the ledger says so
as an irreversible effect. Exit status: 0 done; 1 refused (no such item, a
malformed subject).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from naga.sdk import Client
from naga.v1 import memory_pb2 as mmpb
from naga_core._home import Home
from naga_core.cli._output import Outcome

_LAYERS = {mmpb.MEMORY_LAYER_SEMANTIC: "semantic", mmpb.MEMORY_LAYER_EPISODIC: "episodic"}
_PREVIEW = 100


def _item(i: mmpb.MemoryItem) -> dict[str, Any]:
    return {
        "id": i.id,
        "subject": i.subject,
        "layer": _LAYERS.get(i.layer, "unspecified"),
        "text": None if i.forgotten else i.text,
        "forgotten": i.forgotten,
        "session": i.session,
        "seqs": list(i.seqs),
        "writer_trust": i.writer_trust,
        "created_ns": i.created_ns,
        "seq": i.seq,
    }


def _line(i: mmpb.MemoryItem) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(i.created_ns / 1e9))
    text = "(forgotten)" if i.forgotten else i.text
    if len(text) > _PREVIEW:
        text = text[: _PREVIEW - 1] + "…"
    return f"{i.id}  {i.subject}  {_LAYERS.get(i.layer, '?')}  {when}  {text}"


def list_items(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        items = core.memory_items(args.subject or "")
    lines = [_line(i) for i in items] or ["nothing remembered" + _of(args.subject)]
    return Outcome(0, {"items": [_item(i) for i in items]}, lines)


def show(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        item = core.memory_item(args.id)
    data = _item(item)
    lines = [f"{k}: {v}" for k, v in data.items()]
    return Outcome(0, {"item": data}, lines)


def search(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        items = core.search_memory(args.text, args.subject or "", args.limit)
    lines = [_line(i) for i in items] or [f"nothing remembered matches {args.text!r}"]
    return Outcome(0, {"items": [_item(i) for i in items]}, lines)


def export(args: argparse.Namespace, home: Home) -> Outcome:
    """Every item in full (JSON with --json). What is exported is a
    plaintext copy the owner now holds: forgetting cannot reach it."""
    with Client.connect(home.root) as core:
        items = core.memory_items(args.subject or "")
    data = {"items": [_item(i) for i in items], "exported_ns": time.time_ns()}
    lines = [f"{i.id}\t{i.subject}\t{'(forgotten)' if i.forgotten else i.text}" for i in items]
    return Outcome(0, data, lines or ["nothing remembered" + _of(args.subject)])


def forget(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        done = core.forget_subject(args.subject)
    if done.seq == 0:
        line = f"{args.subject} had no memory key: nothing to forget"
    else:
        line = (
            f"{args.subject} forgotten: its key is destroyed, {done.items} item(s) can never be "
            f"read again (entry {done.seq}; no rollback brings it back)"
        )
    return Outcome(0, {"subject": args.subject, "seq": done.seq, "items": done.items}, [line])


def distill(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        done = core.distill_session(args.session, timeout=120)
    lines = [f"session {args.session}: {done.outcome} (entry {done.seq})"]
    lines += [_line(i) for i in done.items]
    data = {
        "session": args.session,
        "seq": done.seq,
        "items": [_item(i) for i in done.items],
        "refused": done.refused,
        "outcome": done.outcome,
    }
    return Outcome(0, data, lines)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of items (1..1000)")
    return value


def _of(subject: str | None) -> str:
    return f" about {subject}" if subject else ""


def add(sub: Any, command: Any) -> None:
    """The ``memory`` group (``command`` is _main's parser helper)."""
    memory = sub.add_parser(
        "memory", help="what Naga remembers: list, show, search, forget, export"
    )
    msub = memory.add_subparsers(dest="memory_command", required=True, metavar="ACTION")
    ls = command(msub, "list", list_items, "the items remembered (of one subject)")
    ls.add_argument("--subject", metavar="S", help="one subject, like webchat:owner")
    command(msub, "show", show, "one item, decrypted").add_argument("id", metavar="ID")
    se = command(msub, "search", search, "the items most relevant to TEXT")
    se.add_argument("text", metavar="TEXT")
    se.add_argument("--subject", metavar="S", help="one subject only")
    se.add_argument("--limit", type=_limit, default=20, help="most items (1..1000, default 20)")
    fo = command(msub, "forget", forget, "destroy a subject's key: irreversible")
    fo.add_argument("subject", metavar="SUBJECT")
    di = command(msub, "distill", distill, "keep what a session says worth remembering")
    di.add_argument("session", metavar="SESSION")
    ex = command(msub, "export", export, "every item in full (a plaintext copy)")
    ex.add_argument("--subject", metavar="S", help="one subject only")


__all__ = ["add", "distill", "export", "forget", "list_items", "search", "show"]
