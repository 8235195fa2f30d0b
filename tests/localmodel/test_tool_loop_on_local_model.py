"""The embedded local model's whole tool loop through the real core: the
model calls a tool, the core runs it in its sandboxed plugin, the result
goes back to the model (the follow-up request llama-cpp-python's server
used to refuse: "7 validation errors ... messages[2]"), and the model
answers with what the tool said."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from naga.v1 import agent_pb2 as apb
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from tests.daemon.conftest import core_in_thread
from tests.plugin_host.conftest import READY_S, STEADY

pytestmark = pytest.mark.slow

PLUGINS = Path(__file__).resolve().parent / "plugins"
AGENT = AgentConfig(executors=1, max_tokens=96, turn_timeout_s=300)


def test_the_local_model_calls_a_tool_and_answers_with_its_result() -> None:
    root = tempfile.mkdtemp(prefix="naga-local-tool-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT) as core:
            with core.client() as c:
                c.enable_plugin("weather", wait=READY_S)
                events = list(
                    c.run_turn(
                        "s-tool",
                        "What is the temperature in Paris right now? Use the weather tool.",
                        uuid.uuid4().hex,
                        timeout=300.0,
                    )
                )
                kinds = [e.WhichOneof("kind") for e in events]
                last = events[-1]
                assert last.WhichOneof("kind") == "final", (kinds, last)
                started = [e.tool_started for e in events if e.HasField("tool_started")]
                finished = [e.tool_finished for e in events if e.HasField("tool_finished")]
                assert [s.tool for s in started][:1] == ["weather.current"], kinds
                assert finished[0].ok, finished[0]
                assert "37.4" in finished[0].result_json
                assert last.final.tool_calls >= 1
                assert last.final.model_calls >= 2, "no follow-up after the tool result"
                assert "37" in last.final.text, last.final.text
                # The follow-up request went to the provider and was answered.
                records = [
                    apb.TurnRecord.FromString(r.payload)
                    for r in c.records()
                    if r.kind == "turn.model"
                ]
                assert len(records) >= 2
                assert not any(r.failed for r in records)
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
