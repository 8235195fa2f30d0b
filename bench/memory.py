"""The memory store over a real ledger and kernel in a temporary home:
prints one JSON object.

* ``write``: sealing and staging ``--items`` items (a fresh data key each,
  wrapped by the subject's key) with their kernel effect, committed in
  groups of 100 (the turn path's group commit): per item;
* ``startup``: a reopened ledger scanned with the store indexing every
  record (every item's data key unwrapped, its text opened and indexed),
  against the same scan without the store: the index's own cost;
* ``recall``: ``--queries`` messages recalled against one subject holding
  every item (the worst case: recall only looks at the turn's subject):
  latency p50/p99, and the tokens injected into the system prompt per turn
  (the cap is the agent's RECALL_TOKENS);
* ``crypto``: one item's seal and open alone.

    python bench/memory.py [--items 10000] [--queries 1000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

from naga.trust import TrustLevel  # noqa: E402
from naga.v1 import memory_pb2 as mmpb  # noqa: E402
from naga_core._home import Home  # noqa: E402
from naga_core._store import open_ledger  # noqa: E402
from naga_core.agent._memory_tools import RECALL_TOKENS  # noqa: E402
from naga_core.kernel import Actions, Kernel  # noqa: E402
from naga_core.memory import KeyRing, MemoryStore, Source, open_item, seal_item  # noqa: E402

SUBJECT = "webchat:owner"
_NOUNS = [
    "cat",
    "dog",
    "sister",
    "brother",
    "daughter",
    "son",
    "city",
    "bike",
    "car",
    "garden",
    "book",
    "film",
    "song",
    "team",
    "job",
    "office",
    "school",
    "doctor",
    "dentist",
    "recipe",
    "allergy",
    "birthday",
    "holiday",
    "flight",
    "hotel",
    "language",
    "piano",
    "guitar",
    "coffee",
    "tea",
    "wine",
    "cheese",
    "bread",
    "football",
    "chess",
    "painting",
    "camera",
    "phone",
    "laptop",
    "password",
    "meeting",
    "project",
    "client",
    "budget",
    "invoice",
    "landlord",
    "neighbour",
    "colleague",
    "friend",
    "cousin",
    "grandmother",
]
_ADJ = [
    "favourite",
    "new",
    "old",
    "usual",
    "weekly",
    "secret",
    "small",
    "big",
    "local",
    "blue",
    "red",
    "green",
    "early",
    "late",
]
_VERB = [
    "likes",
    "hates",
    "owns",
    "visits",
    "prefers",
    "avoids",
    "plays",
    "reads",
    "collects",
    "forgets",
    "needs",
]


def _fact(rng: random.Random, n: int) -> str:
    return (
        f"The owner {rng.choice(_VERB)} the {rng.choice(_ADJ)} {rng.choice(_NOUNS)} "
        f"near the {rng.choice(_NOUNS)} (note {n})"
    )


def _message(rng: random.Random) -> str:
    return (
        f"What about my {rng.choice(_ADJ)} {rng.choice(_NOUNS)}? "
        f"I was thinking of the {rng.choice(_NOUNS)} again."
    )


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="naga-bench-memory-")
    out: dict[str, object] = {"items": args.items, "queries": args.queries, "seed": args.seed}
    try:
        home = Home(os.path.join(root, "home"))
        home.ensure()
        source = Source(session="bench", turn_id="t-bench", trust=TrustLevel.OWNER)
        with open_ledger(home, create=True) as ledger:
            kernel = Kernel.open(ledger, Actions())
            store = MemoryStore.over(KeyRing.of_home(home), kernel)
            started = time.perf_counter()
            for n in range(args.items):
                with kernel.staged():  # as the core's write: group commit
                    store.write(
                        ledger,
                        kernel,
                        subject=SUBJECT,
                        layer=mmpb.MEMORY_LAYER_SEMANTIC,
                        text=_fact(rng, n),
                        source=source,
                    )
                if n % 100 == 99:
                    ledger.commit()
            ledger.commit()
            took = time.perf_counter() - started
            out["write"] = {"per_item_us": round(took / args.items * 1e6, 1)}

        with open_ledger(home, create=False) as ledger:
            t0 = time.perf_counter()
            for _r in ledger.iter_records():
                pass
            scan = time.perf_counter() - t0
        with open_ledger(home, create=False) as ledger:
            t0 = time.perf_counter()
            kernel = Kernel.open(ledger, Actions())
            store = MemoryStore.over(KeyRing.of_home(home), kernel)
            for r in ledger.iter_records():
                store.see(r)
            indexed = time.perf_counter() - t0
            t0 = time.perf_counter()
            Kernel.open(ledger, Actions())
            kernel_only = time.perf_counter() - t0
            out["startup"] = {
                "scan_only_ms": round(scan * 1e3, 1),
                "kernel_open_ms": round(kernel_only * 1e3, 1),
                "scan_kernel_and_index_ms": round(indexed * 1e3, 1),
                "index_cost_ms": round((indexed - scan - kernel_only) * 1e3, 1),
                "items_indexed": len(store),
            }

            latencies: list[float] = []
            injected: list[int] = []
            counts: list[int] = []
            for _ in range(args.queries):
                msg = _message(rng)
                t0 = time.perf_counter()
                recalled = store.recall(SUBJECT, msg, RECALL_TOKENS)
                latencies.append((time.perf_counter() - t0) * 1e6)
                injected.append(recalled.tokens)
                counts.append(len(recalled.item_ids))
            out["recall"] = {
                "p50_us": round(_pct(latencies, 0.5), 1),
                "p99_us": round(_pct(latencies, 0.99), 1),
                "cap_tokens": RECALL_TOKENS,
                "tokens_injected_mean": round(statistics.fmean(injected), 1),
                "tokens_injected_p50": _pct([float(x) for x in injected], 0.5),
                "tokens_injected_max": max(injected),
                "items_injected_mean": round(statistics.fmean(counts), 2),
            }

        kek = os.urandom(32)
        text = _fact(rng, 0).encode()
        reps = 2000
        t0 = time.perf_counter()
        boxes = [seal_item(kek, f"mi-{i}", SUBJECT, text) for i in range(reps)]
        seal_us = (time.perf_counter() - t0) / reps * 1e6
        t0 = time.perf_counter()
        for i, (w, b) in enumerate(boxes):
            open_item(kek, f"mi-{i}", SUBJECT, w, b)
        open_us = (time.perf_counter() - t0) / reps * 1e6
        out["crypto"] = {"seal_us": round(seal_us, 1), "open_us": round(open_us, 1)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
