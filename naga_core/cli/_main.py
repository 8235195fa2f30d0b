"""Argument parsing and dispatch for ``naga``.

Each command group adds itself to the parser in its own ``_add_*``
function, so groups built on other branches (``daemon install``,
``doctor``) merge as one more function and one more call.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NoReturn, TypeAlias, cast

from naga.console import ConsoleError
from naga.sdk.errors import SdkError
from naga_core._home import Home
from naga_core.cli import (
    _approve_cmds,
    _audit_cmd,
    _chat_cmd,
    _console_cmds,
    _constitution_cmds,
    _daemon_cmds,
    _doctor_cmd,
    _install_cmd,
    _job_cmds,
    _kernel_cmds,
    _ledger_cmds,
    _log_cmd,
    _memory_cmds,
    _plugin_cmds,
    _replay_cmds,
    _run_cmd,
    _session_cmds,
    _skill_cmds,
    _wechat_cmds,
)
from naga_core.cli._output import Outcome
from naga_core.daemon import WEBCHAT_HOST, WEBCHAT_PORT
from naga_core.errors import NagaError

Handler = Callable[[argparse.Namespace, Home], Outcome]
# What add_subparsers returns; argparse does not export the class.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # pyright: ignore[reportPrivateUsage]


class _Parser(argparse.ArgumentParser):
    """argparse with a did-you-mean: a mistyped command or choice gets the
    closest names it could have meant. Every sub-parser is of this class
    (add_subparsers makes them so), whichever module added it."""

    def error(self, message: str) -> NoReturn:
        m = re.search(r"invalid choice: '([^']*)'", message)
        if m is not None:
            typed = m.group(1)
            names = [n for a in self._actions for n in _choices(a)]
            close = difflib.get_close_matches(typed, names, n=3, cutoff=0.6)
            meant = _SYNONYMS.get(typed) if self.prog == "naga" else None
            if meant is not None and meant in names:  # found by hand: "naga undo"
                close = [meant]
            if close:
                message = f"unknown {self._word()} {typed!r}; did you mean {_either(close)}?"
            else:
                message = f"unknown {self._word()} {typed!r} (one of: {', '.join(names)})"
        super().error(message)

    def _word(self) -> str:
        return "command" if self.prog == "naga" else "action"


#: Words a new user types for a command of another name.
_SYNONYMS = {"undo": "rollback", "revert": "rollback", "restore": "rollback"}


def _choices(action: argparse.Action) -> Iterator[str]:
    """The names a positional argument takes (sub-commands, choices)."""
    if action.option_strings:
        return
    choices: Iterable[object] = cast("Iterable[object]", action.choices or ())
    yield from (str(c) for c in choices)


def _either(names: list[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", help="the instance's home (default: $NAGA_HOME, else ~/.naga)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _command(
    sub: Subparsers,
    name: str,
    handler: Handler,
    help_text: str,
) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text)
    _common(p)
    p.set_defaults(handler=handler)
    return p


def build_parser() -> argparse.ArgumentParser:
    # Typed as the base class: the sub-parsers are _Parser too, at run time.
    parser = cast(
        argparse.ArgumentParser,
        _Parser(prog="naga", description="Naga, a personal AI agent runtime"),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _command(sub, "run", _run_cmd.run, "check the home and ledger once (see README)")
    _add_daemon(sub)
    _add_kernel(sub)
    _add_ledger(sub)
    _add_plugin(sub)
    _add_approve(sub)
    _add_replay(sub)
    _wechat_cmds.add(sub, _command)
    _skill_cmds.add(sub, _command)
    _constitution_cmds.add(sub, _command)
    _audit_cmd.add(sub, _command)
    _job_cmds.add_commands(sub, _command)
    _memory_cmds.add(sub, _command)
    _session_cmds.add(sub, _command, _session, _limit)
    _add_console(sub)
    chat = _command(sub, "chat", _chat_cmd.chat, _chat_cmd.HELP)
    chat.add_argument(
        "text", metavar="TEXT", nargs="?", default=None, help="omitted: an interactive chat"
    )
    chat.add_argument(
        "--session",
        type=_session,
        default=_chat_cmd.DEFAULT_SESSION,
        help=f"the session (default: {_chat_cmd.DEFAULT_SESSION}, the console's too)",
    )
    log = _command(sub, "log", _log_cmd.log, _log_cmd.HELP)
    log.add_argument("session", type=_session, metavar="SESSION")
    log.add_argument("--limit", type=_limit, default=200, help="entries (1..1000, default 200)")
    doctor = sub.add_parser("doctor", help=_doctor_cmd.HELP)
    _common(doctor)
    _doctor_cmd.configure(doctor)
    return parser


def _add_daemon(sub: Subparsers) -> None:
    daemon = sub.add_parser("daemon", help="start, stop and inspect naga-core")
    dsub = daemon.add_subparsers(dest="daemon_command", required=True, metavar="ACTION")
    start = _command(dsub, "start", _daemon_cmds.start, "start naga-core (detached by default)")
    start.add_argument(
        "--foreground", action="store_true", help="serve in this process until stopped"
    )
    start.add_argument(
        "--no-gateway",
        action="store_true",
        help="serve the core alone, without the WebChat gateway",
    )
    start.add_argument(
        "--gateway-port",
        type=_port,
        default=None,
        metavar="PORT",
        help=f"the WebChat console's port on {WEBCHAT_HOST} for this run; it wins over the "
        f"gateway.port setting (default {WEBCHAT_PORT}), which a core started without this "
        "flag follows, moving its gateway when the setting changes",
    )
    # Internal: the detached start's readiness pipe (see _daemon_cmds).
    start.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    _command(dsub, "stop", _daemon_cmds.stop, "stop naga-core gracefully")
    _command(dsub, "status", _daemon_cmds.status, "every process with its role and pid")
    _command(
        dsub,
        "restart-gateway",
        _daemon_cmds.restart_gateway,
        "start the WebChat gateway again on its port, its failures forgotten",
    )
    install = dsub.add_parser("install", help=_install_cmd.HELP)
    _common(install)
    _install_cmd.configure(install)


def _add_kernel(sub: Subparsers) -> None:
    history = _command(sub, "history", _kernel_cmds.history, "recent ledger entries")
    history.add_argument("--limit", type=_limit, default=20, help="entries (1..1000, default 20)")

    rollback = _command(
        sub, "rollback", _kernel_cmds.rollback, "keep entry SEQ, undo every later effect"
    )
    rollback.add_argument(
        "--to", type=_seq_or_start, required=True, metavar="SEQ", help="entry to keep (-1: all)"
    )
    rollback.add_argument("--dry-run", action="store_true", help="preview only")
    rollback.add_argument(
        "--yes", action="store_true", help="do it without asking (the preview is still shown)"
    )

    config = sub.add_parser("config", help="typed settings")
    csub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    get = _command(csub, "get", _kernel_cmds.config_get, "a setting, its rule and default")
    get.add_argument("name", metavar="NAME")
    setp = _command(csub, "set", _kernel_cmds.config_set, "set a setting (checked by its rule)")
    setp.add_argument("name", metavar="NAME")
    setp.add_argument("value", metavar="VALUE")
    reset = _command(csub, "reset", _kernel_cmds.config_reset, "back to the default")
    reset.add_argument("name", metavar="NAME")
    _command(csub, "list", _kernel_cmds.config_list, "every setting")

    trust = sub.add_parser("trust", help="the trust table")
    tsub = trust.add_subparsers(dest="trust_command", required=True, metavar="ACTION")
    show = _command(tsub, "show", _kernel_cmds.trust_show, "every peer, or one")
    show.add_argument("peer", nargs="?", metavar="PEER")
    tset = _command(tsub, "set", _kernel_cmds.trust_set, "set a peer's level (as the owner)")
    tset.add_argument("peer", metavar="PEER", help="<channel>:<id>, e.g. wechat:wxid_abc")
    tset.add_argument("level", metavar="LEVEL", help="untrusted, guest, known or owner")
    tset.add_argument("--reason", default="", help="kept in the ledger entry")


def _add_ledger(sub: Subparsers) -> None:
    ledger = sub.add_parser("ledger", help="inspect, prove and repair the ledger")
    lsub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    for name, handler, help_text in (
        ("verify", _ledger_cmds.verify, "read-only full check; exit 0 only if all holds"),
        ("recover", _ledger_cmds.recover, "cut a torn tail and report it; refuse anything else"),
        ("head", _ledger_cmds.head, "size, root and a signed checkpoint"),
        ("rebuild", _ledger_cmds.rebuild, "rebuild the SQLite projection from the log"),
    ):
        _command(lsub, name, handler, help_text)
    prove = _command(lsub, "prove", _ledger_cmds.prove, "inclusion proof of SEQ with a checkpoint")
    prove.add_argument("seq", type=_nonnegative, metavar="SEQ")


def _add_plugin(sub: Subparsers) -> None:
    plugin = sub.add_parser(
        "plugin", help="plugins: list, install, remove, enable, disable, replace, call"
    )
    psub = plugin.add_subparsers(dest="plugin_command", required=True, metavar="ACTION")
    _command(psub, "list", _plugin_cmds.list_plugins, "every installed plugin and its state")
    install = _command(
        psub, "install", _plugin_cmds.install, "show what a plugin asks; install it if approved"
    )
    install.add_argument("source", metavar="PATH", help="a plugin folder or a .tar(.gz) of one")
    install.add_argument("--yes", action="store_true", help="approve what it asks without a prompt")
    install.add_argument(
        "--allow-local-network",
        action="store_true",
        help="also approve egress to this machine or its private network (refused otherwise)",
    )
    remove = _command(psub, "remove", _plugin_cmds.remove, "uninstall a home plugin (an effect)")
    remove.add_argument("name", metavar="NAME")
    enable = _command(
        psub, "enable", _plugin_cmds.enable, "enable a plugin (or retry a failed one)"
    )
    enable.add_argument("name", metavar="NAME")
    disable = _command(psub, "disable", _plugin_cmds.disable, "disable a plugin; its worker stops")
    disable.add_argument("name", metavar="NAME")
    replace = _command(
        psub, "replace", _plugin_cmds.replace, "run another installed version of a plugin"
    )
    replace.add_argument("name", metavar="NAME")
    replace.add_argument("version", metavar="VERSION")
    call = _command(psub, "call", _plugin_cmds.call, "call one tool of an enabled plugin")
    call.add_argument("name", metavar="NAME")
    call.add_argument("tool", metavar="TOOL")
    call.add_argument(
        "arguments", nargs="?", default="", metavar="JSON", help="a JSON object (default {})"
    )
    call.add_argument("--timeout", type=_seconds, default=None, help="seconds to wait")


def _add_approve(sub: Subparsers) -> None:
    approve = sub.add_parser("approve", help="tool calls waiting for the owner: list, allow, deny")
    asub = approve.add_subparsers(dest="approve_command", required=True, metavar="ACTION")
    _command(asub, "list", _approve_cmds.list_approvals, "the tool calls waiting for approval")
    for name, handler, text in (
        ("allow", _approve_cmds.allow, "run the waiting call, once"),
        ("deny", _approve_cmds.deny, "refuse the waiting call"),
    ):
        _command(asub, name, handler, text).add_argument("id", metavar="ID")


def _add_console(sub: Subparsers) -> None:
    for name in ("console", "dashboard"):  # dashboard: OpenClaw's word for it
        _console_cmds.configure(_command(sub, name, _console_cmds.console, _console_cmds.HELP))


def _add_replay(sub: Subparsers) -> None:
    replay = sub.add_parser("replay", help=_replay_cmds.HELP)
    rsub = replay.add_subparsers(dest="replay_command", required=True, metavar="ACTION")
    export = _command(
        rsub, "export", _replay_cmds.export, "pack a session's trace and blobs into a bundle"
    )
    export.add_argument("session", metavar="SESSION")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle")
    export.add_argument(
        "--at",
        type=int,
        metavar="SIZE",
        help="export the state of the first SIZE records (core stopped; default: all)",
    )
    run = _command(rsub, "run", _replay_cmds.run, "verify a bundle and re-run its turns against it")
    run.add_argument("file", metavar="FILE")
    run.add_argument(
        "--allow-edited",
        action="store_true",
        help="replay records that no longer match their proofs (warns)",
    )


def _session(text: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.:-]{0,127}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a session name (lowercase letters, digits and _ . : -, "
            "starting with a letter or digit, at most 128)"
        )
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 600] seconds")
    return value


def _whole(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if abs(value) > 2**62:
        raise argparse.ArgumentTypeError(f"{text} is too large")
    return value


def _limit(text: str) -> int:
    value = _whole(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..1000")
    return value


def _port(text: str) -> int:
    value = _whole(text)
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port in 1024..65535")
    return value


def _nonnegative(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _seq_or_start(text: str) -> int:
    value = _whole(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"{value} is not a ledger seq (-1 undoes everything)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    as_json: bool = args.json
    handler: Handler = args.handler
    try:
        home = Home.resolve(args.home)
        outcome = handler(args, home)
    except (NagaError, SdkError, ConsoleError, OSError) as exc:
        # OSError: a file of the home that cannot be read (a directory where
        # the key file belongs, EIO, EACCES); its message names the path.
        # SdkError: the core refused, or is not running (the message says
        # how to start it). ConsoleError: the console's gateway refused.
        if as_json:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
        sys.stderr.write(f"naga: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("naga: interrupted\n")
        return 130
    try:
        return outcome.emit(as_json)
    except BrokenPipeError:
        # The reader went away (`naga history | head`): say nothing more, and
        # point stdout away from the pipe, or the interpreter's own flush at
        # exit prints a traceback.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
