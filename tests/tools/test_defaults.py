"""A fresh install's first start enables the shipped tools, and its turns
are offered them up to tools.max_risk (R2): reads, write and edit; not
delete, not the shell."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid

import pytest

from naga_core.agent import SHIPPED_TOOLS
from naga_core.cli import main
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import ServerThread, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import STEADY
from tests.tools.conftest import AGENT


def _plugins(capsys: pytest.CaptureFixture[str], home: str) -> dict[str, bool]:
    capsys.readouterr()
    assert main(["plugin", "list", "--json", "--home", home]) == 0
    doc = json.loads(capsys.readouterr().out)
    return {p["name"]: p["enabled"] for p in doc["plugins"] if p["name"] in SHIPPED_TOOLS}


def _daemon(capsys: pytest.CaptureFixture[str], home: str, *argv: str) -> None:
    code = main(["daemon", *argv, "--home", home])
    assert code == 0, capsys.readouterr().err


def test_a_fresh_install_lists_the_shipped_tools_enabled_from_its_first_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the real, detached core, before any turn: `naga plugin list`
    says what the first turn will be offered; the owner's disable stands at
    the next start."""
    root = tempfile.mkdtemp(prefix="naga-d-")
    home = root + "/home"
    try:
        _daemon(capsys, home, "start", "--no-gateway")
        try:
            assert _plugins(capsys, home) == dict.fromkeys(SHIPPED_TOOLS, True)
            assert main(["plugin", "disable", "shell", "--home", home]) == 0
        finally:
            _daemon(capsys, home, "stop")
        _daemon(capsys, home, "start", "--no-gateway")
        try:
            assert _plugins(capsys, home) == {"fs": True, "shell": False, "web": True}
        finally:
            _daemon(capsys, home, "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_first_turn_of_a_fresh_home_has_the_shipped_tools(
    model_server: ServerThread,
) -> None:
    root = tempfile.mkdtemp(prefix="naga-d-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    try:
        config = PluginsConfig(tuning=STEADY)
        with core_in_thread(home, plugins=config, agent=AGENT, default_tools=True) as core:
            with core.client() as c:
                assert {p.name for p in c.plugins() if p.enabled} >= set(SHIPPED_TOOLS)
                model_server.script(Reply.answer("hello"))
                events = list(c.run_turn("fresh", "hi", uuid.uuid4().hex, timeout=60))
                assert events[-1].WhichOneof("kind") == "final", events[-1]
                request = model_server.run(
                    lambda: [r.json() for r in model_server.server.requests][-1]
                )
                names = sorted(t["function"]["name"] for t in request.get("tools", []))
                assert names == [
                    "fs__edit",
                    "fs__list",
                    "fs__read",
                    "fs__search",
                    "fs__write",
                    "job__create",  # the core's own (naga_core.scheduler)
                    # the core's own memory tools (naga_core.agent._memory_tools)
                    "memory__search",
                    "memory__write",
                    "web__fetch",
                ]
                # The owner's disable stands at the next turn.
                c.disable_plugin("shell")
                model_server.script(Reply.answer("again"))
                list(c.run_turn("fresh", "hi again", uuid.uuid4().hex, timeout=60))
                assert "shell" not in {p.name for p in c.plugins() if p.enabled}
                c.shutdown("test done")
            assert not core.join().failed
    finally:
        shutil.rmtree(root, ignore_errors=True)
