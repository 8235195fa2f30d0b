"""``naga daemon install --user | --system`` through the command line."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from naga_core._units import SYSTEM_HOME, naga_executable
from tests.cli.conftest import Cli

ANALYZE = shutil.which("systemd-analyze")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_user_install_writes_the_unit_and_says_what_next(cli: Cli, tmp_path: Path) -> None:
    home, dest = tmp_path / "home", tmp_path / "units"
    out = cli("daemon", "install", "--user", "--home", str(home), "--dest", str(dest), "--json")
    assert out.code == 0, out.err
    doc = out.json()
    unit = dest / "naga.service"
    assert doc["ok"] is True
    assert doc["unit"] == "naga.service"
    assert doc["path"] == str(unit)
    assert doc["changed"] is True
    assert doc["home"] == str(home)
    assert doc["home_created"] is True
    assert doc["naga_bin"] == naga_executable()
    assert (
        "systemctl --user daemon-reload && systemctl --user enable --now naga"
        in (doc["next_steps"])
    )
    assert _mode(unit) == 0o644
    assert _mode(home) == 0o700
    text = unit.read_text()
    assert f"ExecStart={naga_executable()} daemon start --foreground --home {home}\n" in text

    again = cli("daemon", "install", "--user", "--home", str(home), "--dest", str(dest))
    assert again.code == 0
    assert again.out.splitlines()[0] == f"{unit} is already up to date"
    assert f"  home: {home}\n" in again.out
    assert "next:\n" in again.out


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_user_install_output_verifies(cli: Cli, tmp_path: Path) -> None:
    assert ANALYZE is not None
    dest = tmp_path / "units"
    cli("daemon", "install", "--user", "--home", str(tmp_path / "home"), "--dest", str(dest))
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    proc = subprocess.run(
        [ANALYZE, "--user", "verify", "--man=no", str(dest / "naga.service")],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_system_install_defaults_to_a_home_per_instance(cli: Cli, tmp_path: Path) -> None:
    out = cli("daemon", "install", "--system", "--dest", str(tmp_path), "--json")
    assert out.code == 0, out.err
    doc = out.json()
    assert doc["unit"] == "naga@.service"
    assert doc["home_created"] is False
    text = (tmp_path / "naga@.service").read_text()
    assert f"--home {SYSTEM_HOME}\n" in text
    assert "User=%i\n" in text

    pinned = cli("daemon", "install", "--system", "--dest", str(tmp_path), "--home", "/srv/naga")
    assert pinned.code == 0, pinned.err
    assert "--home /srv/naga\n" in (tmp_path / "naga@.service").read_text()
    assert not Path("/srv/naga").exists()  # the system install creates no home


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--user", "--home", "/tmp/a b"], "contains whitespace (' ')"),
        (["--user", "--home", "/tmp/%h"], "contains '%', which starts a systemd specifier"),
        (["--user", "--naga-bin", "/nonexistent/naga"], "is not an executable file"),
        (["--system", "--home", "/srv/$USER"], "contains '$'"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(
    cli: Cli, tmp_path: Path, argv: list[str], problem: str
) -> None:
    if "--home" not in argv:
        argv = [*argv, "--home", str(tmp_path / "home")]
    out = cli("daemon", "install", *argv, "--dest", str(tmp_path / "units"), "--json")
    assert out.code == 1
    assert problem in out.json()["error"]
    assert problem in out.err
    assert not (tmp_path / "units").exists()


def test_user_or_system_is_required(cli: Cli, tmp_path: Path) -> None:
    out = cli("daemon", "install", "--dest", str(tmp_path))
    assert out.code == 2
    assert "one of the arguments --user --system is required" in out.err
    both = cli("daemon", "install", "--user", "--system")
    assert both.code == 2
    assert "not allowed with argument" in both.err
    bare = cli("daemon")
    assert bare.code == 2
    assert "ACTION" in bare.err
