"""What the store and the format refuse, each with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from naga_core.skills import Reason, SkillRefused, check_files, parse, render
from tests.skills.helpers import open_store, skill_files

GOOD = render("csv-sum", "Sum a CSV column. Use when asked for a column total.", "Steps.\n")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"no frontmatter\n", "must start with"),
        (b"---\nname: x\n", "no closing"),
        (b"---\n: : :\n---\n", "not YAML"),
        (b"---\n- a list\n---\n", "mapping"),
        (b"---\nname: csv-sum\n---\nbody\n", "description"),
        (b"---\ndescription: d\n---\n", "needs a name"),
        (b"---\nname: CSV Sum\ndescription: d\n---\n", "lowercase"),
        (b"---\nname: a--b\ndescription: d\n---\n", "lowercase"),
        # safe_load only: no Python objects from YAML tags.
        (b"---\nname: !!python/object/apply:os.system ['true']\ndescription: d\n---\n", "not YAML"),
        (b"\xff\xfe---\n", "UTF-8"),
    ],
)
def test_bad_skill_md_is_refused_by_name(raw: bytes, words: str) -> None:
    with pytest.raises(SkillRefused) as caught:
        parse(raw)
    assert caught.value.reason is Reason.BAD_FORMAT
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "path", ["../x", "scripts/../../x", "/etc/passwd", "other/x", "scripts/", "scripts/a b", "x.md"]
)
def test_paths_outside_the_skill_folders_are_refused(path: str) -> None:
    with pytest.raises(SkillRefused) as caught:
        check_files({"SKILL.md": GOOD, path: b"x"})
    assert caught.value.reason is Reason.BAD_PATH


def test_the_agent_never_writes_global_and_writes_are_checked(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        files = skill_files("csv-sum", "Sum a CSV column. Use when asked.", "Steps.\n")
        with pytest.raises(SkillRefused) as caught:
            store.create("global", files, author="agent", reason="distilled")
        assert caught.value.reason is Reason.SCOPE_DENIED
        store.create("session/s1", files, author="agent", reason="distilled")
        with pytest.raises(SkillRefused) as caught:
            store.create("session/s1", files, author="agent", reason="again")
        assert caught.value.reason is Reason.CONFLICT
        with pytest.raises(SkillRefused) as caught:
            store.patch("session/s1", "csv-sum", files, author="agent", reason="same")
        assert caught.value.reason is Reason.UNCHANGED
        renamed = skill_files("csv-total", "Sum a CSV column. Use when asked.", "Steps.\n")
        with pytest.raises(SkillRefused) as caught:
            store.patch("session/s1", "csv-sum", renamed, author="agent", reason="rename")
        assert caught.value.reason is Reason.CONFLICT
        with pytest.raises(SkillRefused) as caught:
            store.create("nowhere", files, author="owner", reason="x")
        assert caught.value.reason is Reason.BAD_SCOPE
        with pytest.raises(SkillRefused) as caught:
            store.create("global", files, author="somebody", reason="x")
        assert caught.value.reason is Reason.BAD_FORMAT
