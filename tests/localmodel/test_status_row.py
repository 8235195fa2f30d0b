"""``naga daemon status`` shows the local model server even when it could not
start: a FAILED row saying why (here: no model in the cache), no pid. No
model runs here; the row of a running server is in test_turn_on_local_model."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from naga.v1 import core_pb2 as cpb
from naga_core.agent import LOCAL_MODEL_ROLE, AgentConfig
from naga_core.plugins import PluginsConfig
from tests.daemon.conftest import core_in_thread
from tests.plugin_host.conftest import STEADY

AGENT = AgentConfig(executors=1, max_tokens=24, turn_timeout_s=60)


def test_a_local_model_that_cannot_start_is_a_failed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with core_in_thread(str(home), plugins=PluginsConfig(tuning=STEADY), agent=AGENT) as core:
        with core.client() as c:
            assert LOCAL_MODEL_ROLE not in {p.role for p in c.status().processes}
            events = list(c.run_turn("s-none", "hello", uuid.uuid4().hex, timeout=60.0))
            assert events[-1].WhichOneof("kind") != "final", events[-1]
            rows = {p.role: p for p in c.status().processes}
            row = rows[LOCAL_MODEL_ROLE]
            assert row.state == cpb.PROCESS_STATE_FAILED
            assert row.pid == 0
            assert row.started_ns > 0
            assert row.detail.startswith("the local model qwen2.5-coder"), row.detail
            assert "run `make`" in row.detail, row.detail
            assert "\n" not in row.detail  # one line; the log tail is in the core's log
            c.shutdown("test done")
        assert not core.join().failed
