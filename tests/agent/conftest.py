"""A real core (in a thread of the test process) with its executor pool and
its model-provider plugin process, talking real HTTP on loopback to the fake
model server (on a trio loop in another thread)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.fakes.model_server import FakeModelServer, Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S, STEADY

PLUGINS = Path(__file__).resolve().parent / "plugins"


@dataclass
class ServerThread:
    server: FakeModelServer
    token: trio.lowlevel.TrioToken

    def script(self, *replies: Reply) -> None:
        trio.from_thread.run_sync(self.server.script, *replies, trio_token=self.token)

    def run(self, fn: Callable[[], Any]) -> Any:
        return trio.from_thread.run_sync(fn, trio_token=self.token)


@pytest.fixture(scope="module")
def model_server() -> Iterator[ServerThread]:
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                server = await nursery.start(FakeModelServer().serve)
                box["server"] = server
                box["token"] = trio.lowlevel.current_trio_token()
                box["scope"] = nursery.cancel_scope
                started.set()

        trio.run(main)

    thread = threading.Thread(target=run, name="fake-model-server")
    thread.start()
    started.wait(10)
    st = ServerThread(box["server"], box["token"])
    try:
        yield st
    finally:
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(10)


def write_providers(
    home: str,
    base_url: str,
    *,
    api: str = "openai",
    context_window: int = 0,
    vision: bool = False,
) -> None:
    creds = os.path.join(home, "credentials")
    os.makedirs(creds, mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    entry: dict[str, object] = {
        "api": api,
        "base_url": base_url,
        "api_key": "sk-test",
        "model": "fake-model",
    }
    if context_window:
        entry["context_window"] = context_window
    if vision:
        entry["vision"] = True
    body = {"default": "fake", "providers": {"fake": entry}}
    path = os.path.join(creds, "providers.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


#: Small numbers so failures are seen fast: a stall is 1 s without a byte.
AGENT = AgentConfig(
    executors=2, model_read_timeout_s=1.0, model_max_retries=2, turn_timeout_s=60
).with_budgets(1000)
TUNING = STEADY


@pytest.fixture(autouse=True)
def _fresh_script(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test of a module's shared fake model starts with no scripted
    reply left over from the one before (a failure under load otherwise
    fed its replies to every later test of the module)."""
    yield
    if "model_server" in request.fixturenames:
        server: ServerThread = request.getfixturevalue("model_server")
        server.run(server.server.forget_script)


@pytest.fixture(scope="module")
def agent_core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, AGENT) as core:
        yield core


@contextmanager
def running_core(
    model_server: ServerThread,
    agent: AgentConfig,
    *,
    context_window: int = 0,
    plugins: tuple[str, ...] = ("danger",),
) -> Generator[InProcessCore]:
    """A core on the fake model, the ``plugins`` enabled; its ledger is
    verified offline after it stops."""
    root = tempfile.mkdtemp(prefix="naga-a-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url, context_window=context_window)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=config, agent=agent) as core:
            with core.client() as c:
                for name in plugins:
                    c.enable_plugin(name, wait=READY_S)
            yield core
            with core.client() as c:
                c.shutdown("tests done")
            assert not core.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client(agent_core: InProcessCore) -> Iterator[Client]:
    with agent_core.client() as c:
        yield c


def turn(
    client: Client, session: str, text: str, *, peer: str = "", key: str | None = None
) -> list[tpb.TurnEvent]:
    """Every event of one turn (the stream ends after final or error)."""
    events = client.run_turn(session, text, key or uuid.uuid4().hex, peer=peer, timeout=READY_S * 2)
    return list(events)


def final(events: list[tpb.TurnEvent]) -> tpb.TurnFinal:
    last = events[-1]
    assert last.WhichOneof("kind") == "final", last
    return last.final


def error(events: list[tpb.TurnEvent]) -> tpb.TurnError:
    last = events[-1]
    assert last.WhichOneof("kind") == "error", last
    return last.error
