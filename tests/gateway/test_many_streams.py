"""Many messages waiting at once hold no thread of the gateway (ADR 0038).

Each message waiting in the core's lane holds its turn stream open in the
gateway. With the synchronous gRPC client each open stream held one of
trio's 40 worker threads while it waited for its next event; past 40, every
other call (a history, a trust lookup, the next message's Run) queued for a
thread until a turn ended. Here 60 messages wait behind one long turn and
the gateway must still answer at once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from naga_gateway import Gateway, GatewayConfig, Limits
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import owner_client
from tests.gateway.conftest import run_gateway

#: More than trio's default thread limiter (40) lets run at once.
WAITING = 60


def test_sixty_waiting_messages_leave_the_gateway_answering() -> None:
    with tempfile.TemporaryDirectory(prefix="gw-") as tmp:
        socket = str(Path(tmp) / "core.sock")
        # The long turn: 400 words, 0.1 s each (40 s), aborted by the test.
        core = FakeCore(slow_delay=0.1, workers=WAITING + 16)
        core.serve(socket)

        async def body(gw: Gateway) -> None:
            c = await owner_client(gw.port, core.login_code)
            await c.connect()
            head = await c.request("send", session="busy", text="slow one", key="k-head")
            assert head["ok"], head
            for i in range(WAITING):
                resp = await c.request(
                    "send", session="busy", text=f"m{i}", key=f"k{i}", mode="followup"
                )
                assert resp["ok"], resp
            # Each is acknowledged, so recorded and waiting in the core's
            # lane: an open stream of the gateway's now.
            with trio.fail_after(10):
                hist = await c.request("history", session="busy")
                assert hist["ok"], hist
                assert len(hist["result"]["entries"]) == WAITING + 1
                other = await c.request("send", session="free", text="hello", key="k-free")
                assert other["ok"], other
                final = await c.until_event("turn.final", "free")
                assert final["data"]["text"] == "echo: hello"
            aborted = await c.request("abort", session="busy")
            assert aborted["ok"], aborted
            with trio.fail_after(30):
                for _ in range(WAITING):
                    await c.until_event("turn.final", "busy")
            await c.aclose()

        try:
            config = GatewayConfig(port=0, limits=Limits(max_inflight=WAITING + 8))
            run_gateway(socket, body, config)
        finally:
            core.stop()
    assert sorted(r.text for r in core.runs) == sorted(
        ["slow one", "hello", *(f"m{i}" for i in range(WAITING))]
    ), "each message ran once"
