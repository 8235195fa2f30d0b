"""What sealing a subject's sessions costs a turn (docs/adr/0037), in this
process over a real key ring in a temporary home: prints one JSON object.

* ``seal_turn_us``: one single-model-call turn's sealing: its message and
  reply records (``Sealer.seal_turn``) and its model request and answer
  blobs (``Sealer.seal_blob``, ``--request-bytes`` and ``--answer-bytes``),
  p50/p99 over ``--turns``;
* ``open_turn_us``: opening the message and reply back (a session's reload);
* ``per_record_us`` / ``per_blob_us``: one seal alone (p50);
* ``turn_target_ms``: issue 18's bound on bench/turn.py's overhead.

    python bench/seal.py [--turns 2000] [--request-bytes 4500] [--answer-bytes 600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(__file__)]
sys.path.insert(0, REPO)

from naga.v1 import agent_pb2 as apb  # noqa: E402
from naga_core._home import Home  # noqa: E402
from naga_core.memory import KeyRing, Sealer  # noqa: E402

SUBJECT = "webchat:owner"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--request-bytes", type=int, default=4500)
    ap.add_argument("--answer-bytes", type=int, default=600)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="naga-bench-seal-")
    try:
        sealer = Sealer(KeyRing.of_home(Home(root)))
        message = apb.TurnRecord(
            session="s-bench",
            turn_id="t-1",
            text="what is on my calendar today? " * 3,
            trust="owner",
        )
        reply = apb.TurnRecord(
            session="s-bench", turn_id="t-1", text="You have two meetings. " * 12, model_calls=1
        )
        request, answer = os.urandom(args.request_bytes), os.urandom(args.answer_bytes)
        sealer.seal_turn("turn.message", SUBJECT, message)  # the key made once, outside
        seal_us: list[float] = []
        open_us: list[float] = []
        record_us: list[float] = []
        blob_us: list[float] = []
        for _ in range(args.turns):
            t0 = time.perf_counter()
            m = sealer.seal_turn("turn.message", SUBJECT, message)
            t1 = time.perf_counter()
            r = sealer.seal_turn("turn.reply", SUBJECT, reply)
            t2 = time.perf_counter()
            sealer.seal_blob(SUBJECT, request)
            t3 = time.perf_counter()
            sealer.seal_blob(SUBJECT, answer)
            t4 = time.perf_counter()
            sealer.open_turn("turn.message", m)
            sealer.open_turn("turn.reply", r)
            t5 = time.perf_counter()
            seal_us.append((t4 - t0) * 1e6)
            open_us.append((t5 - t4) * 1e6)
            record_us.append((t1 - t0) * 1e6)
            blob_us.append((t3 - t2) * 1e6)
        out = {
            "bench": "seal",
            "turns": args.turns,
            "seal_turn_us": {"p50": _pct(seal_us, 0.5), "p99": _pct(seal_us, 0.99)},
            "open_turn_us": {"p50": _pct(open_us, 0.5), "p99": _pct(open_us, 0.99)},
            "per_record_us": round(statistics.median(record_us), 1),
            "per_blob_us": round(statistics.median(blob_us), 1),
            "request_bytes": args.request_bytes,
            "answer_bytes": args.answer_bytes,
            "turn_target_ms": 1.0,
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
