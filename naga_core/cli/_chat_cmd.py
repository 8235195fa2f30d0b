"""``naga chat "text" [--session ID] [--json]``: one turn, through the
gateway when the core runs one (as the WebChat console would send it, with
the owner's proof: a one-time login code the core gives this CLI over its
0600 socket, traded for the owner's cookie), else straight to the core.
``naga chat`` without text is an interactive chat
(:mod:`naga_core.cli._chat_repl`).

The reply is written to the terminal as it arrives (text deltas; tool calls
as one line each on stderr, and a call that waits for the owner's approval
with the ``naga approve`` commands that answer it); with ``--json`` one
object at the end. Exit
status: 0 answered; 1 the turn ended with an error (its message says what
happened and what to do; the session stays usable).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import time
import urllib.parse
import uuid
from types import ModuleType
from typing import Any

from naga.console import ConsoleClient, ConsoleError
from naga.constants import MAX_MESSAGE_BYTES
from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused

HELP = "send one message to the agent and print its reply"
#: Session of `naga chat` without --session: the console's default too, so
#: a chat begun in one goes on in the other.
DEFAULT_SESSION = "main"
#: The gateway's and the core's limit on one message, in UTF-8 bytes.
MAX_TEXT = MAX_MESSAGE_BYTES

_KINDS = {
    tpb.TURN_ERROR_KIND_MODEL: "model",
    tpb.TURN_ERROR_KIND_BUDGET: "budget",
    tpb.TURN_ERROR_KIND_STEPS: "steps",
    tpb.TURN_ERROR_KIND_ABORTED: "aborted",
    tpb.TURN_ERROR_KIND_EXECUTOR: "executor",
    tpb.TURN_ERROR_KIND_INTERNAL: "internal",
}


def approval_line(
    approval_id: str, tool: str, risk: str, arguments_json: str, expires_ns: int
) -> str:
    """What the terminal shows while a call waits for the owner: without it
    a chat only seems to hang until the approval times out into a deny."""
    left = max(0, round((expires_ns - time.time_ns()) / 1e9))
    return (
        f"[{tool} ({risk}) waits for your approval: {arguments_json}\n"
        f" from another terminal: naga approve allow {approval_id} | "
        f"naga approve deny {approval_id} (no answer in {left} s is a deny)]\n"
    )


def failed_line(tool: str, error: str) -> str:
    """A call that failed, in the terminal: ``[tool X]`` alone read as if it
    ran (found by hand: a call refused as not offered looked done)."""
    if error.startswith(f"tool {tool} "):  # "tool X failed: ...", "tool X was not run: ..."
        return f"[{error}]\n"
    return f"[tool {tool} failed: {error}]\n"


def _gateway_of(core: Client) -> tuple[str, int] | None:
    """Where the core's gateway serves, if it runs one."""
    for row in core.status().processes:
        if row.role == "gateway" and row.state == cpb.PROCESS_STATE_RUNNING and row.detail:
            url = urllib.parse.urlsplit(row.detail)
            if url.hostname and url.port:
                return url.hostname, url.port
    return None


def too_long(text: str) -> str | None:
    """What to say of a message past the limit (the core counts UTF-8 bytes)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= MAX_TEXT:
        return None
    return f"the message is {size} bytes (UTF-8); at most {MAX_TEXT}"


def check_text(text: str) -> None:
    if not text.strip():
        raise CommandRefused(
            "the message is empty: give some text, or run `naga chat` without text "
            "for an interactive chat"
        )
    refusal = too_long(text)
    if refusal is not None:
        raise CommandRefused(refusal)


def chat(args: argparse.Namespace, home: Home) -> Outcome:
    if args.text is None:
        if args.json:
            raise CommandRefused('--json needs the message as TEXT: naga chat --json "hello"')
        return _repl(args, home)
    check_text(args.text)
    with Client.connect(home.root) as core:
        gateway = _gateway_of(core)
        code = core.console_login().code if gateway is not None else ""
    if gateway is not None:
        # A refusal (a login refused, the text too long, a busy session)
        # is an answer, not a traceback: _through_gateway says it.
        return _through_gateway(args, *gateway, code)
    return _through_core(args, home)


def _through_gateway(args: argparse.Namespace, host: str, port: int, code: str) -> Outcome:
    data: dict[str, Any] = {"ok": False, "session": args.session, "tools": [], "via": "gateway"}
    streamed = False
    try:
        streamed = _stream_gateway(args, host, port, code, data)
    except ConsoleError as exc:  # refused, or the gateway went away: say so
        data["error"] = str(exc)
    return _outcome(data, streamed)


def _stream_gateway(
    args: argparse.Namespace, host: str, port: int, code: str, data: dict[str, Any]
) -> bool:
    """Run the turn through the gateway into ``data``; whether text was
    streamed to the terminal."""
    as_json: bool = args.json
    streamed = False
    tools: dict[str, str] = {}  # call -> tool, from tool.started
    with ConsoleClient.open(host, port, code=code) as gw:
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
            elif event == "tool.started":
                tools[str(body.get("call", ""))] = str(body.get("tool", "?"))
                if not as_json:
                    sys.stderr.write(f"[tool {body.get('tool', '?')}]\n")
            elif event == "tool.finished":
                call, ok, error = str(body.get("call", "")), bool(body.get("ok")), body.get("error")
                data["tools"].append({"call_id": call, "ok": ok, "error": str(error or "")})
                if not ok and not as_json:
                    sys.stderr.write(failed_line(tools.get(call, "?"), str(error or "")))
            elif event == "tool.approval" and not as_json:
                sys.stderr.write(
                    approval_line(
                        str(body.get("id", "?")),
                        str(body.get("tool", "?")),
                        str(body.get("risk", "?")),
                        str(body.get("arguments", "")),
                        int(body.get("expires_ns", 0)),
                    )
                )
            elif event == "turn.final":
                data.update(ok=True, text=body.get("text", ""), reply_seq=body.get("reply_seq"))
            elif event == "turn.error":
                data["error"] = body.get("message", "the turn failed")
                data["error_kind"] = body.get("kind", "internal")
                data["partial_text"] = body.get("partial", "")
    return streamed


def _through_core(args: argparse.Namespace, home: Home) -> Outcome:
    as_json: bool = args.json
    data: dict[str, Any] = {"ok": False, "session": args.session, "tools": [], "via": "core"}
    streamed = False
    tools: dict[str, str] = {}  # call -> tool, from tool_started
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
            elif kind == "tool_started":
                tools[event.tool_started.call_id] = event.tool_started.tool
                if not as_json:
                    sys.stderr.write(f"[tool {event.tool_started.tool}]\n")
            elif kind == "approval" and not as_json:
                a = event.approval
                sys.stderr.write(
                    approval_line(a.id, a.tool, a.risk, a.arguments_json, a.expires_ns)
                )
            elif kind == "tool_finished":
                f = event.tool_finished
                data["tools"].append({"call_id": f.call_id, "ok": f.ok, "error": f.error})
                if not f.ok and not as_json:
                    sys.stderr.write(failed_line(tools.get(f.call_id, "?"), f.error))
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


# --- the interactive chat ------------------------------------------------------------

REPL_HELP = (
    "naga chat, session {session}. Enter sends; end a line with \\ to continue it on the next; "
    "Ctrl-C stops a reply; Ctrl-D or /exit leaves."
)
_PROMPT = "you> "
_MORE = "...> "


def _readline(home: Home) -> tuple[ModuleType | None, str]:
    """The readline module with this home's chat history loaded, if the
    platform has one; and the history file."""
    path = os.path.join(home.root, "chat_history")
    try:
        readline = importlib.import_module("readline")  # not on every platform
    except ImportError:  # pragma: no cover
        return None, path
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    return readline, path


def _read_message() -> str:
    """One message: a line, or lines ending with a backslash and the next."""
    line = input(_PROMPT)
    while line.endswith("\\"):
        line = line[:-1] + "\n" + input(_MORE)
    return line


def _repl(args: argparse.Namespace, home: Home) -> Outcome:
    session: str = args.session
    readline, history = _readline(home)
    sys.stdout.write(REPL_HELP.format(session=session) + "\n")
    turns = 0
    while True:
        try:
            text = _read_message()
        except EOFError:
            sys.stdout.write("\n")
            break
        except KeyboardInterrupt:
            sys.stdout.write("\n")  # Ctrl-C at the prompt drops the line
            continue
        if text.strip() in ("/exit", "/quit"):
            break
        if not text.strip():
            continue
        refusal = too_long(text)
        if refusal is not None:
            sys.stderr.write(f"naga: {refusal}\n")
            continue
        turns += 1
        if readline is not None and not sys.stdin.isatty():
            readline.add_history(text)  # input() adds a terminal's lines itself
        try:
            _one_turn(args, home, text).emit(False)
        except KeyboardInterrupt:
            _stop(home, session)
        except (SdkError, ConsoleError) as exc:
            sys.stderr.write(f"naga: {exc}\n")
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.write_history_file(history)
    return Outcome(0, {"ok": True, "session": session, "turns": turns}, [])


def _one_turn(args: argparse.Namespace, home: Home, text: str) -> Outcome:
    one = argparse.Namespace(**{**vars(args), "text": text, "json": False})
    with Client.connect(home.root) as core:
        gateway = _gateway_of(core)
        code = core.console_login().code if gateway is not None else ""
    if gateway is not None:
        return _through_gateway(one, *gateway, code)
    return _through_core(one, home)


def _stop(home: Home, session: str) -> None:
    """Ctrl-C during a reply: stop the turn (the text so far stays recorded
    with the abort) and go back to the prompt."""
    try:
        with Client.connect(home.root) as core:
            core.abort_turn(session)
        sys.stderr.write("\n[stopped]\n")
    except SdkError as exc:
        sys.stderr.write(f"\n[stopped here; the core said: {exc}]\n")


__all__ = ["DEFAULT_SESSION", "HELP", "MAX_TEXT", "REPL_HELP", "chat", "check_text"]
