"""A skill's scripts run through ``shell.run`` (issue 17): through the real
core, its sandboxed shell and the fake model over loopback. A turn that
viewed a skill sees that version's files read-only in its shell commands;
a turn that did not view it sees nothing of them."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from naga.sdk import Client
from naga.v1 import skills_pb2 as skpb
from naga.v1 import turn_pb2 as tpb
from naga_core.skills import render, sealed_files_root
from tests.fakes.model_server import Reply
from tests.tools._turns import model_name, results
from tests.tools.conftest import ToolsCore

_SCRIPT = b"#!/bin/sh\nprintf 'total=%s\\n' \"$((40 + 2))\" > total.txt\necho script-ran\n"
_SKILL = render(
    "add-up",
    "Add up the figures. Use when the owner asks for a total.",
    "Run scripts/total.sh; it writes total.txt.\n",
)


@pytest.fixture(scope="module")
def skill(tools_core: ToolsCore, owner: Client) -> str:
    """The imported skill's folder as a viewing turn is told it."""
    files = [
        skpb.SkillFile(path="SKILL.md", data=_SKILL),
        skpb.SkillFile(path="scripts/total.sh", data=_SCRIPT, executable=True),
    ]
    done = owner.call(
        "/naga.v1.SkillService/Import",
        skpb.ImportSkillRequest(files=files, reason="test"),
        skpb.SkillChangeResponse,
    )
    return os.path.join(tools_core.home, "work", "skills", done.skill.version)


def _turn(tc: ToolsCore, client: Client, replies: list[Reply]) -> list[tpb.TurnEvent]:
    tc.model.script(*replies, Reply.answer("done"))
    session = "skill-" + uuid.uuid4().hex[:8]
    events = list(client.run_turn(session, "What is the total?", uuid.uuid4().hex, timeout=120))
    assert events[-1].WhichOneof("kind") == "final", events[-1]
    return events


def _calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply.answer(
        tool_calls=tuple(
            (f"c{uuid.uuid4().hex[:6]}", model_name(tool), json.dumps(args)) for tool, args in calls
        )
    )


def test_a_viewed_skills_script_runs_read_only_in_the_turns_shell(
    tools_core: ToolsCore, owner: Client, skill: str
) -> None:
    script = f"{skill}/scripts/total.sh"
    command = f"sh {script}; {script}; echo x >> {script}; echo append=$?; rm {script}; echo rm=$?"
    events = _turn(
        tools_core,
        owner,
        [
            _calls(("skill.view", {"name": "add-up"})),
            _calls(("shell.run", {"command": command, "timeout_s": 20})),
        ],
    )
    viewed, ran = results(events)
    assert viewed.ok, viewed.error
    told = json.loads(viewed.result_json)
    assert told["dir"] == skill  # where the model is told the files are
    assert "shell.run" in told["run"]
    assert ran.ok, ran.error
    out = json.loads(ran.result_json)
    text = str(out["output"])
    # Run twice (through sh, and as an executable), then refused any change.
    assert text.count("script-ran") == 2, text
    assert "append=0" not in text, text
    assert "rm=0" not in text, text
    # What the script wrote went where any command's writes go: the
    # workspace, captured as one undoable effect.
    assert out["changed"] == ["total.txt"]
    with open(os.path.join(tools_core.workspace, "total.txt")) as f:
        assert f.read() == "total=42\n"
    with open(script, "rb") as f:
        assert f.read() == _SCRIPT


def test_a_turn_that_did_not_view_the_skill_cannot_see_its_files(
    tools_core: ToolsCore, owner: Client, skill: str
) -> None:
    (viewed,) = results(_turn(tools_core, owner, [_calls(("skill.view", {"name": "add-up"}))]))
    assert viewed.ok, viewed.error
    assert os.path.isdir(skill)  # written out by the viewing turn, and still there
    command = f"ls {skill}; echo ls=$?; sh {skill}/scripts/total.sh; echo sh=$?"
    events = _turn(
        tools_core,
        owner,
        [_calls(("shell.run", {"command": command, "timeout_s": 20}))],
    )
    (ran,) = results(events)
    assert ran.ok, ran.error
    text = str(json.loads(ran.result_json)["output"])
    assert "script-ran" not in text, text
    assert "ls=0" not in text, text
    assert "sh=0" not in text, text


def test_a_sealed_skills_files_are_written_outside_the_home_and_still_run(
    tools_core: ToolsCore, owner: Client
) -> None:
    """A session's skill is sealed (docs/adr/0060): its files, plaintext once
    written out, go to a memory-backed folder outside $NAGA_HOME, and its
    script runs read-only there as a global skill's does."""
    session = "sealed-" + uuid.uuid4().hex[:8]
    skill_md = render(
        "add-up-sealed",
        "Add up the sealed figures. Use when the owner asks for a sealed total.",
        "Run scripts/total.sh; it writes total.txt.\n",
    )
    done = owner.call(
        "/naga.v1.SkillService/Import",
        skpb.ImportSkillRequest(
            scope=f"session/{session}",
            files=[
                skpb.SkillFile(path="SKILL.md", data=skill_md),
                skpb.SkillFile(path="scripts/total.sh", data=_SCRIPT, executable=True),
            ],
            reason="test",
        ),
        skpb.SkillChangeResponse,
    )
    folder = os.path.join(sealed_files_root(tools_core.home), done.skill.version)
    tools_core.model.script(
        _calls(("skill.view", {"name": "add-up-sealed"})),
        _calls(("shell.run", {"command": f"sh {folder}/scripts/total.sh", "timeout_s": 20})),
        Reply.answer("done"),
    )
    events = list(owner.run_turn(session, "What is the total?", uuid.uuid4().hex, timeout=120))
    viewed, ran = results(events)
    assert viewed.ok, viewed.error
    assert json.loads(viewed.result_json)["dir"] == folder
    assert not os.path.realpath(folder).startswith(os.path.realpath(tools_core.home) + os.sep)
    assert ran.ok, ran.error
    assert "script-ran" in str(json.loads(ran.result_json)["output"])
    assert not os.path.exists(os.path.join(tools_core.home, "work", "skills", done.skill.version))
    with open(os.path.join(folder, "scripts", "total.sh"), "rb") as f:
        assert f.read() == _SCRIPT
