"""``naga daemon install --user | --system``: write the systemd unit."""

from __future__ import annotations

import argparse
import os

from naga_core._home import Home
from naga_core._units import (
    SYSTEM_UNIT_DIR,
    Installed,
    install_system_unit,
    install_user_units,
    naga_executable,
)
from naga_core.cli._output import Outcome

HELP = "write the systemd unit (user: ~/.config/systemd/user; system: naga@.service)"


def configure(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--user", action="store_true", help="naga.service for `systemctl --user` (this home)"
    )
    which.add_argument(
        "--system",
        action="store_true",
        help="naga@.service, one instance per user (home: /var/lib/naga/USER unless --home)",
    )
    p.add_argument(
        "--dest",
        metavar="DIR",
        help="write the unit here instead of where systemd looks "
        f"(~/.config/systemd/user, {SYSTEM_UNIT_DIR})",
    )
    p.add_argument(
        "--naga-bin",
        metavar="PATH",
        help="the naga executable ExecStart= runs (default: this installation's)",
    )
    p.set_defaults(handler=install)


def install(args: argparse.Namespace, home: Home) -> Outcome:
    naga_bin: str = os.path.abspath(args.naga_bin) if args.naga_bin else naga_executable()
    dest: str | None = os.path.abspath(args.dest) if args.dest else None
    if args.system:
        # Only an explicit --home pins one home for every instance.
        raw: str | None = args.home
        fixed = home.root if raw else None
        result = install_system_unit(naga_bin, dest or SYSTEM_UNIT_DIR, home=fixed)
        shown_home = fixed or "/var/lib/naga/<user> (per instance)"
    else:
        result = install_user_units(home.root, naga_bin, dest)
        shown_home = home.root
    return _outcome(result, naga_bin, shown_home)


def _outcome(result: Installed, naga_bin: str, shown_home: str) -> Outcome:
    data = {
        "ok": True,
        "unit": result.unit,
        "path": result.path,
        "changed": result.changed,
        "naga_bin": naga_bin,
        "home": shown_home,
        "home_created": result.home_created,
        "next_steps": list(result.next_steps),
    }
    lines = [
        f"wrote {result.path}" if result.changed else f"{result.path} is already up to date",
        f"  ExecStart: {naga_bin} daemon start --foreground",
        f"  home: {shown_home}" + (" (created, 0700)" if result.home_created else ""),
        "next:",
        *(f"  {step}" for step in result.next_steps),
    ]
    return Outcome(0, data, lines)
