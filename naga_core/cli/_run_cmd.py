"""``naga run``: what ``make run`` starts while the daemon is not built yet.

It creates the home, opens (and so recovers) the ledger, brings the
projection up to date and says plainly what is and is not there yet.
"""

from __future__ import annotations

import argparse

from naga_core._home import Home
from naga_core._store import open_ledger, projection_path
from naga_core.cli._output import Outcome
from naga_core.ledger._projection import Projection


def run(_args: argparse.Namespace, home: Home) -> Outcome:
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
        "What exists so far is the durable ledger (try: naga ledger verify, naga ledger head).",
        "The daemon, the agent and the WebChat console are not built yet, so there is no",
        "WebChat URL to open; see README.md, 'Status'.",
    ]
    data = {
        "home": home.root,
        "records": h.size,
        "root": h.root.hex(),
        "webchat_url": None,
        "daemon": "not built yet",
    }
    return Outcome(0, data, lines)
