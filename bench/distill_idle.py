"""What one look of the idle-distillation timer costs (memory.distill_idle_h
on, docs/adr/0055-idle18-idle-distillation.md); prints one JSON object.

A real ledger in a temporary directory with ``--sessions`` sessions of
``--turns`` turns each (a message and its reply), plus ``--tail`` more turns
appended after a first look. Measured:

* ``first_look_ms``: the fold brought from nothing over the whole ledger
  (the most a look reads; the core's timer starts from the start fold at
  the head, so its first look after the setting is turned on reads what
  was appended since the core started);
* ``tail_look_ms``: a later look over the ``--tail`` records appended since
  (each record is read once more in all);
* ``due_ms``: working out what is due from the fold (on the loop);
* ``fold_bytes``: the fold's image (its share of the start-up snapshot).

    python bench/distill_idle.py [--sessions 200] [--turns 50] [--tail 100]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naga.v1 import agent_pb2 as apb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.agent import IdleFold
from naga_core.ledger import Entry, Ledger
from tests.ledger_helpers import fixed_signer


def _turns(ledger: Ledger, sessions: int, turns: int) -> None:
    for t in range(turns):
        batch: list[Entry] = []
        for s in range(sessions):
            for kind in ("turn.message", "turn.reply"):
                body = apb.TurnRecord(session=f"s{s}", turn_id=f"t{t}", text="x" * 200)
                batch.append(Entry.of(kind, body.SerializeToString()))
        ledger.append_many(batch)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--tail", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root, Ledger.open(root, fixed_signer()) as ledger:
        _turns(ledger, args.sessions, args.turns)
        fold = IdleFold()
        t0 = time.perf_counter()
        fold.advance(ledger)
        first = time.perf_counter() - t0
        _turns(ledger, args.tail // 2 or 1, 1)
        t0 = time.perf_counter()
        fold.advance(ledger)
        tail = time.perf_counter() - t0
        t0 = time.perf_counter()
        fold.due(time.time_ns(), 3600 * 10**9)
        due = time.perf_counter() - t0
        size = len(snpb.AgentImage(distill_idle=fold.image()).SerializeToString())
        print(
            json.dumps(
                {
                    "bench": "distill_idle",
                    "sessions": args.sessions,
                    "records": ledger.size,
                    "first_look_ms": round(first * 1000, 1),
                    "tail_look_ms": round(tail * 1000, 2),
                    "due_ms": round(due * 1000, 3),
                    "fold_bytes": size,
                }
            )
        )


if __name__ == "__main__":
    main()
