"""``naga approve list | allow ID | deny ID``: the tool calls waiting for the
owner's approval, and the owner's answer from a terminal (the console's
approval card does the same). Each decision is a ledger entry; a call
nobody answers within ``tools.approval_timeout_s`` is denied. Exit status:
0 done; 1 refused (no such pending approval: decided, timed out).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from naga.sdk import Client
from naga.v1 import tools_pb2 as tlpb
from naga_core._home import Home
from naga_core.cli._output import Outcome


def _pending(p: tlpb.PendingApproval) -> dict[str, Any]:
    return {
        "id": p.id,
        "session": p.session,
        "turn_id": p.turn_id,
        "tool": p.tool,
        "risk": p.risk,
        "arguments": json.loads(p.arguments_json or "{}"),
        "asked_ns": p.asked_ns,
        "expires_ns": p.expires_ns,
    }


def list_approvals(_args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        pending = [_pending(p) for p in core.approvals()]
    now = time.time_ns()
    lines = [
        f"{p['id']}  {p['tool']} ({p['risk']})  session {p['session']}  "
        f"{max(0, (p['expires_ns'] - now) // 1_000_000_000)} s left  "
        f"{json.dumps(p['arguments'], ensure_ascii=False)}"
        for p in pending
    ] or ["no tool call is waiting for approval"]
    return Outcome(0, {"pending": pending}, lines)


def _decide(args: argparse.Namespace, home: Home, allow: bool) -> Outcome:
    with Client.connect(home.root) as core:
        seq = core.decide_approval(args.id, allow)
    verb = "allowed (once)" if allow else "denied"
    return Outcome(
        0, {"id": args.id, "allowed": allow, "seq": seq}, [f"{args.id} {verb}: entry {seq}"]
    )


def allow(args: argparse.Namespace, home: Home) -> Outcome:
    return _decide(args, home, True)


def deny(args: argparse.Namespace, home: Home) -> Outcome:
    return _decide(args, home, False)


__all__ = ["allow", "deny", "list_approvals"]
