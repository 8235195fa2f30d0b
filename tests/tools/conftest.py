"""A real core (in a thread of the test process) with the shipped tools as a
fresh install has them, its executors and model-provider worker, on the
fake model server (real HTTP on loopback), for the tool and undo tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from naga.sdk import Client
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S, STEADY

__all__ = ["model_server"]

#: Test plugins (disabled until a test enables one).
PLUGINS = Path(__file__).parent / "plugins"

AGENT = AgentConfig(
    executors=1,
    model_read_timeout_s=5.0,
    model_max_retries=1,
    turn_timeout_s=120,
).with_budgets(100_000)


@dataclass
class ToolsCore:
    core: InProcessCore
    home: str
    model: ServerThread

    @property
    def workspace(self) -> str:
        return os.path.join(self.home, "workspace")

    def client(self) -> Client:
        return self.core.client()


@pytest.fixture(scope="module")
def tools_core(model_server: ServerThread) -> Iterator[ToolsCore]:
    root = tempfile.mkdtemp(prefix="naga-t-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT, default_tools=True) as core:
            with core.client() as c:
                for name in ("fs", "shell", "web"):  # enabled by the fresh install; wait for them
                    c.enable_plugin(name, wait=READY_S)
            yield ToolsCore(core, home, model_server)
            with core.client() as c:
                c.shutdown("tests done")
            assert not core.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def owner(tools_core: ToolsCore) -> Iterator[Client]:
    with tools_core.client() as c:
        # The shell is offered (R3) and runs without asking: this test is
        # about capture, the approval tests about approvals.
        c.set_setting_text("tools.max_risk", "R3")
        c.set_setting_text("tools.approve_from", "R4")
        yield c
        c.reset_setting("tools.max_risk")
        c.reset_setting("tools.approve_from")
