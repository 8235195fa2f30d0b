"""``naga doctor``: one line per check, exit 1 if any fails."""

from __future__ import annotations

import argparse

from naga_core._doctor import checks_for, run_checks
from naga_core._home import Home
from naga_core.cli._output import Outcome

HELP = "self-check of the home, keys, ledger and core; one line per check"


def configure(p: argparse.ArgumentParser) -> None:
    p.set_defaults(handler=doctor)


def doctor(_args: argparse.Namespace, home: Home) -> Outcome:
    results = run_checks(checks_for(home))
    failed = [r for r in results if not r.ok]
    data = {
        "ok": not failed,
        "home": home.root,
        "checks": [{"name": r.name, "ok": r.ok, "detail": r.detail} for r in results],
    }
    summary = (
        f"{len(failed)} of {len(results)} checks failed"
        if failed
        else f"all {len(results)} checks passed"
    )
    return Outcome(1 if failed else 0, data, [*(r.line() for r in results), summary])
