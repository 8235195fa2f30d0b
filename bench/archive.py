"""Archiving a session from the console: how long the owner waits for the
answer, and how long until its distillation is in the ledger; prints one
JSON object.

A real core in this process (its executors and provider plugin) on the fake
model over HTTP (tests/fakes/model_server.py), whose distillation answers
are streamed slowly (``--model-s`` seconds each, a model writing): each of
``--sessions`` sessions gets one turn, then they are archived one after
another (ConsoleAdminService.ArchiveSession, as the console does) and the
bench polls the ledger until every session's ``memory.distill`` record is
there (docs/adr/0050-distill18-background-distillation.md).

* ``archive_ms``: each archive's round trip (p50, max);
* ``recorded_s``: from the first archive to the last session's record (the
  background runner distils them ``DISTILL_AT_ONCE`` at a time).

    python bench/archive.py [--sessions 4] [--model-s 2.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naga.sdk import Client
from naga.v1 import memory_pb2 as mmpb
from naga_core.agent import AgentConfig
from tests.agent.conftest import ServerThread, running_core
from tests.fakes.model_server import FakeModelServer, Reply

_PIECES = 8


def _model() -> tuple[ServerThread, trio.CancelScope, threading.Thread]:
    box: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            box["server"] = await nursery.start(FakeModelServer().serve)
            box["token"] = trio.lowlevel.current_trio_token()
            box["scope"] = nursery.cancel_scope
            started.set()

    thread = threading.Thread(target=trio.run, args=(main,), name="bench-model")
    thread.start()
    started.wait(10)
    return ServerThread(box["server"], box["token"]), box["scope"], thread


def _distilled(client: Client, start: int) -> set[str]:
    found: set[str] = set()
    seq = start
    while page := client.records(seq, 500):
        for r in page:
            if r.kind == "memory.distill":
                found.add(mmpb.MemoryDistillRecord.FromString(r.payload).session)
        seq = page[-1].seq + 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="archive latency and background distillation")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--model-s", type=float, default=2.0)
    args = parser.parse_args()
    model, scope, thread = _model()
    agent = AgentConfig(executors=1, turn_timeout_s=120).with_budgets(100_000)
    names = [f"bench-archive-{n}" for n in range(args.sessions)]
    try:
        with running_core(model, agent, plugins=()) as core, core.client() as c:
            for name in names:
                model.script(Reply.answer("Noted."))
                said = f"I am a nurse in Lyon ({name})."
                list(c.run_turn(name, said, uuid.uuid4().hex, timeout=120))
            slow = Reply.answer('{"memories": []}', pieces=_PIECES, pace_s=args.model_s / _PIECES)
            model.script(*[slow] * len(names))
            start = c.head().size
            began = time.monotonic()
            took: list[float] = []
            for name in names:
                t0 = time.monotonic()
                c.archive_session(name, timeout=120)
                took.append((time.monotonic() - t0) * 1000)
            while _distilled(c, start) != set(names):
                time.sleep(0.05)  # a bench, not a test: polling the ledger
            recorded = time.monotonic() - began
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=model.token)
        thread.join(10)
    print(
        json.dumps(
            {
                "bench": "archive",
                "sessions": args.sessions,
                "model_s": args.model_s,
                "archive_ms": {
                    "p50": round(statistics.median(took), 1),
                    "max": round(max(took), 1),
                },
                "recorded_s": round(recorded, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
