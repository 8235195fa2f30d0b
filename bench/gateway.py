"""Gateway benchmark: WebSocket turns/s and latency, prints one JSON object.

Two setups, each for 1, 20 and 200 concurrent sessions, each session with
its own WebSocket client sending its turns one after another; a turn's
latency is from sending the message to receiving its ``turn.final`` event:

* ``gateway`` (the gateway alone): a gateway on trio in this process, in
  front of a fake core (a real gRPC server on a Unix socket,
  tests/fakes/turn_core.py, in this process's threads). Its turns are
  instant, so what is measured is the gateway: the WebSocket protocol, the
  lanes, the event hub, the gRPC hop.
* ``end_to_end``: a real ``naga daemon start --foreground`` process with its
  sandboxed gateway, executor pool and provider plugin, against the fake
  model on 127.0.0.1 (tests/fakes/model_server.py) answering at once: the
  whole path a WebChat message takes, with the core's lanes setting
  (``lanes.max_concurrent``) and durable ledger writes.

``lost`` counts messages sent but never acknowledged or never answered;
``duplicate_turns`` counts turns run more than once (the fake core's run
log; for the real core, each session's history in the ledger must hold
every message and every reply exactly once).

    python bench/gateway.py [--turns 400] [--e2e-turns 200] [--only gateway|end_to_end]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_gateway import Gateway, GatewayConfig, GrpcCore, Limits
from tests.agent.conftest import write_providers
from tests.fakes.model_server import FakeModelServer, Reply
from tests.fakes.turn_core import FakeCore
from tests.gateway._client import WsClient
from tests.gateway._login import LoginCodes, core_codes, owner_client

_REPO = str(Path(__file__).resolve().parents[1])
_LEVELS = (1, 20, 200)
_CORE_ARGV = (sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground")


async def _client(
    port: int,
    name: str,
    turns: int,
    latencies: list[float],
    *,
    echo: bool,
    sessions: list[str],
    errors: list[str],
    codes: LoginCodes | None,
) -> int:
    """Runs ``turns`` turns; returns how many were acknowledged and answered
    (with the fake core's echo when ``echo``); turn errors go to ``errors``."""
    # The fake core's peers are guests (the bench gateway admits them); a
    # real gateway's are its owner, by the owner's login (the same proof
    # as a person's). Either way, one session per client.
    c = await WsClient.open(port) if codes is None else await owner_client(port, codes)
    hello = await c.connect(name=name)
    assert hello["trust"] == ("guest" if echo else "owner"), hello
    session = f"{hello['session_prefix']}{name}"
    sessions.append(session)
    done = 0
    for i in range(turns):
        start = time.perf_counter()
        ack = await c.request(
            "send", session=session, text=f"turn {i} of {session}", key=f"{session}-{i}"
        )
        if not ack["ok"]:
            continue
        final = await c.until_event(("turn.final", "turn.error"), session)
        latencies.append(time.perf_counter() - start)
        c.events.clear()
        if final["event"] == "turn.error":
            errors.append(str(final["data"].get("message", final["data"]))[:300])
        elif not echo or final["data"]["text"] == f"echo: turn {i} of {session}":
            done += 1
    await c.aclose()
    return done


async def _level(
    port: int,
    sessions: int,
    turns: int,
    tag: str,
    *,
    echo: bool = True,
    codes: LoginCodes | None = None,
) -> tuple[dict[str, Any], list[str]]:
    latencies: list[float] = []
    answered: list[int] = []
    names: list[str] = []
    errors: list[str] = []

    async def one(n: int) -> None:
        answered.append(
            await _client(
                port,
                f"{tag}-{n}",
                turns,
                latencies,
                echo=echo,
                sessions=names,
                errors=errors,
                codes=codes,
            )
        )

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
        "turn_errors": len(errors),
        **({"first_error": errors[0]} if errors else {}),
    }, names


def main() -> None:
    parser = argparse.ArgumentParser(description="Gateway benchmark")
    parser.add_argument("--turns", type=int, default=400, help="turns per level (gateway)")
    parser.add_argument("--e2e-turns", type=int, default=200, help="turns per level (end to end)")
    parser.add_argument("--only", choices=("gateway", "end_to_end"))
    args = parser.parse_args()
    out: dict[str, Any] = {"bench": "gateway", "python": platform.python_version()}
    if args.only in (None, "gateway"):
        out["gateway"] = _gateway_alone(args.turns)
    if args.only in (None, "end_to_end"):
        out["end_to_end"] = end_to_end(args.e2e_turns)
    parts = [v for k, v in out.items() if k in ("gateway", "end_to_end")]
    out["lost_messages"] = sum(p["lost_messages"] for p in parts)
    out["duplicate_turns"] = sum(p["duplicate_turns"] for p in parts)
    print(json.dumps(out))


def _gateway_alone(turns_per_level: int) -> dict[str, Any]:
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
            # 200 sessions at once: each message holds a stream until its end.
            config = GatewayConfig(port=0, admit_guests=True, limits=limits, max_open=256)
            gateway = Gateway(port_core, config)
            async with trio.open_nursery() as nursery:
                port = await nursery.start(gateway.serve)
                for sessions in _LEVELS:
                    for n in range(sessions):
                        core.trust[f"webchat:c{sessions}-{n}"] = cpb.TRUST_LEVEL_GUEST
                    turns = max(1, turns_per_level // sessions)
                    results.append((await _level(port, sessions, turns, f"c{sessions}"))[0])
                nursery.cancel_scope.cancel()
            port_core.close()

        trio.run(run)
        core.stop()
        keys = [(r.session, r.idempotency_key) for r in core.runs]
        duplicates = len(keys) - len(set(keys))
    return {
        "levels": results,
        "lost_messages": sum(r["lost"] for r in results),
        "duplicate_turns": duplicates,
    }


def end_to_end(turns_per_level: int) -> dict[str, Any]:
    """The levels against a real core process and its sandboxed gateway."""
    root = tempfile.mkdtemp(prefix="naga-bench-gw-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    log_path = os.path.join(root, "core.log")
    proc: subprocess.Popen[bytes] | None = None
    results: list[dict[str, Any]] = []
    sessions: list[str] = []

    async def run() -> None:
        nonlocal proc
        model = FakeModelServer()
        async with trio.open_nursery() as nursery:
            await nursery.start(model.serve)
            write_providers(home, model.openai_url)
            # Every turn of every level, answered at once (the fake does no work).
            total = sum(n * max(1, turns_per_level // n) for n in _LEVELS)
            model.script(*(Reply.answer("ok", usage=(10, 1), pieces=2) for _ in range(total)))
            port = _free_port()
            proc = await trio.to_thread.run_sync(_start_core, home, port, log_path)
            for n_sessions in _LEVELS:
                turns = max(1, turns_per_level // n_sessions)
                level, names = await _level(
                    port, n_sessions, turns, f"e{n_sessions}", echo=False, codes=core_codes(home)
                )
                results.append(level)
                sessions.extend(names)
            nursery.cancel_scope.cancel()

    try:
        trio.run(run)
        with Client.connect(home) as client:
            duplicates = _duplicates_in_history(client, sessions)
            client.shutdown("bench done")
        assert proc is not None
        proc.wait(30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if os.environ.get("BENCH_KEEP") is None:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "levels": results,
        "lost_messages": sum(r["lost"] for r in results),
        "duplicate_turns": duplicates,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_core(home: str, port: int, log_path: str) -> subprocess.Popen[bytes]:
    """``naga daemon start --foreground``, returned once it serves (its
    gateway included: readiness comes after the gateway's)."""
    r, w = os.pipe()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*_CORE_ARGV, "--home", home, "--gateway-port", str(port), "--ready-fd", str(w)],
            stdout=log,
            stderr=log,
            pass_fds=(w,),
            env={**os.environ, "PYTHONPATH": _REPO},
        )
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    got = os.read(r, 64) if ready else b""
    os.close(r)
    if not got:
        proc.kill()
        raise SystemExit(f"bench: naga-core did not come up; see {log_path}")
    return proc


def _duplicates_in_history(client: Client, sessions: list[str]) -> int:
    """Messages or replies the ledger holds more than once, over every
    session (each turn's text is unique in its session)."""
    duplicates = 0
    for session in sessions:
        entries = client.session_history(session, limit=1000)
        users = [e.text for e in entries if e.role == tpb.HISTORY_ROLE_USER]
        replies = [e.turn_id for e in entries if e.role == tpb.HISTORY_ROLE_ASSISTANT]
        duplicates += len(users) - len(set(users)) + len(replies) - len(set(replies))
    return duplicates


if __name__ == "__main__":
    main()
