"""Kernel rollback benchmark: prints one JSON object.

* effects/s recorded (register effects, each durable before it returns);
* rollback time for 1, 100 and 10,000 effects (each undone last first,
  as one ROLLBACK effect);
* state rebuild time from the ledger for 100,000 effects (Kernel.open).

    python bench/rollback.py --home /tmp/naga-rollback
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from naga_core._home import Home, load_signer
from naga_core.kernel._kernel import Actions, Kernel
from naga_core.ledger import Ledger


def _progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description="Kernel rollback benchmark (one JSON object)")
    ap.add_argument("--home", required=True)
    ap.add_argument("--rebuild-effects", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000, help="distinct state keys written")
    args = ap.parse_args()
    home = Home.resolve(args.home)
    home.ensure()
    signer = load_signer(home, create=True)
    actions = Actions()
    ledger = Ledger.open(home.ledger_dir, signer)
    kernel = Kernel.open(ledger, actions)

    def record(n: int, tag: str) -> float:
        start = time.perf_counter()
        for i in range(n):
            kernel.register("bench", f"k{i % args.keys}", f"{tag}-{i}")
        return time.perf_counter() - start

    rollbacks: dict[str, float] = {}
    recorded = 0
    record_s = 0.0
    for n in (1, 100, 10_000):
        mark = kernel.register("bench", "mark", n)
        _progress(f"recording {n} effects, then rolling them back")
        record_s += record(n, f"r{n}")
        recorded += n
        start = time.perf_counter()
        kernel.rollback(mark)
        rollbacks[str(n)] = round(time.perf_counter() - start, 4)

    remaining = max(0, args.rebuild_effects - ledger.size)
    _progress(f"recording {remaining} more effects for the rebuild measurement")
    record_s += record(remaining, "fill")
    recorded += remaining
    effects_in_ledger = ledger.size
    ledger.close()

    _progress("rebuilding state from the ledger")
    start = time.perf_counter()
    ledger = Ledger.open(home.ledger_dir, signer)
    rebuilt = Kernel.open(ledger, actions)
    rebuild_s = time.perf_counter() - start
    keys = len(rebuilt.state)
    ledger.close()
    print(
        json.dumps(
            {
                "benchmark": "rollback",
                "home": home.root,
                "effects_per_s": round(recorded / record_s, 1),
                "rollback_s": rollbacks,
                "ledger_entries": effects_in_ledger,
                "rebuild_s": round(rebuild_s, 3),
                "rebuild_effects_per_s": round(effects_in_ledger / rebuild_s, 1),
                "state_keys": keys,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
