"""A home plugin's data belongs to its install, not to its name (issue 11;
naga_core/plugins/_data.py).

The attack: every plugin's work directory was ``work/plugins/<name>``, so a
plugin installed under the name of a removed one was handed its data (the
removed plugin's notes, tokens, login state). Here, through a real core and
real sandboxed workers: plugin A named ``keeper`` writes a diary, is
removed; plugin B, other code under the same name, is installed and sees
nothing of A's. Rolling the removal back brings A and its diary back; an
upgrade of A keeps it; and a home from before (data under the bare name,
no registration) keeps its data once, under ``<name>@legacy``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import cast

import pytest

from naga.sdk import Client
from naga_core.cli import main as cli_main
from naga_core.plugins import PluginsConfig, code_hash
from tests.daemon.conftest import core_in_thread, home
from tests.plugin_host.conftest import READY_S, STEADY, data_dir

__all__ = ["home"]  # the fixture, used by name below

MANIFEST = """\
name = "keeper"
version = "{version}"
kind = "tool"
description = "{description}"
entry = "keeper:main"

[[tools]]
name = "keeper.write"
risk = "R1"
description = "Write a diary into its work directory"
[tools.params.text]
type = "string"

[[tools]]
name = "keeper.read"
risk = "R1"
description = "What its work directory holds"
"""

CODE = """\
import os

from naga_plugins import Plugin

plugin = Plugin("keeper")


@plugin.tool("keeper.write")
def write(text):
    with open("diary", "w") as f:
        f.write(text)
    return "written"


@plugin.tool("keeper.read")
def read():
    diary = None
    if os.path.exists("diary"):
        with open("diary") as f:
            diary = f.read()
    return {{"files": sorted(os.listdir(".")), "diary": diary, "who": {who!r}}}


main = plugin.main
"""


def _plugin(at: Path, who: str, version: str = "1.0.0") -> Path:
    at.mkdir(parents=True)
    (at / "plugin.toml").write_text(MANIFEST.format(version=version, description=f"Keeper {who}"))
    (at / "keeper.py").write_text(CODE.format(who=who))
    return at


def _install(c: Client, folder: Path) -> int:
    return c.install_plugin(str(folder), code_hash(str(folder))).seq


def _read(c: Client) -> dict[str, object]:
    c.enable_plugin("keeper", wait=READY_S)
    seen = c.invoke("keeper", "keeper.read", {}, timeout=READY_S)
    assert isinstance(seen, dict)
    return cast("dict[str, object]", seen)


def _rollback(home: str, seq: int, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli_main(["rollback", "--to", str(seq), "--yes", "--home", home]) == 0
    capsys.readouterr()


def _config() -> PluginsConfig:
    return PluginsConfig(tuning=STEADY)


def _known_name(home: str, tmp_path: Path) -> None:
    # A new plugin name needs a core restart (components are fixed when the
    # kernel opens): a copy left in the home (never run) makes it known.
    Path(home).mkdir(mode=0o700)
    shutil.copytree(_plugin(tmp_path / "seed", "seed"), Path(home, "plugins", "keeper"))


def test_a_plugin_installed_under_a_removed_ones_name_sees_none_of_its_data(
    home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _known_name(home, tmp_path)
    a = _plugin(tmp_path / "a", "A")
    b = _plugin(tmp_path / "b", "B")
    with core_in_thread(home, plugins=_config()) as core, core.client() as c:
        _install(c, a)
        c.enable_plugin("keeper", wait=READY_S)
        assert c.invoke("keeper", "keeper.write", {"text": "A's secret"}) == "written"
        a_data = data_dir(home, "keeper")
        assert (a_data / "diary").read_text() == "A's secret"
        # An upgrade of A (installed while A is) keeps A's data.
        upgrade = _plugin(tmp_path / "a2", "A", version="1.1.0")
        _install(c, upgrade)
        c.replace_plugin("keeper", "1.1.0", wait=READY_S)
        assert _read(c)["diary"] == "A's secret"

        removed_at = c.head().size
        c.remove_plugin("keeper")
        _install(c, b)
        seen = _read(c)
        assert seen["who"] == "B"
        assert (seen["files"], seen["diary"]) == ([], None), seen
        dirs = sorted(Path(home, "work", "plugins").glob("keeper@*"))
        assert len(dirs) == 2, dirs  # B's own, beside A's
        assert a_data in dirs, dirs
        # A's files stay on disk (a rollback may want them), reached by no one.
        assert (a_data / "diary").read_text() == "A's secret"

        # Undo B's install and A's removal: A and its diary are back.
        _rollback(home, removed_at - 1, capsys)
        seen = _read(c)
        assert (seen["who"], seen["diary"]) == ("A", "A's secret"), seen


def test_a_home_from_before_keeps_its_data_once_under_legacy(
    home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _known_name(home, tmp_path)
    a = _plugin(tmp_path / "a", "A")
    with core_in_thread(home, plugins=_config()) as core, core.client() as c:
        installed = _install(c, a)
        # The install's own registration kept, its data registration undone:
        # the ledger of a home installed before data was keyed by install.
        _rollback(home, installed, capsys)
        c.shutdown("as before")
        core.join()
    for stale in Path(home, "work", "plugins").glob("keeper@*"):
        shutil.rmtree(stale)
    legacy = Path(home, "work", "plugins", "keeper")
    legacy.mkdir(parents=True)
    (legacy / "diary").write_text("from before")
    with core_in_thread(home, plugins=_config()) as core, core.client() as c:
        assert _read(c)["diary"] == "from before"
        assert data_dir(home, "keeper").name == "keeper@legacy"
        assert not legacy.exists()
        c.shutdown("again")
        core.join()
    # Once: the next start moves nothing and reads the same directory.
    with core_in_thread(home, plugins=_config()) as core, core.client() as c:
        assert _read(c)["diary"] == "from before"
