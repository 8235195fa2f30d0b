"""shell.run's write capture attacked from inside the command, through the
real core and its sandboxed shell (ADR 0034): a link out of the workspace, a
hard link shared with a file outside it, a rename over a file, a chmod, a
file replaced by a directory, writes through a descriptor and through
/proc/self/fd. Each is either captured (in the overlay's upper directory,
then one effect a rollback takes back exactly) or refused; nothing reaches
the live tree or anything outside it but through the effect."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import cast

import pytest

from naga.sdk import Client
from naga_core.workspace import tree_hash
from tests.tools._turns import last_seq, results, tool_turn
from tests.tools.conftest import ToolsCore


@pytest.fixture
def outside() -> Iterator[str]:
    """A directory outside the workspace and the command's view."""
    path = tempfile.mkdtemp(prefix="naga-outside-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _shell(tc: ToolsCore, client: Client, command: str) -> dict[str, object]:
    (done,) = results(
        tool_turn(tc, client, "attack", [("shell.run", {"command": command, "timeout_s": 20})])
    )
    assert done.ok, done.error
    out: dict[str, object] = json.loads(done.result_json)
    return out


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_a_hard_link_shared_with_a_file_outside_is_not_written_through(
    tools_core: ToolsCore, owner: Client, outside: str
) -> None:
    root = tools_core.workspace
    shared = os.path.join(outside, "shared.txt")
    _write(shared, "outside\n")
    os.link(shared, os.path.join(root, "hl.txt"))
    mark, before = last_seq(owner), tree_hash(root)
    out = _shell(tools_core, owner, "echo pwned >> hl.txt; cat hl.txt")
    assert "pwned" in str(out["output"]), out
    assert out["changed"] == ["hl.txt"], out
    # The workspace's path has the new bytes; the file it shared an inode
    # with outside does not.
    assert _read(os.path.join(root, "hl.txt")) == "outside\npwned\n"
    assert _read(shared) == "outside\n"
    owner.rollback(mark, by_owner=True)
    assert tree_hash(root) == before
    assert _read(shared) == "outside\n"
    os.unlink(os.path.join(root, "hl.txt"))


def _stage(tc: ToolsCore) -> str:
    return os.path.join(tc.home, "work", "shell-stage")


def test_each_write_lands_in_the_overlay_and_rolls_back_exactly(
    tools_core: ToolsCore, owner: Client, outside: str
) -> None:
    root = tools_core.workspace
    target = os.path.join(outside, "target.txt")
    _write(target, "outside\n")
    os.makedirs(os.path.join(root, "box", "deep"), exist_ok=True)
    _write(os.path.join(root, "box", "deep", "inner.txt"), "inner\n")
    for name, text in (("keep.txt", "keep\n"), ("other.txt", "other\n"), ("solid.txt", "s\n")):
        _write(os.path.join(root, name), text)
    os.symlink(outside, os.path.join(root, "link-out"))
    mark, before = last_seq(owner), tree_hash(root)
    commands = [
        # A link out of the workspace, then writes through it and through
        # the one the owner made: the target is not in the command's view.
        f"ln -s {target} new-link; echo x >> new-link; echo rc=$?",
        "echo x > link-out/target.txt; echo rc=$?",
        # The live tree itself is not in the view either.
        f"ls {root}; echo rc=$?",
        # A hard link inside (captured as two files), a rename over a file,
        # a chmod, a file replaced by a directory, a directory renamed.
        "ln keep.txt keep-hard; echo more >> keep-hard; echo rc=$?",
        "mv other.txt keep.txt; echo rc=$?",
        "chmod +x keep.txt; chmod 000 box/deep; echo rc=$?",
        "rm solid.txt; mkdir solid.txt; echo in > solid.txt/in; echo rc=$?",
        "chmod 755 box/deep; mv box box2; echo rc=$?",
        # A descriptor opened in the workspace, and /proc/self/fd (no /proc).
        "exec 3>>box2/deep/inner.txt; echo via-fd >&3; echo rc=$?",
        "echo x > /proc/self/fd/1; echo rc=$?",
    ]
    out = _shell(tools_core, owner, "; ".join(commands))
    codes = [w for w in str(out["output"]).split() if w.startswith("rc=")]
    assert codes == ["rc=2"] * 3 + ["rc=0"] * 6 + ["rc=2"], out["output"]
    # Staged in the overlay's upper directory, not a copy of the workspace.
    upper = os.path.join(_stage(tools_core), "upper")
    assert os.path.isfile(os.path.join(upper, "keep-hard")), os.listdir(_stage(tools_core))
    whiteout = os.lstat(os.path.join(upper, "other.txt"))
    assert (stat.S_ISCHR(whiteout.st_mode), whiteout.st_rdev) == (True, 0)
    # Captured: each change is in the live tree now, through the effect.
    changed = set(cast("list[str]", out["changed"]))
    assert {"new-link", "keep-hard", "keep.txt", "other.txt", "solid.txt", "box", "box2"} <= changed
    assert os.readlink(os.path.join(root, "new-link")) == target
    assert _read(os.path.join(root, "keep.txt")) == "other\n"
    assert os.stat(os.path.join(root, "keep.txt")).st_mode & 0o111
    assert _read(os.path.join(root, "keep-hard")) == "keep\nmore\n"
    assert _read(os.path.join(root, "solid.txt", "in")) == "in\n"
    assert _read(os.path.join(root, "box2", "deep", "inner.txt")) == "inner\nvia-fd\n"
    assert not os.path.exists(os.path.join(root, "box"))
    # Nothing outside changed; a rollback restores the workspace exactly.
    assert _read(target) == "outside\n"
    owner.rollback(mark, by_owner=True)
    assert tree_hash(root) == before
    assert _read(target) == "outside\n"
    for name in ("box", "keep.txt", "other.txt", "solid.txt", "link-out"):
        full = os.path.join(root, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
