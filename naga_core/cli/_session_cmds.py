"""``naga session list|rename|archive|unarchive``: the sessions the console
lists, with the owner's titles and archive marks (each change a ledger
registration, undone by ``naga rollback``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from naga.sdk import Client
from naga_core._home import Home
from naga_core.cli._output import Outcome


def _clock(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ns / 1e9)) if ns else "-"


def list_sessions(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        found = core.sessions(args.limit, include_archived=args.all)
    rows: list[dict[str, Any]] = [
        {
            "session": s.session,
            "title": s.title,
            "archived": s.archived,
            "turns": s.turns,
            "last_time_ns": s.last_time_ns,
            "preview": s.preview,
        }
        for s in found
    ]
    lines = [
        f"{r['session']:<24} {_clock(r['last_time_ns'])}  {r['turns']:>4} turns"
        + (f"  {r['title']!r}" if r["title"] else "")
        + ("  [archived]" if r["archived"] else "")
        for r in rows
    ] or [
        "no sessions yet"
        if args.all
        else "no sessions (`naga session list --all` shows archived ones)"
    ]
    return Outcome(0, {"sessions": rows}, lines)


def _changed(session: str, seq: int | None, did: str, unchanged: str) -> Outcome:
    data: dict[str, Any] = {"session": session, "seq": seq, "changed": seq is not None}
    line = f"{did} (ledger entry {seq})" if seq is not None else unchanged
    return Outcome(0, data, [line])


def rename(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.rename_session(args.session, args.title)
    seq = resp.seq if resp.HasField("seq") else None
    did = (
        f"session {args.session} is now {resp.title!r}"
        if resp.title
        else (f"session {args.session} has no title now")
    )
    return _changed(args.session, seq, did, "unchanged: it already had that title")


def archive(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.archive_session(args.session, True)
    seq = resp.seq if resp.HasField("seq") else None
    out = _changed(
        args.session, seq, f"archived session {args.session}", "unchanged: it was archived already"
    )
    # The core answered before its distillation's model call (ADR 0050).
    out.data["distilling"] = resp.distilling
    if resp.distilling:
        out.lines.append(
            "its memories are distilled in the background (a memory.distill record in the ledger)"
        )
    return out


def unarchive(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        resp = core.archive_session(args.session, False)
    seq = resp.seq if resp.HasField("seq") else None
    return _changed(
        args.session,
        seq,
        f"session {args.session} is back in the list",
        "unchanged: it was not archived",
    )


def add(sub: Any, command: Any, session_type: Any, limit_type: Any) -> None:
    """The ``session`` group (``command`` is _main's parser helper)."""
    group = sub.add_parser("session", help="sessions: list, rename, archive, unarchive")
    ssub = group.add_subparsers(dest="session_command", required=True, metavar="ACTION")
    ls = command(ssub, "list", list_sessions, "the sessions, most recent first")
    ls.add_argument("--all", action="store_true", help="archived ones too")
    ls.add_argument("--limit", type=limit_type, default=100, help="at most (1..1000, default 100)")
    rn = command(ssub, "rename", rename, 'give a session a title ("" takes it away)')
    rn.add_argument("session", type=session_type, metavar="SESSION")
    rn.add_argument("title", metavar="TITLE")
    for name, handler, text in (
        ("archive", archive, "hide a session from the list (an effect; unarchive brings it back)"),
        ("unarchive", unarchive, "bring an archived session back to the list"),
    ):
        command(ssub, name, handler, text).add_argument(
            "session", type=session_type, metavar="SESSION"
        )


__all__ = ["add"]
