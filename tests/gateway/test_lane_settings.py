"""``lanes.max_concurrent`` and ``lanes.queue_mode`` set through a real
core apply live to a gateway talking to it with a gateway token: the cap is
the core's (docs/adr/0028-lanes-core-admission.md), so with one running
turn at a time a second session's message is acknowledged at once, queued
in the core, and runs once the cap is raised; ``collect`` (the gateway
follows the default mode) merges queued messages that name no mode.
Nothing is faked but the model (held replies show what runs when)."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.tokens import CAPABILITY_SCHEME, Risk
from naga.trust import TrustLevel
from naga_core.kernel._kernel import EFFECT_KIND
from naga_core.plugins import PluginsConfig
from naga_gateway import Gateway, GatewayConfig, GrpcCore
from naga_gateway._settings import KERNEL_EFFECT_KIND
from tests.agent.conftest import AGENT, TUNING, ServerThread, model_server, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import owner_client
from tests.gateway.conftest import run_gateway

__all__ = ["model_server"]  # the fixture, used by name below


class _Model:
    """The fake model server on its own loop, driven from this one."""

    def __init__(self, thread: ServerThread) -> None:
        self._thread = thread
        self.server = thread.server

    # Calls into another loop go through a thread: trio refuses them from a loop.
    async def script(self, *replies: Reply) -> None:
        await trio.to_thread.run_sync(lambda: self._thread.script(*replies))

    async def held(self, name: str) -> None:
        token = self._thread.token
        await trio.to_thread.run_sync(
            lambda: trio.from_thread.run(self.server.held, name, trio_token=token)
        )

    async def release(self, name: str) -> None:
        await trio.to_thread.run_sync(lambda: self._thread.run(lambda: self.server.release(name)))


Body = Callable[[_Model, Client, Gateway], Awaitable[None]]


def _with_stack(model_server: ServerThread, body: Body) -> None:
    """A real core (in a thread) and a gateway in this test's loop, with a
    gateway token the owner minted."""
    root = tempfile.mkdtemp(prefix="naga-l-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    try:
        with (
            core_in_thread(home, plugins=PluginsConfig(tuning=TUNING), agent=AGENT) as core,
            core.client() as owner,
        ):
            issued = owner.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4)
            token = base64.b64encode(issued.token.to_bytes()).decode("ascii")
            grpc_core = GrpcCore(core.info.socket, f"{CAPABILITY_SCHEME} {token}")

            async def main() -> None:
                gateway = Gateway(grpc_core, GatewayConfig(port=0))
                async with trio.open_nursery() as nursery:
                    await nursery.start(gateway.serve)
                    with trio.fail_after(60):
                        await body(_Model(model_server), owner, gateway)
                    nursery.cancel_scope.cancel()

            try:
                trio.run(main)
            finally:
                grpc_core.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _set(owner: Client, gateway: Gateway, name: str, text: str | None) -> None:
    """Change a setting at the core; return once the gateway has seen it."""

    def change() -> Any:
        if text is None:
            return owner.reset_setting(name)
        return owner.set_setting_text(name, text)

    resp = await trio.to_thread.run_sync(change)
    await gateway.lane_settings.wait_applied(resp.seq)


def test_the_gateways_effect_kind_is_the_kernels() -> None:
    assert KERNEL_EFFECT_KIND == EFFECT_KIND


def test_lane_settings_from_the_core_apply_live(model_server: ServerThread) -> None:
    async def body(model: _Model, owner: Client, gateway: Gateway) -> None:
        assert gateway.lanes.default_mode == "followup"
        c = await owner_client(gateway.port, lambda: owner.console_login().code)
        await c.connect()

        # --- lanes.max_concurrent = 1: a second session's message is
        # durable and acknowledged at once, and waits in the core for a slot.
        await _set(owner, gateway, "lanes.max_concurrent", "1")
        await model.script(Reply.answer("A done", hold="a"), Reply.answer("B done"))
        assert (await c.request("send", session="sa", text="first", key="ka"))["ok"]
        await model.held("a")
        b = await c.request("send", session="sb", text="second", key="kb")
        assert b["ok"], b
        queued = await c.until_event("lane.queued", "sb")
        assert queued["data"]["position"] == 1  # next for a slot of the cap
        assert len(model.server.requests) == 1

        # Back to its default (4): the waiting turn starts now, while the
        # first is still held.
        await _set(owner, gateway, "lanes.max_concurrent", None)
        assert (await c.until_event("turn.final", "sb"))["data"]["text"] == "B done"
        await model.release("a")
        assert (await c.until_event("turn.final", "sa"))["data"]["text"] == "A done"

        # --- lanes.queue_mode = collect: queued messages naming no mode merge.
        await _set(owner, gateway, "lanes.queue_mode", "collect")
        assert gateway.lanes.default_mode == "collect"
        await model.script(Reply.answer("one", hold="c"), Reply.answer("merged"))
        assert (await c.request("send", session="sc", text="m1", key="k1"))["ok"]
        await model.held("c")
        r2 = await c.start("send", session="sc", text="m2", key="k2")
        r3 = await c.start("send", session="sc", text="m3", key="k3")
        assert (await c.request("sessions"))["ok"]
        await model.release("c")
        acks = [(await c.response(r))["result"] for r in (r2, r3)]
        # Each its own turn in the core, run as one model call.
        assert acks[0]["turn"] != acks[1]["turn"]
        assert (await c.until_event("turn.final", "sc"))["data"]["text"] == "one"
        assert (await c.until_event("turn.final", "sc"))["data"]["text"] == "merged"
        assert (await c.until_event("turn.final", "sc"))["data"]["text"] == "merged"
        last = model.server.requests[-1].json()["messages"][-1]
        assert last == {"role": "user", "content": "m2\n\nm3"}
        await c.aclose()

    _with_stack(model_server, body)


def test_the_mode_is_read_again_only_after_an_effect_that_may_change_it(
    model_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every turn's budget debit is a kernel effect: the gateway sees it
    and does not call the core back for it (it did, every turn); a write
    of the mode, and a rollback of it, are read."""
    reads: list[str] = []
    real = GrpcCore.setting

    async def counted(self: GrpcCore, name: str) -> Any:
        reads.append(name)
        return await real(self, name)

    monkeypatch.setattr(GrpcCore, "setting", counted)

    async def body(model: _Model, owner: Client, gateway: Gateway) -> None:
        c = await owner_client(gateway.port, lambda: owner.console_login().code)
        await c.connect()
        await _set(owner, gateway, "lanes.max_concurrent", "3")  # the first read is done
        before = len(reads)
        await model.script(Reply.answer("done", usage=(10, 1)))
        assert (await c.request("send", session="sd", text="hi", key="kd"))["ok"]
        assert (await c.until_event("turn.final", "sd"))["data"]["text"] == "done"
        # Seen once this is: every effect before it was (the debit among them).
        kept = (
            await trio.to_thread.run_sync(
                lambda: owner.set_setting_text("lanes.max_concurrent", "4")
            )
        ).seq
        await gateway.lane_settings.wait_applied(kept)
        assert reads[before:] == []

        await _set(owner, gateway, "lanes.queue_mode", "collect")
        assert reads[before:] == ["lanes.queue_mode"]
        assert gateway.lanes.default_mode == "collect"

        undone = await trio.to_thread.run_sync(lambda: owner.rollback(kept))
        await gateway.lane_settings.wait_applied(undone.seq)
        assert reads[before:] == ["lanes.queue_mode", "lanes.queue_mode"]
        assert gateway.lanes.default_mode == "followup"
        await c.aclose()

    _with_stack(model_server, body)


def test_a_core_that_cannot_tell_leaves_the_gateways_own_values(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core  # serves turns, not GetSetting or Subscribe

    async def body(gateway: Gateway) -> None:
        assert gateway.lanes.default_mode == "followup"
        c = await owner_client(gateway.port, core.login_code)
        await c.connect()
        assert (await c.request("send", session="f", text="hi", key="1"))["ok"]
        await c.until_event("turn.final", "f")
        await c.aclose()

    run_gateway(socket, body, GatewayConfig(port=0))
