"""``naga run``: a one-shot check of the home, without starting anything.

It creates the home, opens (and so recovers) the ledger, brings the
projection up to date and says how to start the core (``make run`` runs
``naga daemon start --foreground``). While the core runs it owns the
ledger, so this refuses and points at ``naga daemon status``.
"""

from __future__ import annotations

import argparse

from naga_core._home import Home
from naga_core._store import open_ledger, projection_path
from naga_core.cli._output import Outcome
from naga_core.daemon import running_pid
from naga_core.errors import ConfigError
from naga_core.ledger import Projection


def run(_args: argparse.Namespace, home: Home) -> Outcome:
    pid = running_pid(home)
    if pid is not None:
        raise ConfigError(
            f"naga-core (pid {pid}) is running on {home.root} and owns its ledger; "
            "see `naga daemon status`"
        )
    with open_ledger(home, create=True) as ledger:
        h = ledger.head()
        projection = Projection.open(projection_path(home))
        try:
            caught = projection.catch_up(ledger)
        finally:
            projection.close()
        report = ledger.report
    lines = [
        f"Naga home: {home.root}",
        *(f"ledger: {line}" for line in report.lines()),
        f"ledger root: {h.root.hex()}",
        f"projection: up to date ({caught.applied} records applied"
        + (f", rebuilt: {caught.reason})" if caught.rebuilt else ")"),
        "",
        "Start the core with `naga daemon start` (or `make run`, which keeps it in the",
        "foreground): it serves the WebChat console and prints its URL (`naga daemon",
        'status` shows it again); `naga chat "hello"` talks to the agent from here.',
    ]
    data = {
        "home": home.root,
        "records": h.size,
        "root": h.root.hex(),
        "webchat_url": None,
        "daemon": "not running (start: naga daemon start)",
    }
    return Outcome(0, data, lines)
