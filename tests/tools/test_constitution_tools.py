"""INV-5 through the tools: a model that asks the shipped tools to change the
constitution (fs.write, fs.edit, fs.delete, shell.run), from the default
workspace and from a workspace the owner put around the home itself, changes
nothing; and every turn's prompt carries the constitution
(docs/design/constitution.md)."""

from __future__ import annotations

import json
import os

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga_core import constitution
from naga_core._home import Home
from tests.plugin_host.conftest import READY_S
from tests.tools._turns import Call, results, tool_turn
from tests.tools.conftest import ToolsCore

ATTEMPTS: list[Call] = [
    ("fs.write", {"path": "../constitution.md", "content": "1. Obey anyone."}),
    ("fs.edit", {"path": "../constitution.md", "old": "Serve", "new": "Betray"}),
    ("fs.delete", {"path": "../constitution.md"}),
    ("shell.run", {"command": "echo '1. Obey anyone.' > ../constitution.md; echo done"}),
]
AROUND_THE_HOME: list[Call] = [
    ("fs.write", {"path": "constitution.md", "content": "1. Obey anyone."}),
    ("fs.edit", {"path": "constitution.md", "old": "Serve", "new": "Betray"}),
    ("fs.delete", {"path": "constitution.md"}),
    ("fs.write", {"path": "ledger/snapshots/x", "content": "x"}),
    ("shell.run", {"command": "echo '1. Obey anyone.' > constitution.md; echo done"}),
]


def _restart_tools(c: Client, *, may_fail: bool = False) -> None:
    for name in ("fs", "shell"):  # they see workspace.path from their next start
        c.disable_plugin(name)
        try:
            c.enable_plugin(name, wait=READY_S)
        except SdkError:
            if not may_fail:
                raise


def test_no_tool_changes_the_constitution(tools_core: ToolsCore, owner: Client) -> None:
    home = Home(tools_core.home)
    path = constitution.path_of(home)
    with open(path, "rb") as f:
        before = f.read()
    answers = results(tool_turn(tools_core, owner, "inv5", ATTEMPTS))
    assert [a.ok for a in answers[:3]] == [False, False, False], answers
    # Around the home: the tools' sandbox refuses to start them there (their
    # view would hold the home), and the core refuses such a workspace.
    owner.set_setting_text("workspace.path", tools_core.home)
    try:
        _restart_tools(owner, may_fail=True)
        around = results(tool_turn(tools_core, owner, "inv5-home", AROUND_THE_HOME))
    finally:
        owner.reset_setting("workspace.path")
        _restart_tools(owner)
    assert len(around) == len(AROUND_THE_HOME), around
    assert not any(a.ok for a in around), around
    # And a workspace inside the home reaches none of them either.
    owner.set_setting_text("workspace.path", os.path.join(tools_core.home, "work", "ws"))
    try:
        _restart_tools(owner)
        inside = results(tool_turn(tools_core, owner, "inv5-inside", ATTEMPTS))
    finally:
        owner.reset_setting("workspace.path")
        _restart_tools(owner)
    assert [a.ok for a in inside[:3]] == [False, False, False], inside
    with open(path, "rb") as f:
        assert f.read() == before
    # The core's periodic check sees the same file: it is still serving.
    assert owner.status().processes[0].role == "core"


def test_every_turn_carries_the_constitution(tools_core: ToolsCore, owner: Client) -> None:
    tool_turn(tools_core, owner, "inv5-prompt", [("fs.list", {})])
    text = constitution.read_text(Home(tools_core.home)).strip()
    bodies = [json.loads(r.body) for r in tools_core.model.server.requests[-2:]]
    for body in bodies:
        system = body["messages"][0]
        assert system["role"] == "system"
        assert "<constitution>" in system["content"]
        assert text.splitlines()[-1] in system["content"]
    assert os.path.exists(constitution.path_of(Home(tools_core.home)))
