"""``naga chat "text" [--session ID] [--json]``: one turn, through the
gateway when the core runs one (as the WebChat console would send it: the
loopback owner), else straight to the core.

The reply is written to the terminal as it arrives (text deltas; tool calls
as one line each on stderr); with ``--json`` one object at the end. Exit
status: 0 answered; 1 the turn ended with an error (its message says what
happened and what to do; the session stays usable).
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
import uuid
from typing import Any

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_gateway.client import ConsoleClient

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


def _gateway_of(core: Client) -> tuple[str, int] | None:
    """Where the core's gateway serves, if it runs one."""
    for row in core.status().processes:
        if row.role == "gateway" and row.state == cpb.PROCESS_STATE_RUNNING and row.detail:
            url = urllib.parse.urlsplit(row.detail)
            if url.hostname and url.port:
                return url.hostname, url.port
    return None


def chat(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        gateway = _gateway_of(core)
    if gateway is not None:
        return _through_gateway(args, *gateway)
    return _through_core(args, home)


def _through_gateway(args: argparse.Namespace, host: str, port: int) -> Outcome:
    as_json: bool = args.json
    data: dict[str, Any] = {"ok": False, "session": args.session, "tools": [], "via": "gateway"}
    streamed = False
    with ConsoleClient.open(host, port) as gw:
        for frame in gw.turn(args.session, args.text, uuid.uuid4().hex):
            event: object = frame.get("event")
            body: dict[str, Any] = frame.get("data") or {}
            if event == "turn.accepted":
                data["turn_id"] = body.get("turn")
                data["message_seq"] = body.get("message_seq")
            elif event == "turn.delta" and not as_json:
                sys.stdout.write(str(body.get("text", "")))
                sys.stdout.flush()
                streamed = True
            elif event == "tool.started" and not as_json:
                sys.stderr.write(f"[tool {body.get('tool', '?')}]\n")
            elif event == "turn.final":
                data.update(ok=True, text=body.get("text", ""), reply_seq=body.get("reply_seq"))
            elif event == "turn.error":
                data["error"] = body.get("message", "the turn failed")
                data["error_kind"] = body.get("kind", "internal")
                data["partial_text"] = body.get("partial", "")
    return _outcome(data, streamed)


def _through_core(args: argparse.Namespace, home: Home) -> Outcome:
    as_json: bool = args.json
    data: dict[str, Any] = {"ok": False, "session": args.session, "tools": [], "via": "core"}
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
    return _outcome(data, streamed)


def _outcome(data: dict[str, Any], streamed: bool) -> Outcome:
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
