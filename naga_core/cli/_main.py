"""Argument parsing and dispatch for ``naga``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from naga_core._home import Home
from naga_core.cli import _doctor_cmd, _install_cmd, _ledger_cmds, _run_cmd
from naga_core.cli._output import Outcome
from naga_core.errors import LedgerCorrupt, LedgerLocked, NagaError

Handler = Callable[[argparse.Namespace, Home], Outcome]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", help="the instance's home (default: $NAGA_HOME, else ~/.naga)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="naga", description="Naga, a personal AI agent runtime")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="start what Naga has so far (see README)")
    _common(run)
    run.set_defaults(handler=_run_cmd.run)

    ledger = sub.add_parser("ledger", help="inspect, prove and repair the ledger")
    lsub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    for name, handler, help_text in (
        ("verify", _ledger_cmds.verify, "read-only full check; exit 0 only if all holds"),
        ("recover", _ledger_cmds.recover, "cut a torn tail and report it; refuse anything else"),
        ("head", _ledger_cmds.head, "size, root and a signed checkpoint"),
        ("rebuild", _ledger_cmds.rebuild, "rebuild the SQLite projection from the log"),
    ):
        p = lsub.add_parser(name, help=help_text)
        _common(p)
        p.set_defaults(handler=handler)
    prove = lsub.add_parser("prove", help="inclusion proof of record SEQ with a checkpoint")
    prove.add_argument("seq", type=_nonnegative, metavar="SEQ")
    _common(prove)
    prove.set_defaults(handler=_ledger_cmds.prove)

    _add_daemon_commands(sub.add_parser("daemon", help="install and run the core daemon"))
    doctor = sub.add_parser("doctor", help=_doctor_cmd.HELP)
    _common(doctor)
    _doctor_cmd.configure(doctor)
    return parser


def _add_daemon_commands(daemon: argparse.ArgumentParser) -> None:
    """``naga daemon ACTION``; each action's module configures its parser."""
    actions = daemon.add_subparsers(dest="daemon_command", required=True, metavar="ACTION")
    install = actions.add_parser("install", help=_install_cmd.HELP)
    _common(install)
    _install_cmd.configure(install)


def _nonnegative(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    as_json: bool = args.json
    handler: Handler = args.handler
    try:
        home = Home.resolve(args.home)
        outcome = handler(args, home)
    except (LedgerCorrupt, LedgerLocked, NagaError, OSError) as exc:
        # OSError: a file of the home that cannot be read (a directory where
        # the key file belongs, EIO, EACCES); its message names the path.
        if as_json:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
        sys.stderr.write(f"naga: {exc}\n")
        return 1
    return outcome.emit(as_json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
