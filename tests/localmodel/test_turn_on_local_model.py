"""With no providers.json, a turn runs on the embedded local model: the core
starts it at the first turn that needs a model (not before: it holds about
700 MB) and hands it to the provider plugin like any OpenAI-compatible
provider. Structure, not wit: a non-empty reply arrives through the real
core, a sandboxed executor and the provider plugin; the trace names the
local model; a second turn reuses the running server. ``naga daemon status``
lists the server, sandboxed like every process but the core; no file of the
home (its log included) holds the owner's words."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from naga_core.agent import AgentConfig
from naga_core.cli import main
from naga_core.plugins import PluginsConfig
from naga_core.supervisor import proc_status
from tests.canary_helpers import files_holding, forms
from tests.daemon.conftest import core_in_thread
from tests.plugin_host.conftest import STEADY

pytestmark = pytest.mark.slow

AGENT = AgentConfig(executors=1, max_tokens=24, turn_timeout_s=240)
CANARY = "zq7local" + uuid.uuid4().hex[:12]


def test_a_turn_without_a_provider_file_runs_on_the_embedded_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tempfile.mkdtemp(prefix="naga-local-turn-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=STEADY), agent=AGENT) as core:
            with core.client() as c:
                before = {p.role for p in c.status().processes}
                assert "local-model" not in before, "started before a turn needed it"
                for text in (f"Say hello to {CANARY} in one short sentence.", "And goodbye?"):
                    events = list(c.run_turn("s-local", text, uuid.uuid4().hex, timeout=240.0))
                    last = events[-1]
                    assert last.WhichOneof("kind") == "final", last
                    assert last.final.text.strip(), "an empty reply"
                    assert last.final.model_calls >= 1
                rows = {p.role for p in c.status().processes}
                assert "provider:local" in rows, rows

                capsys.readouterr()
                assert main(["daemon", "status", "--home", home, "--json"]) == 0
                status = json.loads(capsys.readouterr().out)
                roles = {p["role"]: p for p in status["processes"]}
                server = roles["local-model"]
                assert server["state"] == "running"
                assert server["pid"] > 0
                assert server["started"]
                assert server["detail"].startswith("qwen2.5-coder-0.5b-instruct-q4_k_m on ")
                assert "http://127.0.0.1:" in server["detail"]
                for role in ("local-model", "provider:local", "executor:0"):
                    proc = proc_status(roles[role]["pid"])
                    assert (proc["Seccomp"], proc["NoNewPrivs"]) == ("2", "1"), role
                log = Path(home, "run", "local-model.log").read_text()
                assert "POST /v1/chat/completions" in log
                # The server's log, like every file of the home, holds none
                # of the owner's words (issue 18: the prompts are not logged).
                assert files_holding(home, forms(CANARY)) == []

                capsys.readouterr()
                assert main(["daemon", "status", "--home", home]) == 0
                text = capsys.readouterr().out
                assert "local-model" in text
                assert "  serving: qwen2.5-coder-0.5b-instruct-q4_k_m on http://127.0.0.1:" in text
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
