"""``naga plugin install`` with the owner's consent, through a real core
(issue 11, item 6).

The attack: a folder copied into ``$NAGA_HOME/plugins`` ran at the next
``enable`` with whatever its manifest asked, and nobody was shown it. Here
the copied-in folder is listed as not installed and refused; ``install``
shows what it asks (exact wording), refuses without a yes, installs the
code shown with ``--yes``; install and remove are ledger effects that
``naga rollback`` undoes."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from naga.sdk import errors as sdk_errors
from naga_core.cli import main as cli_main
from naga_core.plugins import PluginsConfig, code_hash
from tests.daemon.conftest import core_in_thread, home
from tests.plugin_host.conftest import PLUGINS, READY_S, STEADY

__all__ = ["home"]  # the fixture, used by name below

GREETER = PLUGINS / "greeter-1"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code, out, _ = _cli_err(capsys, *argv)
    return code, out


def _cli_err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(list(argv))
    said = capsys.readouterr()
    return code, said.out, said.err


def test_a_copied_in_plugin_does_not_run_and_install_needs_the_owners_yes(
    home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = Path(home, "plugins", "greeter")
    shutil.copytree(GREETER, copied)
    os.chmod(home, 0o700)
    digest = code_hash(str(GREETER))
    with core_in_thread(home, plugins=PluginsConfig(tuning=STEADY)) as core, core.client() as c:
        (greeter,) = [p for p in c.plugins() if p.name == "greeter"]
        assert greeter.version == ""
        (problem,) = greeter.problems
        assert f"{copied}: not installed (copied in, or changed since it was installed)" in problem
        assert f"`naga plugin install {copied}`" in problem
        with pytest.raises(sdk_errors.SdkError, match="not installed"):
            c.enable_plugin("greeter", wait=READY_S)

        # Shown, and refused without a yes (no terminal here to answer).
        code, out = _cli(capsys, "plugin", "install", str(GREETER), "--home", home)
        assert code == 1
        assert out.splitlines() == [
            f"Plugin greeter 1.0.0 (tool) from {GREETER}",
            "  Greets (version 1: in English)",
            "It asks for:",
            "  capabilities: none",
            "  network: none",
            "  tools:",
            "    greeter.greet (R0): A greeting for a name",
            f"  code: sha256 {digest}",
            "Its tools run at most at the risk levels shown (R0 reads only .. R4 destroys); "
            "installing it is a ledger entry that `naga rollback` undoes.",
        ]
        assert "greeter" not in {p.name for p in c.plugins() if p.version}
        before = c.head().size

        # An archive of the same code, approved.
        archive = tmp_path / "greeter.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(GREETER, arcname="greeter")
        code, out = _cli(
            capsys, "plugin", "install", str(archive), "--yes", "--json", "--home", home
        )
        said = json.loads(out)
        assert code == 0, said
        assert said["asks"]["tools"] == [{"name": "greeter.greet", "risk": "R0"}]
        assert said["asks"]["code_hash"] == digest
        assert said["restart_needed"] is False
        assert Path(said["directory"]).name == f"greeter-1.0.0-{digest[:12]}"
        started = c.enable_plugin("greeter", wait=READY_S).plugin
        assert (started.version, started.directory) == ("1.0.0", said["directory"])
        assert c.invoke("greeter", "greeter.greet", {"name": "Ada"})

        # Rolled back: not installed any more, its worker stops.
        code, _ = _cli(capsys, "rollback", "--to", str(before - 1), "--yes", "--home", home)
        assert code == 0
        (greeter,) = [p for p in c.plugins() if p.name == "greeter"]
        assert greeter.version == ""
        assert not greeter.enabled

        # Installed again, then removed, then the removal rolled back.
        assert _cli(capsys, "plugin", "install", str(GREETER), "--yes", "--home", home)[0] == 0
        installed = c.head().size
        code, out = _cli(capsys, "plugin", "remove", "greeter", "--json", "--home", home)
        assert code == 0, out
        assert [p.version for p in c.plugins() if p.name == "greeter"] == [""]
        assert _cli(capsys, "rollback", "--to", str(installed - 1), "--yes", "--home", home)[0] == 0
        assert [p.version for p in c.plugins() if p.name == "greeter"] == ["1.0.0"]

        # A shipped name is not installable; nor is code other than approved.
        fake = tmp_path / "notes"
        shutil.copytree(GREETER, fake)
        toml = (fake / "plugin.toml").read_text().replace('"greeter', '"notes')
        (fake / "plugin.toml").write_text(toml)
        code, _, err = _cli_err(capsys, "plugin", "install", str(fake), "--yes", "--home", home)
        assert code == 1
        assert "'notes' is the name of a plugin shipped with Naga" in err
        assert not list(Path(home, "plugins").glob("notes-*")), "nothing of it was placed"
        with pytest.raises(sdk_errors.SdkError, match="not the code approved"):
            c.install_plugin(str(GREETER), "0" * 64)
        c.shutdown("done")
        core.join()
