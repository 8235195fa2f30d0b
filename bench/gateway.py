"""Gateway benchmark: WebSocket turns/s and latency, prints one JSON object.

A gateway on trio in this process, in front of a fake core (a real gRPC
server on a Unix socket, tests/fakes/turn_core.py, in this process's
threads: its turns are instant, so what is measured is the gateway: the
WebSocket protocol, the lanes, the event hub, the gRPC hop). For 1, 20 and
200 concurrent sessions, each with its own WebSocket client, every client
sends its turns one after another; a turn's latency is from sending the
message to receiving its ``turn.final`` event. ``lost`` counts messages
sent but never acknowledged or never answered, and turns the core ran more
than once.

    python bench/gateway.py [--turns 400]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naga.v1 import core_pb2 as cpb
from naga_gateway import Gateway, GatewayConfig, GrpcCore, Limits
from tests.fakes.turn_core import FakeCore
from tests.gateway._client import WsClient


async def _client(port: int, name: str, turns: int, latencies: list[float]) -> int:
    """Runs ``turns`` turns; returns how many were acknowledged and answered."""
    c = await WsClient.open(port)
    hello = await c.connect(name=name)
    assert hello["trust"] == "guest", hello
    session = f"{hello['session_prefix']}main"
    done = 0
    for i in range(turns):
        start = time.perf_counter()
        ack = await c.request(
            "send", session=session, text=f"turn {i} of {session}", key=f"{session}-{i}"
        )
        if not ack["ok"]:
            continue
        final = await c.until_event("turn.final", session)
        latencies.append(time.perf_counter() - start)
        c.events.clear()
        if final["data"]["text"] == f"echo: turn {i} of {session}":
            done += 1
    await c.aclose()
    return done


async def _level(port: int, sessions: int, turns: int, tag: str) -> dict[str, Any]:
    latencies: list[float] = []
    answered: list[int] = []

    async def one(n: int) -> None:
        answered.append(await _client(port, f"{tag}-{n}", turns, latencies))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for n in range(sessions):
            nursery.start_soon(one, n)
    elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {
        "sessions": sessions,
        "turns": sessions * turns,
        "turns_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(q[49] * 1000, 2),
        "p99_ms": round(q[98] * 1000, 2),
        "lost": sessions * turns - sum(answered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Gateway benchmark")
    parser.add_argument("--turns", type=int, default=400, help="turns per level")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmp:
        socket = str(Path(tmp) / "core.sock")
        core = FakeCore(workers=256)
        core.serve(socket)
        results: list[dict[str, Any]] = []

        async def run() -> None:
            port_core = GrpcCore(socket, "Capability bench")
            # Each client is a separate guest peer (as 200 people would be),
            # so each sees only its own session's events.
            # The per-connection rate limit is lifted: the bench measures
            # throughput, not the flood guard.
            limits = Limits(rate=1e6, burst=1_000_000)
            config = GatewayConfig(port=0, max_running=64, loopback_owner=False, limits=limits)
            gateway = Gateway(port_core, config)
            async with trio.open_nursery() as nursery:
                port = await nursery.start(gateway.serve)
                for sessions in (1, 20, 200):
                    for n in range(sessions):
                        core.trust[f"webchat:c{sessions}-{n}"] = cpb.TRUST_LEVEL_GUEST
                    turns = max(1, args.turns // sessions)
                    results.append(await _level(port, sessions, turns, f"c{sessions}"))
                nursery.cancel_scope.cancel()
            port_core.close()

        trio.run(run)
        core.stop()
        keys = [(r.session, r.idempotency_key) for r in core.runs]
        duplicates = len(keys) - len(set(keys))
    print(
        json.dumps(
            {
                "bench": "gateway",
                "python": platform.python_version(),
                "levels": results,
                "lost_messages": sum(r["lost"] for r in results),
                "duplicate_turns": duplicates,
            }
        )
    )


if __name__ == "__main__":
    main()
