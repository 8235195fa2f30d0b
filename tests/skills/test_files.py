"""A viewed version's files on disk for ``shell.run`` (naga_core.skills._files):
the version's bytes and modes, read-only, written once, cleared whole; the
view names the folder only where there is more than a SKILL.md."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import trio

from naga_core.skills import Library, clear_files
from naga_core.skills._files import materialize
from tests.skills.helpers import open_store, skill_files

_DESC = "Add up the figures. Use when the owner asks for a total."


def _modes(root: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(top, name)
            out[os.path.relpath(full, root)] = stat.S_IMODE(os.stat(full).st_mode)
    return out


def test_a_version_is_written_once_read_only_with_its_bytes(tmp_path: Path) -> None:
    root = str(tmp_path / "files")
    with open_store(str(tmp_path)) as store:
        files = {
            **skill_files("add-up", _DESC, "Run scripts/total.sh.\n"),
            "scripts/total.sh": b"#!/bin/sh\necho 42\n",
            "references/notes.md": b"notes\n",
        }
        ref = store.create(
            "global", files, frozenset({"scripts/total.sh"}), author="owner", reason="t"
        )
        version = store.version(ref.commit)
        folder = materialize(store, version, root)
        assert folder == os.path.join(root, ref.commit.hex())
        for rel, data in files.items():
            assert Path(folder, rel).read_bytes() == data
        assert _modes(folder) == {
            "SKILL.md": 0o444,
            "scripts": 0o555,
            "scripts/total.sh": 0o555,
            "references": 0o555,
            "references/notes.md": 0o444,
        }
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o555
        made = os.stat(folder).st_ino
        assert materialize(store, version, root) == folder  # once: not rewritten
        assert os.stat(folder).st_ino == made
        assert os.listdir(root) == [ref.commit.hex()]  # no part folder left


def test_clear_removes_read_only_versions_and_a_crashed_part(tmp_path: Path) -> None:
    root = str(tmp_path / "files")
    with open_store(str(tmp_path)) as store:
        files = {**skill_files("add-up", _DESC, "x\n"), "scripts/a.sh": b"echo a\n"}
        ref = store.create("global", files, author="owner", reason="t")
        materialize(store, store.version(ref.commit), root)
    part = Path(root, ".part-crashed", "scripts")
    part.mkdir(parents=True)
    part.joinpath("a.sh").write_bytes(b"half")
    part.chmod(0o555)
    clear_files(root)
    assert not os.path.lexists(root)
    clear_files(root)  # nothing to clear is no error


@pytest.mark.parametrize("extra", [False, True])
def test_a_view_names_the_folder_only_when_there_are_files(tmp_path: Path, extra: bool) -> None:
    root = str(tmp_path / "files")
    with open_store(str(tmp_path)) as store:
        files = skill_files("add-up", _DESC, "x\n")
        if extra:
            files["scripts/a.sh"] = b"echo a\n"
        ref = store.create("global", files, author="owner", reason="t")
        library = Library(store, files_root=root)
        # Written on a worker thread (off the core's loop).
        viewed = trio.run(library.view, "s1", "webchat:owner", '{"name": "add-up"}')
    assert viewed.ok, viewed.text
    told = json.loads(viewed.text)
    assert viewed.key == "global/add-up"
    if extra:
        assert viewed.folder == told["dir"] == os.path.join(root, ref.commit.hex())
    else:
        assert viewed.folder == ""
        assert "dir" not in told
        assert not os.path.exists(root)
