"""A real core (in a thread) with its executors, the model provider plugin
on the fake model server and the sandboxed WeChat plugin, whose only way
out is the core's egress proxy, to the fake iLink server (its own trio
loop in another thread, on loopback: a stand-in allowed by
``egress.loopback_hosts``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from naga.sdk import Client
from naga.v1 import wechat_pb2 as wpb
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from naga_core.wechat import ChannelConfig
from tests.agent.conftest import PLUGINS, ServerThread, model_server, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.fakes.ilink import ILinkThread, ilink_thread
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import STEADY

__all__ = ["model_server"]

T = TypeVar("T")

AGENT = AgentConfig(
    executors=2, model_read_timeout_s=2.0, model_max_retries=1, turn_timeout_s=60
).with_budgets(1000)
#: Small pauses (the real ones are seconds): the logic, not the clock, is tested.
CHANNEL = ChannelConfig(
    poll_timeout_ms=3000,
    chunk_pause_s=0.05,
    typing_every_s=0.2,
    # The fake model answers at once: the indicator from the turn's start.
    typing_after_s=0.0,
    retry_s=0.1,
    long_retry_s=0.3,
    send_attempts=3,
    send_retry_s=0.1,
)
WAIT_S = 60.0


@dataclass
class World:
    core: InProcessCore
    client: Client
    ilink: ILinkThread
    model: ServerThread
    home: str

    def bind(self, owner: str) -> wpb.WechatBinding:
        """A QR login through the core, the phone played by the fake."""
        started = self.client.wechat_bind()
        assert started.status == "wait", started
        self.ilink.run(self.ilink.server.scan, started.login_id)
        self.ilink.run(self.ilink.server.confirm, started.login_id, owner)
        seen: list[str] = []
        for _ in range(20):
            answer = self.client.wechat_bind(started.login_id, wait=5)
            if answer.status == "confirmed":
                return answer.binding
            seen.append(answer.status)
        raise AssertionError(f"no confirmation: {seen}")

    def active(self, owner: str) -> wpb.WechatBinding:
        """``owner``'s active binding, bound now if there is none (so each
        test stands on its own, in any order)."""
        for b in self.client.wechat_bindings():
            if b.owner_user_id == owner and b.status == wpb.WECHAT_BINDING_STATUS_ACTIVE:
                return b
        return self.bind(owner)

    def binding(self, bot_id: str) -> wpb.WechatBinding:
        (found,) = [b for b in self.client.wechat_bindings() if b.bot_id == bot_id]
        return found

    def until(self, check: Callable[[], T], timeout: float = WAIT_S) -> T:
        """Poll a core-side condition (RPC answers have no change feed)."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached")
            # The core answers RPCs; each check is one round trip.
            self.ilink.wait(_tick)

    def history(self, limit: int = 400) -> list[str]:
        return [e.description for e in self.client.history(limit=limit).entries]


async def _tick() -> None:
    import trio

    await trio.sleep(0.05)


@pytest.fixture(scope="module")
def world(model_server: ServerThread) -> Iterator[World]:
    root = tempfile.mkdtemp(prefix="naga-w-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    try:
        with (
            ilink_thread(hold_s=1.0) as ilink,
            core_in_thread(
                home,
                plugins=PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY),
                agent=AGENT,
                wechat=CHANNEL,
            ) as core,
        ):
            with core.client() as client:
                # Tools of two risks: the owner sees both, an untrusted user none.
                client.enable_plugin("danger", wait=60)
                client.set_setting_text("egress.loopback_hosts", "127.0.0.1")
                client.set_setting_text("wechat.api_base", ilink.server.base)
                client.set_setting_text("wechat.cdn_base", ilink.server.cdn)
                yield World(core, client, ilink, model_server, home)
                client.shutdown("tests done")
            assert not core.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sent_texts(world: World, user: str) -> list[str]:
    return world.ilink.run(world.ilink.server.texts_to, user)


def say(world: World, bot_id: str, user: str, text: str) -> dict[str, Any]:
    return world.ilink.run(world.ilink.server.user_says, bot_id, user, text)
