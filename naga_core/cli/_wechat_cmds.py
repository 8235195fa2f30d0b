"""``naga wechat bind [--json] | list | status [ID] | unbind ID``: the WeChat
bindings of the running core.

``bind`` starts a QR login: the code is drawn in the terminal (generated
here, from the login URL; nothing is fetched) with the URL beside it, and
the command waits while the phone scans and confirms (a new code when one
expires; the number the phone shows is asked for when the server wants
it), then prints the bot id. With ``--json`` each status is one JSON line.
Exit status: 0 bound / found / unbound; 1 failed or not found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from naga.constants import WECHAT_SEND_MAX_BYTES as MAX_SEND_BYTES
from naga.sdk import Client
from naga.v1 import wechat_pb2 as wpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused

_STATUS = {
    wpb.WECHAT_BINDING_STATUS_ACTIVE: "active",
    wpb.WECHAT_BINDING_STATUS_PAUSED: "paused",
}
_SAYS = {
    "wait": "waiting for the scan",
    "scaned": "scanned: confirm on the phone",
    "need_verifycode": "the phone shows a number: type it here",
    "expired": "the code expired: scan the new one",
}


def _binding(b: wpb.WechatBinding) -> dict[str, Any]:
    return {
        "bot_id": b.bot_id,
        "owner_user_id": b.owner_user_id,
        "status": _STATUS.get(b.status, "unknown"),
        "detail": b.detail,
        "since_ns": b.since_ns,
        "received": b.received,
        "sent": b.sent,
        "last_error": b.last_error,
        "polling": b.polling,
    }


def _line(b: dict[str, Any]) -> str:
    state = b["status"] + (" (polling)" if b["polling"] else "")
    counts = f"in {b['received']} out {b['sent']}"
    return f"{b['bot_id']:<28} {state:<18} owner {b['owner_user_id']}  {counts}"


def _say(as_json: bool, answer: wpb.WechatBindResponse, *, draw: bool) -> None:
    if as_json:
        row = {"status": answer.status, "login_id": answer.login_id, "url": answer.url}
        if answer.detail:
            row["detail"] = answer.detail
        sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        sys.stdout.flush()
        return
    if draw:
        import segno  # noqa: PLC0415 - only to draw a QR code: kept out of every core start

        segno.make(answer.url, error="m").terminal(out=sys.stdout, compact=True)
        sys.stdout.write(f"scan it with WeChat, or open: {answer.url}\n")
    sys.stdout.write(f"{_SAYS.get(answer.status, answer.status)}\n")
    sys.stdout.flush()


def bind(args: argparse.Namespace, home: Home) -> Outcome:
    as_json = bool(args.json)
    with Client.connect(home.root) as core:
        answer = core.wechat_bind()
        if answer.status == "failed":
            return Outcome(
                1, {"status": "failed", "detail": answer.detail}, [f"failed: {answer.detail}"]
            )
        _say(as_json, answer, draw=True)
        login, last, code = answer.login_id, answer.status, ""
        while True:
            answer = core.wechat_bind(login, verify_code=code)
            code = ""
            if answer.status in ("confirmed", "failed"):
                break
            if answer.status != last or answer.status == "expired":
                _say(as_json, answer, draw=answer.status == "expired")
                last = answer.status
            if answer.status == "need_verifycode":
                sys.stderr.write("the number on the phone: ")
                sys.stderr.flush()
                code = sys.stdin.readline().strip()
    if answer.status == "failed":
        return Outcome(
            1, {"status": "failed", "detail": answer.detail}, [f"failed: {answer.detail}"]
        )
    data: dict[str, Any] = {"status": "confirmed", "detail": answer.detail}
    lines = [answer.detail or "bound"]
    if answer.HasField("binding"):
        data["binding"] = _binding(answer.binding)
        data["bot_id"] = answer.binding.bot_id
        lines = [f"bound: bot {answer.binding.bot_id} (owner {answer.binding.owner_user_id})"]
    return Outcome(0, data, lines)


def list_bindings(_args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        found = [_binding(b) for b in core.wechat_bindings()]
    lines = [_line(b) for b in found] or ["no WeChat bindings (naga wechat bind)"]
    return Outcome(0, {"bindings": found}, lines)


def status(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        found = [_binding(b) for b in core.wechat_bindings()]
    if args.bot_id:
        found = [b for b in found if b["bot_id"] == args.bot_id]
        if not found:
            return Outcome(1, {"bindings": []}, [f"no binding {args.bot_id}"])
    lines: list[str] = []
    for b in found:
        lines.append(_line(b))
        if b["status"] == "paused":
            lines.append(f"  PAUSED: {b['detail']}")
        if b["last_error"]:
            lines.append(f"  last error: {b['last_error']}")
    return Outcome(0, {"bindings": found}, lines or ["no WeChat bindings (naga wechat bind)"])


def unbind(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        seq = core.wechat_unbind(args.bot_id)
    return Outcome(
        0, {"bot_id": args.bot_id, "seq": seq}, [f"unbound {args.bot_id} (ledger entry {seq})"]
    )


def send(args: argparse.Namespace, home: Home) -> Outcome:
    path: str = args.file
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SEND_BYTES + 1)
    except OSError as exc:
        raise CommandRefused(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_SEND_BYTES:
        raise CommandRefused(f"{path} is larger than {MAX_SEND_BYTES} bytes, the most sent at once")
    name = os.path.basename(path)
    with Client.connect(home.root) as core:
        done = core.wechat_send_file(args.bot_id, args.user, data, file_name=name, image=args.image)
    kind = "image" if args.image else "file"
    return Outcome(
        0,
        {"seq": done.seq, "sha256": done.sha256, "size": done.size},
        [f"sent the {kind} {name} ({done.size} bytes) to {args.user} (ledger entry {done.seq})"],
    )


def add(sub: Any, command: Any) -> None:
    """The ``wechat`` group (``command`` is _main's parser helper)."""
    wechat = sub.add_parser("wechat", help="WeChat bindings: bind, list, status, unbind")
    wsub = wechat.add_subparsers(dest="wechat_command", required=True, metavar="ACTION")
    command(wsub, "bind", bind, "bind a WeChat account: scan the QR code it shows")
    command(wsub, "list", list_bindings, "every binding and its state")
    st = command(wsub, "status", status, "a binding's state (all without ID); paused ones say why")
    st.add_argument("bot_id", nargs="?", default="", metavar="ID")
    un = command(wsub, "unbind", unbind, "remove a binding (its credentials are deleted)")
    un.add_argument("bot_id", metavar="ID")
    sn = command(wsub, "send", send, "send a file (or --image) to a user who wrote to a binding")
    sn.add_argument("bot_id", metavar="ID")
    sn.add_argument("user", metavar="USER")
    sn.add_argument("file", metavar="FILE")
    sn.add_argument("--image", action="store_true", help="send it as an image")
