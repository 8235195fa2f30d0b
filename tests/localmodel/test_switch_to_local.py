"""``model.provider`` moves between a providers.json entry and the embedded
model: ``local`` starts the embedded server at the next model call, and a
reset back to the file's default stops it (its status row says why) while
the file's provider answers again."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import LOCAL_MODEL_ROLE, AgentConfig
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import ServerThread, model_server, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import STEADY

pytestmark = pytest.mark.slow
__all__ = ["model_server"]  # the fixture, used by name below

AGENT = AgentConfig(executors=1, max_tokens=24, turn_timeout_s=240)


def _last(c: Client, text: str) -> tpb.TurnEvent:
    return list(c.run_turn("s-switch", text, uuid.uuid4().hex, timeout=240.0))[-1]


def test_switching_to_the_embedded_model_and_back(model_server: ServerThread) -> None:
    root = tempfile.mkdtemp(prefix="naga-switch-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)  # "fake", the default
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=STEADY), agent=AGENT) as core:
            with core.client() as c:
                c.set_setting_text("model.provider", "local")
                last = _last(c, "Say hello in one short sentence.")
                assert last.WhichOneof("kind") == "final", last
                rows = {p.role: p for p in c.status().processes}
                assert rows[LOCAL_MODEL_ROLE].state == cpb.PROCESS_STATE_RUNNING
                assert "provider:local" in rows

                c.reset_setting("model.provider")
                model_server.script(Reply.answer("the file's provider again"))
                last = _last(c, "And now?")
                assert last.final.text == "the file's provider again"
                rows = {p.role: p for p in c.status().processes}
                assert "provider:fake" in rows
                assert "provider:local" not in rows
                local = rows[LOCAL_MODEL_ROLE]
                assert local.state == cpb.PROCESS_STATE_STOPPED
                assert local.detail == "stopped: model.provider changed"
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
