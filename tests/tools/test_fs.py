"""fs tools through the real core: paths that leave the workspace (.., an
absolute path, a symlink out or in) are refused with the reason and change
nothing; reads, lists and searches answer from the workspace; a write makes
one effect that a rollback takes back."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from naga_core.workspace import tree_hash
from tests.cli.conftest import naga_command
from tests.fakes.model_server import Reply
from tests.tools._turns import Call, last_seq, model_name, results, tool_turn
from tests.tools.conftest import ToolsCore


def test_paths_outside_the_workspace_are_refused(tools_core: ToolsCore, owner: Client) -> None:
    root = tools_core.workspace
    os.makedirs(os.path.join(root, "sub"), exist_ok=True)
    os.symlink("/tmp", os.path.join(root, "out"))
    os.symlink("sub", os.path.join(root, "in"))
    before = tree_hash(root)
    calls: list[Call] = [
        ("fs.write", {"path": "../escape.txt", "content": "x"}),
        ("fs.write", {"path": "/etc/naga-escape", "content": "x"}),
        ("fs.write", {"path": "out/escape.txt", "content": "x"}),
        ("fs.write", {"path": "in/through.txt", "content": "x"}),
        ("fs.read", {"path": "out/../../etc/passwd"}),
        ("fs.delete", {"path": "sub/../.."}),
    ]
    answers = results(tool_turn(tools_core, owner, "paths", calls))
    assert [a.ok for a in answers] == [False] * len(calls), answers
    assert "leaves the workspace" in answers[0].error
    assert "relative to the workspace" in answers[1].error
    assert "outside the workspace" in answers[2].error
    assert "is a symlink" in answers[3].error
    assert tree_hash(root) == before
    assert not os.path.exists("/tmp/escape.txt")
    assert not os.path.exists(os.path.join(root, "sub", "through.txt"))


def test_reads_answer_from_the_workspace_and_a_write_rolls_back(
    tools_core: ToolsCore, owner: Client
) -> None:
    root = tools_core.workspace
    with open(os.path.join(root, "readme.md"), "w") as f:
        f.write("first line\nthe needle is here\n")
    mark, before = last_seq(owner), tree_hash(root)
    calls: list[Call] = [
        ("fs.read", {"path": "readme.md"}),
        ("fs.list", {}),
        ("fs.search", {"text": "needle"}),
        ("fs.write", {"path": "new/deep/file.txt", "content": "made"}),
        ("fs.edit", {"path": "readme.md", "old": "needle", "new": "pin"}),
    ]
    read, listed, found, wrote, edited = results(tool_turn(tools_core, owner, "reads", calls))
    assert json.loads(read.result_json)["content"] == "first line\nthe needle is here\n"
    assert "readme.md" in {e["name"] for e in json.loads(listed.result_json)["entries"]}
    assert json.loads(found.result_json)["matches"][0]["line"] == 2
    assert json.loads(wrote.result_json)["changed"] == ["new", "new/deep", "new/deep/file.txt"]
    assert edited.ok, edited.error
    with open(os.path.join(root, "readme.md")) as f:
        assert "pin" in f.read()
    owner.rollback(mark, by_owner=True)
    assert tree_hash(root) == before
    assert not os.path.exists(os.path.join(root, "new"))


def test_an_absolute_path_is_refused_with_the_relative_one_to_use(
    tools_core: ToolsCore, owner: Client
) -> None:
    """The embedded model wrote /workspace/hello.txt and repeated the same
    call eight times on "must be relative to the workspace" alone; the
    schema it is shown now says so too."""
    before = len(tools_core.model.server.requests)
    calls: list[Call] = [
        ("fs.write", {"path": "/workspace/hello.txt", "content": "x"}),
        ("fs.read", {"path": "/notes/a.txt"}),
        ("fs.list", {"path": "/workspace"}),
        # What it did next, once the path was right: edit a file that is not there.
        ("fs.edit", {"path": "hello.txt", "old": "Hello", "new": "Hello from Naga"}),
    ]
    answers = results(tool_turn(tools_core, owner, "abs-paths", calls))
    assert [a.ok for a in answers] == [False] * len(calls), answers
    assert "must be relative to the workspace, e.g. 'hello.txt'" in answers[0].error
    assert "e.g. 'notes/a.txt'" in answers[1].error
    assert "e.g. '.'" in answers[2].error
    assert "fs.edit changes a file; fs.write creates one" in answers[3].error
    assert not os.path.exists(os.path.join(tools_core.workspace, "hello.txt"))
    request = tools_core.model.server.requests[before].json()
    paths = {
        t["function"]["name"]: t["function"]["parameters"]["properties"]["path"]
        for t in request["tools"]
        if t["function"]["name"].startswith("fs__")
    }
    assert paths, request["tools"]
    for name, schema in paths.items():
        assert "Relative to the workspace" in schema.get("description", ""), (name, schema)


def test_naga_rollback_says_which_writes_it_undoes_and_what_stays_done(
    tools_core: ToolsCore, owner: Client
) -> None:
    """By hand the dry run said "run workspace.apply on <root> <sha256>" and
    "cannot undo entry 52: it stays done" with no word of what they were."""
    mark = last_seq(owner)
    (wrote,) = results(
        tool_turn(
            tools_core, owner, "undo-words", [("fs.write", {"path": "w.txt", "content": "x"})]
        )
    )
    assert wrote.ok, wrote.error
    effect = int(json.loads(wrote.result_json)["effect"])
    done = subprocess.run(
        [*naga_command(), "rollback", "--to", str(mark), "--dry-run", "--home", tools_core.home],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    root = os.path.realpath(tools_core.workspace)
    assert f"  restore the files the undone tool calls changed in {root}" in lines, lines
    assert any(
        line.startswith(f"  undoes entry {effect}: tool fs.write in turn ") and "(w.txt)" in line
        for line in lines
    ), lines
    assert any(
        line.startswith("  cannot undo entry ")
        and line.endswith("it cannot be unsent")
        and ": it stays done (irreversible): reply of turn " in line
        for line in lines
    ), lines
    assert os.path.exists(os.path.join(tools_core.workspace, "w.txt"))  # a dry run


def test_a_turn_ends_at_the_third_identical_failing_call(
    tools_core: ToolsCore, owner: Client
) -> None:
    """By hand the embedded model made one failing fs.edit call eight times
    (agent.max_steps), minutes on a small box, then answered nothing."""
    call = (("c0", model_name("fs.edit"), '{"path": "nope.txt", "old": "a", "new": "b"}'),)
    server = tools_core.model.server
    before = len(server.requests)
    tools_core.model.script(*(Reply.answer(tool_calls=call) for _ in range(3)))
    events = list(owner.run_turn("repeats", "edit it", uuid.uuid4().hex, timeout=120))
    last = events[-1]
    assert last.WhichOneof("kind") == "error", last
    assert last.error.kind == tpb.TURN_ERROR_KIND_MODEL
    assert "the model made the same failing call 3 times (fs.edit " in last.error.message
    assert "no file nope.txt in the workspace" in last.error.message
    assert len(server.requests) - before == 3
    assert [r.ok for r in results(events)] == [False, False, False]
