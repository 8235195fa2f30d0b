"""A SIGKILL of the sandboxed gateway while one message's turn runs and a
second, acknowledged, waits behind it in the core's lane: the core restarts
the gateway, the WebSocket client reconnects and sends again what it has not
seen answered, with the same keys, and each message runs exactly once and
its answer reaches the client.
Real processes throughout (``naga daemon start``, its gateway, executors and
provider plugin); only the model is the fake on loopback."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import core_pb2 as cpb
from tests.agent.conftest import write_providers
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import FakeModelServer, Reply
from tests.gateway._client import WsClient
from tests.gateway._login import core_codes, owner_cookie


def _port() -> int:
    # As tests/gateway/test_real_core.py does: the gateway must come back on
    # the same port after the kill, so it is pinned for the run.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _model() -> Generator[tuple[FakeModelServer, trio.lowlevel.TrioToken]]:
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                box["server"] = await nursery.start(FakeModelServer().serve)
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(main)

    thread = threading.Thread(target=run, name="gateway-kill-model")
    thread.start()
    assert started.wait(10)
    try:
        yield box["server"], box["token"]
    finally:
        trio.from_thread.run_sync(box["server"].release, "first", trio_token=box["token"])
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)


def _gateway(home: str) -> cpb.ProcessStatus:
    with Client.connect(home) as c:
        (row,) = [p for p in c.status().processes if p.role == "gateway"]
        return row


async def _reconnect(port: int, cookie: str) -> WsClient:
    """The restarted gateway's console (its restart is the core's, with
    backoff); the owner's session cookie outlives the gateway."""
    with trio.fail_after(60):
        while True:
            try:
                c = await WsClient.open(port, cookie=cookie)
                await c.connect()
            except (OSError, AssertionError, trio.BrokenResourceError):
                await trio.sleep(0.05)
            else:
                return c


@pytest.mark.slow
def test_a_gateway_sigkill_loses_no_acknowledged_message(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    port = _port()
    with _model() as (server, token):
        write_providers(home, server.openai_url)
        replies = [Reply.answer("the first answer", hold="first"), Reply.answer("the second")]
        trio.from_thread.run_sync(server.script, *replies, trio_token=token)
        core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
        try:
            first_pid = _gateway(home).pid
            cookie = ""

            async def before_kill() -> dict[str, Any]:
                nonlocal cookie
                cookie = await owner_cookie(port, core_codes(home))
                c = await WsClient.open(port, cookie=cookie)
                await c.connect()
                ack = await c.request("send", session="w", text="one", key="k1")
                assert ack["ok"], ack
                await trio.to_thread.run_sync(
                    lambda: trio.from_thread.run(server.held, "first", trio_token=token)
                )
                r2 = await c.start("send", session="w", text="two", key="k2")
                await c.until_event("lane.queued", "w")
                # Acknowledged while the first runs: it is in the core's lane.
                queued = await c.response(r2)
                assert queued["ok"], queued
                result: dict[str, Any] = ack["result"]
                return result

            ack1 = trio.run(before_kill)
            os.kill(first_pid, signal.SIGKILL)

            async def after_kill() -> list[dict[str, Any]]:
                c = await _reconnect(port, cookie)
                # Resend everything not seen answered, with the same keys.
                again = await c.request("send", session="w", text="one", key="k1")
                assert again["ok"], again
                assert again["result"]["message_seq"] == ack1["message_seq"]
                r2 = await c.start("send", session="w", text="two", key="k2")
                await trio.to_thread.run_sync(
                    lambda: trio.from_thread.run_sync(server.release, "first", trio_token=token)
                )
                finals = [await c.until_event(("turn.final", "turn.error"), "w")]
                assert (await c.response(r2))["ok"]
                finals.append(await c.until_event(("turn.final", "turn.error"), "w"))
                await c.aclose()
                return finals

            finals = trio.run(after_kill)
            assert _gateway(home).pid != first_pid
            assert [f["event"] for f in finals] == ["turn.final", "turn.final"], finals
            assert [f["data"]["text"] for f in finals] == ["the first answer", "the second"]

            with Client.connect(home) as c:
                records = list(c.records(0, 1000))
                c.shutdown("gateway kill test done")
            core.proc.wait(30)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
    messages: dict[str, int] = {}
    ends: dict[str, int] = {}
    for r in records:
        if r.kind == "turn.message":
            key = apb.TurnRecord.FromString(r.payload).idempotency_key
            messages[key] = messages.get(key, 0) + 1
        elif r.kind in ("turn.reply", "turn.error"):
            tid = apb.TurnRecord.FromString(r.payload).turn_id
            ends[tid] = ends.get(tid, 0) + 1
    assert messages == {"k1": 1, "k2": 1}
    assert sorted(ends.values()) == [1, 1]
