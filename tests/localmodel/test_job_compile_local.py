"""The example sentence compiled by the embedded local model (no
providers.json): ``naga job add "every morning at seven send me a tech news
digest"`` gives ``0 7 * * *``. One model call, its tool forced and its
arguments held to the schedule's JSON schema (llama.cpp turns a forced
tool's schema into a grammar); the answer validated as a schedule."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from naga_core.agent import AgentConfig
from naga_core.cli import main
from naga_core.plugins import PluginsConfig
from tests.daemon.conftest import core_in_thread
from tests.plugin_host.conftest import STEADY

pytestmark = pytest.mark.slow

AGENT = AgentConfig(executors=1, max_tokens=24, turn_timeout_s=240)
SENTENCE = "every morning at seven send me a tech news digest"


def test_the_local_model_compiles_the_example_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tempfile.mkdtemp(prefix="naga-local-job-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    try:
        with core_in_thread(home, plugins=PluginsConfig(tuning=STEADY), agent=AGENT) as core:
            capsys.readouterr()
            code = main(["job", "add", SENTENCE, "--tz", "UTC", "--yes", "--json", "--home", home])
            out = capsys.readouterr()
            assert code == 0, out.err
            made = json.loads(out.out)
            assert made["cron"] == "0 7 * * *"
            assert made["tz"] == "UTC"
            assert "news" in made["prompt"].lower()
            with core.client() as c:
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
