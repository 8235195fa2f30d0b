"""``naga log SESSION [--limit N] [--json]``: a conversation as the ledger
holds it: messages and replies with their times, and between them the
tool calls, the turns that ended without an answer (errors, aborts) and
the core's notes (a job's reply WeChat did not carry), which the session's
plain history leaves out. The conversation is append-only: what a rollback
in force undid is shown, marked ``[undone]`` (as the console strikes it
through).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from google.protobuf.message import DecodeError

from naga.rollbacks import undone_ranges
from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import turn_pb2 as tpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused

HELP = "print a session's conversation: messages, replies, tool calls and errors"
#: Records read past the first entry, at most, for the tool calls and errors.
_SCAN = 20000
_PAGE = 512
_ERROR_KINDS = {
    tpb.TURN_ERROR_KIND_MODEL: "model",
    tpb.TURN_ERROR_KIND_BUDGET: "budget",
    tpb.TURN_ERROR_KIND_STEPS: "steps",
    tpb.TURN_ERROR_KIND_ABORTED: "aborted",
    tpb.TURN_ERROR_KIND_EXECUTOR: "executor",
    tpb.TURN_ERROR_KIND_INTERNAL: "internal",
}


def _clock(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / 1e9))


def log(args: argparse.Namespace, home: Home) -> Outcome:
    session: str = args.session
    with Client.connect(home.root) as core:
        known = [s.session for s in core.sessions(1000, include_archived=True)]
        if session not in known:
            listed = ", ".join(known[:10]) if known else "none yet"
            raise CommandRefused(f"no session named {session!r} (sessions: {listed})")
        entries = core.session_history(session, args.limit)
        extra = _details(core, session, entries[0].seq) if entries else []
        dead = _undone(core, entries[0].seq) if entries else []
    rows: list[dict[str, Any]] = [
        {
            "seq": e.seq,
            "time_ns": e.time_ns,
            "role": "user" if e.role == tpb.HISTORY_ROLE_USER else "assistant",
            "text": e.text,
            "peer": e.peer,
            "turn": e.turn_id,
        }
        for e in entries
    ]
    rows = sorted(rows + extra, key=lambda r: r["seq"])
    for r in rows:
        r["undone"] = any(kept < r["seq"] < at for kept, at in dead)
    lines = [_line(r) for r in rows] or [f"session {session} has no messages yet"]
    return Outcome(0, {"session": session, "entries": rows}, lines)


def _details(core: Client, session: str, start: int) -> list[dict[str, Any]]:
    """The session's tool calls, errors and notes from ``start`` on."""
    out: list[dict[str, Any]] = []
    at, read = start, 0
    while read < _SCAN:
        page = core.records(at, _PAGE)
        if not page:
            break
        read += len(page)
        at = page[-1].seq + 1
        for rec in page:
            if rec.kind not in ("turn.tool", "turn.error", "turn.note"):
                continue
            try:
                body = apb.TurnRecord.FromString(rec.payload)
            except DecodeError:
                continue  # `naga ledger verify` judges records
            if body.session != session:
                continue
            row: dict[str, Any] = {
                "seq": rec.seq,
                "time_ns": rec.timestamp_ns,
                "turn": body.turn_id,
            }
            if rec.kind == "turn.note":
                row |= {"role": "note", "text": body.text}
            elif rec.kind == "turn.tool":
                row |= {
                    "role": "tool",
                    "tool": body.tool,
                    "arguments": body.arguments_json,
                    "ok": body.ok,
                    "result": body.result_json,
                    "error": body.error,
                }
            else:
                row |= {
                    "role": "error",
                    "kind": _ERROR_KINDS.get(body.error_kind, "internal"),
                    "message": body.error_message,
                    "partial": body.text,
                }
            out.append(row)
    return out


def _undone(core: Client, oldest: int) -> list[tuple[int, int]]:
    """The (kept, rollback) seq ranges that rollbacks in force undid, back
    to ``oldest``: the last rollback undid what lies between its target and
    itself; before its target, the rollbacks in force then, and so on (a
    rolled-back rollback lies inside a range). As naga_gateway's console."""
    rollbacks: list[tuple[int, int]] = []  # (seq, rollback_to), newest first
    before: int | None = None
    for _ in range(_SCAN // _PAGE):
        page = core.history(_PAGE, before)
        rollbacks += [
            (e.seq, e.rollback_to) for e in page.entries if e.form == kpb.EFFECT_FORM_ROLLBACK
        ]
        if not page.more or page.next_before_seq <= oldest:
            break
        before = page.next_before_seq
    return undone_ranges(rollbacks, oldest)


def _line(r: dict[str, Any]) -> str:
    return _text(r) + ("  [undone]" if r.get("undone") else "")


def _text(r: dict[str, Any]) -> str:
    when = _clock(r["time_ns"])
    role = r["role"]
    if role == "user":
        return f"[{when}] you: {r['text']}"
    if role == "assistant":
        return f"[{when}] naga: {r['text']}"
    if role == "note":
        return f"[{when}]   ({r['text']})"
    if role == "tool":
        outcome = f"-> {r['result']}" if r["ok"] else f"failed: {r['error']}"
        return f"[{when}]   tool {r['tool']} {r['arguments'] or '{}'} {outcome}"
    partial = f"{r['partial']} " if r["partial"] else ""
    if r["kind"] == "aborted":
        return f"[{when}] naga: {partial}[stopped]"
    return f"[{when}] naga: {partial}[error ({r['kind']}): {r['message']}]"


__all__ = ["HELP", "log"]
