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
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from tests.agent.conftest import write_providers
from tests.crash._webchat import TurnLedger, gateway_row, model_thread, pinned_port, reconnect
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply
from tests.gateway._client import WsClient
from tests.gateway._login import core_codes, owner_cookie


@pytest.mark.slow
def test_a_gateway_sigkill_loses_no_acknowledged_message(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    port = pinned_port()
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        replies = [Reply.answer("the first answer", hold="first"), Reply.answer("the second")]
        trio.from_thread.run_sync(server.script, *replies, trio_token=token)
        core = start_core_process(home, tmp_path / "core.log", gateway_port=port)
        try:
            first_pid = gateway_row(home).pid
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
                c = await reconnect(port, cookie)
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
            assert gateway_row(home).pid != first_pid
            assert [f["event"] for f in finals] == ["turn.final", "turn.final"], finals
            assert [f["data"]["text"] for f in finals] == ["the first answer", "the second"]

            ledger = TurnLedger.read(home)
            with Client.connect(home) as c:
                c.shutdown("gateway kill test done")
            core.proc.wait(30)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
    assert {k: len(t) for k, t in ledger.messages.items()} == {"k1": 1, "k2": 1}
    assert not ledger.steers
    assert sorted(len(e) for e in ledger.ends.values()) == [1, 1]
    assert {ledger.end_of(f) for f in finals} == {ledger.turn_of("k1"), ledger.turn_of("k2")}
