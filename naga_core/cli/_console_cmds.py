"""``naga console [--revoke] [--json]`` (alias ``naga dashboard``): a
one-time login link for the WebChat console, or the end of every login.

The gateway takes no one for the owner by address (docs/adr/0007-console-
owner-proof.md). This command proves the owner to the core the way every
owner command does (the 0600 credential in ``$NAGA_HOME/run``, over the
0600 socket) and gets a login code good once, for a few minutes; opening
the link logs that browser in (a cookie the page cannot read) and the code
leaves the address bar. The link is printed, never passed to a browser on
its command line, where every local user could read it in ``ps``.

``--revoke`` ends every console login at once (the core writes a new
console key and restarts its gateway, so open consoles drop too).

Exit status: 0 done; 1 refused, or the core runs no gateway (the code is
still printed with ``--json``, for a gateway started later).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga_core._home import Home
from naga_core.cli._output import Outcome

HELP = "a one-time login link for the WebChat console (--revoke: end every login)"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--revoke",
        action="store_true",
        help="end every console login (open consoles drop; log in again with `naga console`)",
    )
    p.add_argument("--reason", default="", help="with --revoke: kept in the ledger entry")


def console(args: argparse.Namespace, home: Home) -> Outcome:
    if args.revoke:
        return _revoke(home, args.reason)
    with Client.connect(home.root) as core:
        login = core.console_login()
    minutes = max(1, round((login.expires_ns - time.time_ns()) / 60e9))
    data: dict[str, Any] = {
        "ok": bool(login.url),
        "url": login.url or None,
        "code": login.code,
        "expires_ns": login.expires_ns,
    }
    if not login.url:
        return Outcome(
            1,
            data,
            [
                "the core runs no gateway (started with --no-gateway, or it is down: "
                "`naga daemon status` says which), so there is no console to log in to"
            ],
        )
    return Outcome(
        0,
        data,
        [
            f"Open the WebChat console (a one-time link, good for {minutes} minutes):",
            f"  {login.url}",
        ],
    )


def _revoke(home: Home, reason: str) -> Outcome:
    with Client.connect(home.root) as core:
        answer = core.revoke_console_sessions(reason or "naga console --revoke")
    lines = ["every console login has ended; `naga console` gives a new login link"]
    if answer.gateway_restarted:
        lines.append("the gateway was restarted: open consoles dropped")
    return Outcome(
        0, {"ok": True, "revoked": True, "gateway_restarted": answer.gateway_restarted}, lines
    )


def login_line(home: Home, url: str) -> str:
    """What ``naga daemon start`` prints for its console: the one-time login
    link on a terminal; elsewhere (systemd's journal, a log file) the bare
    address and how to log in, so no live code lands in a log."""
    if not url:
        return ""
    if not sys.stdout.isatty():
        return f"WebChat console: {url} (run `naga console` for a login link)"
    try:
        with Client.connect(home.root) as core:
            link = core.console_login().url
    except SdkError:
        link = ""
    if not link:
        return f"WebChat console: {url} (run `naga console` for a login link)"
    return f"WebChat console (a one-time login link; `naga console` makes another): {link}"


__all__ = ["HELP", "configure", "console", "login_line"]
