"""``naga chat "text" [--session ID] [--json]``: one turn through the core.

The reply is written to the terminal as it arrives (text deltas; tool calls
as one line each on stderr); with ``--json`` one object at the end. Exit
status: 0 answered; 1 the turn ended with an error (its message says what
happened and what to do; the session stays usable).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from naga_core._home import Home
from naga_core.cli._output import Outcome

HELP = "send one message to the agent and print its reply"
#: Session of `naga chat` without --session.
DEFAULT_SESSION = "cli"

_KINDS = {
    tpb.TURN_ERROR_KIND_MODEL: "model",
    tpb.TURN_ERROR_KIND_BUDGET: "budget",
    tpb.TURN_ERROR_KIND_STEPS: "steps",
    tpb.TURN_ERROR_KIND_ABORTED: "aborted",
    tpb.TURN_ERROR_KIND_EXECUTOR: "executor",
    tpb.TURN_ERROR_KIND_INTERNAL: "internal",
}


def chat(args: argparse.Namespace, home: Home) -> Outcome:
    as_json: bool = args.json
    data: dict[str, Any] = {"ok": False, "session": args.session, "tools": []}
    streamed = False
    with Client.connect(home.root) as core:
        for event in core.run_turn(args.session, args.text, uuid.uuid4().hex, timeout=None):
            kind = event.WhichOneof("kind")
            if kind == "accepted":
                data["turn_id"] = event.accepted.turn_id
                data["message_seq"] = event.accepted.message_seq
            elif kind == "delta" and not as_json:
                sys.stdout.write(event.delta.text)
                sys.stdout.flush()
                streamed = True
            elif kind == "tool_started" and not as_json:
                sys.stderr.write(f"[tool {event.tool_started.tool}]\n")
            elif kind == "tool_finished":
                f = event.tool_finished
                data["tools"].append({"call_id": f.call_id, "ok": f.ok, "error": f.error})
            elif kind == "final":
                data.update(_final(event.final))
            elif kind == "error":
                data["error"] = event.error.message
                data["error_kind"] = _KINDS.get(event.error.kind, "internal")
                data["partial_text"] = event.error.partial_text
    lines: list[str] = []
    if data["ok"]:
        # Deltas carry every text the model produced; the answer is the last.
        lines = [""] if streamed else [data["text"]]
    else:
        sys.stderr.write(f"naga: {data.get('error', 'the turn ended without an answer')}\n")
    return Outcome(0 if data["ok"] else 1, data, lines)


def _final(f: tpb.TurnFinal) -> dict[str, Any]:
    return {
        "ok": True,
        "text": f.text,
        "model_calls": f.model_calls,
        "tool_calls": f.tool_calls,
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "reply_seq": f.reply_seq,
    }


__all__ = ["DEFAULT_SESSION", "HELP", "chat"]
