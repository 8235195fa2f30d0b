"""The systemd units: rendering, refused paths, installing, and what
``systemd-analyze`` says about the rendered files."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from naga_core._units import (
    SYSTEM_HOME,
    SYSTEM_UNIT,
    USER_UNIT,
    UnitError,
    default_user_unit_dir,
    install_system_unit,
    install_user_units,
    naga_executable,
    render_system_unit,
    render_user_unit,
    template_dirs,
    unit_path,
)
from naga_core.errors import ConfigError

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (no systemd on this machine)"
)
TEMPLATES = Path(template_dirs()[0])
BIN = "/opt/naga/bin/naga"
HOME = "/home/alice/.naga"


def directives(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values, in order (a unit file's keys may repeat)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in text.splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key, []).append(value)
    return out


def one(d: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = d[section].get(key)
    assert values is not None, f"no {section}/{key}"
    assert len(values) == 1, f"{section}/{key}: {values}"
    return values[0]


def venv_naga() -> str:
    path = naga_executable()
    assert os.access(path, os.X_OK)
    return path


# --- rendering ----------------------------------------------------------------------------


def test_user_unit_is_rendered_with_absolute_paths() -> None:
    unit = render_user_unit(home=HOME, naga_bin=BIN)
    assert unit.name == USER_UNIT
    assert "@NAGA_" not in unit.text
    d = directives(unit.text)
    assert one(d, "Service", "ExecStart") == f"{BIN} daemon start --foreground --home {HOME}"
    assert d["Service"]["Environment"] == [f"NAGA_HOME={HOME}", "PYTHONUNBUFFERED=1"]
    assert one(d, "Service", "ReadWritePaths") == HOME
    assert one(d, "Install", "WantedBy") == "default.target"


def test_system_unit_runs_as_the_instance_user_in_its_state_directory() -> None:
    d = directives(render_system_unit(naga_bin=BIN).text)
    assert one(d, "Service", "User") == "%i"
    assert one(d, "Service", "ExecStart") == (
        f"{BIN} daemon start --foreground --home {SYSTEM_HOME}"
    )
    assert one(d, "Service", "StateDirectory") == "naga/%i"
    assert one(d, "Service", "StateDirectoryMode") == "0700"
    assert one(d, "Service", "ReadWritePaths") == SYSTEM_HOME
    fixed = directives(render_system_unit(naga_bin=BIN, home="/srv/naga").text)
    assert one(fixed, "Service", "ReadWritePaths") == "/srv/naga"


COMMON = {
    ("Unit", "StartLimitIntervalSec"): "300",
    ("Unit", "StartLimitBurst"): "5",
    ("Service", "Type"): "notify",
    ("Service", "NotifyAccess"): "main",
    ("Service", "WatchdogSec"): "30",
    ("Service", "Restart"): "on-failure",
    ("Service", "RestartSec"): "5",
    ("Service", "TimeoutStopSec"): "30",
    ("Service", "KillMode"): "mixed",
    ("Service", "UMask"): "0077",
    ("Service", "NoNewPrivileges"): "yes",
    ("Service", "ProtectSystem"): "strict",
    ("Service", "ProtectHome"): "read-only",
    ("Service", "PrivateTmp"): "yes",
    ("Service", "PrivateDevices"): "yes",
    ("Service", "ProtectKernelTunables"): "yes",
    ("Service", "ProtectKernelModules"): "yes",
    ("Service", "ProtectKernelLogs"): "yes",
    ("Service", "RestrictSUIDSGID"): "yes",
    ("Service", "LockPersonality"): "yes",
    ("Service", "RestrictRealtime"): "yes",
    ("Service", "SystemCallArchitectures"): "native",
    ("Service", "SystemCallErrorNumber"): "EPERM",
}


@pytest.mark.parametrize("kind", ["user", "system"])
def test_both_units_carry_the_lifecycle_and_hardening_directives(kind: str) -> None:
    text = (
        render_user_unit(home=HOME, naga_bin=BIN)
        if kind == "user"
        else render_system_unit(naga_bin=BIN)
    ).text
    d = directives(text)
    got = {(section, key): one(d, section, key) for section, key in COMMON}
    assert got == COMMON
    assert "ExecStop" not in d["Service"]  # SIGTERM is the stop request
    if kind == "system":
        assert one(d, "Service", "ProtectControlGroups") == "yes"
        assert one(d, "Service", "ProtectProc") == "invisible"
        assert one(d, "Service", "CapabilityBoundingSet") == ""
    else:  # namespacing in a user manager needs a user namespace of its own
        assert one(d, "Service", "PrivateUsers") == "yes"


@pytest.mark.parametrize("template", ["user/naga.service", "system/naga@.service"])
def test_every_directive_says_why(template: str) -> None:
    """Each directive has a comment above it, shared by at most two lines."""
    lines = (TEMPLATES / template).read_text().splitlines()
    uncommented: list[str] = []
    run = 0
    for i, line in enumerate(lines):
        if not line or line.startswith("[") or line.startswith("#"):
            run = 0
            continue
        run += 1
        if run > 2 or not lines[i - run].startswith("#"):
            uncommented.append(line)
    assert uncommented == []


# --- the core's own sandbox must survive the unit's --------------------------------------

#: What the sandbox does to each child (unshare, Landlock, seccomp, rlimits)
#: and what the core itself needs.
SANDBOX_SYSCALLS = {
    "unshare",
    "setns",
    "clone",
    "clone3",
    "prctl",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "prlimit64",
    "setrlimit",
    "setgroups",
    "execve",
    "socket",
    "sendmsg",
}


def _expand(groups: list[str]) -> set[str]:
    """Syscall names of systemd's filter groups, as systemd itself lists them."""
    assert ANALYZE is not None
    names: set[str] = set()
    for g in groups:
        if not g.startswith("@"):
            names.add(g)
            continue
        out = subprocess.run(
            [ANALYZE, "syscall-filter", g], capture_output=True, text=True, check=True
        ).stdout
        for line in out.splitlines()[1:]:
            word = line.strip()
            if word and not word.startswith("#"):
                names |= _expand([word]) if word.startswith("@") else {word}
    return names


@needs_analyze
@pytest.mark.parametrize("kind", ["user", "system"])
def test_the_unit_leaves_the_sandbox_its_namespaces_and_syscalls(kind: str) -> None:
    text = TEMPLATES / ("user/naga.service" if kind == "user" else "system/naga@.service")
    d = directives(text.read_text())
    assert set(one(d, "Service", "RestrictNamespaces").split()) == {"user", "net"}
    deny = one(d, "Service", "SystemCallFilter")
    assert deny.startswith("~"), "an allow list would have to name seccomp and landlock_*"
    denied = _expand(deny[1:].split())
    assert {"ptrace", "init_module", "reboot", "mount", "bpf"} <= denied
    assert denied & SANDBOX_SYSCALLS == set()
    assert "MemoryDenyWriteExecute" not in d["Service"]
    families = set(one(d, "Service", "RestrictAddressFamilies").split())
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= families


# --- refused paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("naga/bin/naga", "is not an absolute path"),
        ("~/.naga", "is not an absolute path"),
        ("", "is not an absolute path"),
        ("/home/a b/.naga", "contains whitespace (' '), which splits"),
        ("/home/a\tb", "contains whitespace ('\\t')"),
        ("/home/a\nExecStartPre=/bin/sh", "contains whitespace ('\\n')"),
        ("/home/%h/.naga", "contains '%', which starts a systemd specifier"),
        ("/home/$USER/.naga", "contains '$', which is expanded by systemd"),
        ("/home/a\\x20b", "starts a systemd escape sequence"),
        ('/home/"a"', "is a systemd quote"),
        ("/home/'a'", "is a systemd quote"),
        ("/home/a\x07", "contains the control character '\\x07'"),
        ("/home/\udcff", "is not valid UTF-8"),
        ("/", "must not be the root directory"),
        ("//./", "must not be the root directory"),
    ],
)
def test_paths_systemd_would_misparse_are_refused(path: str, problem: str) -> None:
    with pytest.raises(UnitError, match=re.escape(problem)):
        render_user_unit(home=path, naga_bin=BIN)
    with pytest.raises(UnitError, match=re.escape(problem)):
        render_system_unit(naga_bin=path)


def test_refusals_name_the_path_and_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=re.escape("naga executable 'bin/naga'")):
        render_user_unit(home=HOME, naga_bin="bin/naga")


def test_paths_are_normalised_and_unusual_but_safe_names_pass() -> None:
    assert unit_path("x", "/opt//naga/./bin/../bin/naga") == "/opt/naga/bin/naga"
    assert unit_path("x", "//srv/naga/") == "/srv/naga"
    for ok in ("/home/zoë/.naga", "/srv/naga-1.0_a+b@c,d:e=f~g", "/srv/naga;x"):
        assert unit_path("x", ok) == ok


# --- installing ------------------------------------------------------------------------


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_install_writes_the_unit_atomically_with_mode_0644(tmp_path: Path) -> None:
    dest = tmp_path / "units"
    home = tmp_path / "home"
    naga = venv_naga()
    first = install_user_units(str(home), naga, str(dest))
    assert first.path == str(dest / USER_UNIT)
    assert first.unit == USER_UNIT
    assert first.changed
    assert first.home_created
    assert (dest / USER_UNIT).read_text() == render_user_unit(home=str(home), naga_bin=naga).text
    assert _mode(dest / USER_UNIT) == 0o644
    assert os.listdir(dest) == [USER_UNIT]  # no temp file left behind
    assert _mode(home) == 0o700
    assert any(
        "systemctl --user daemon-reload && systemctl --user enable --now naga" in s
        for s in first.next_steps
    )
    assert any(s.startswith(f"systemctl --user link {first.path}") for s in first.next_steps)

    again = install_user_units(str(home), naga, str(dest))
    assert not again.changed
    assert not again.home_created

    (dest / USER_UNIT).write_text("[Service]\nExecStart=/old\n")
    os.chmod(dest / USER_UNIT, 0o600)
    replaced = install_user_units(str(home), naga, str(dest))
    assert replaced.changed
    assert "ExecStart=/old" not in (dest / USER_UNIT).read_text()
    assert _mode(dest / USER_UNIT) == 0o644


def test_install_defaults_to_the_users_unit_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    result = install_user_units(str(tmp_path / "home"), venv_naga())
    assert result.path == str(tmp_path / "config" / "systemd" / "user" / USER_UNIT)
    assert not any("link" in s for s in result.next_steps)


def test_default_user_unit_dir_follows_xdg() -> None:
    home = os.path.expanduser("~")
    assert default_user_unit_dir({}) == f"{home}/.config/systemd/user"
    assert default_user_unit_dir({"XDG_CONFIG_HOME": "/cfg"}) == "/cfg/systemd/user"
    # The XDG spec says a relative value is invalid and to be ignored.
    assert default_user_unit_dir({"XDG_CONFIG_HOME": "cfg"}) == f"{home}/.config/systemd/user"


def test_install_refuses_a_missing_executable_and_writes_nothing(tmp_path: Path) -> None:
    not_exec = tmp_path / "naga"
    not_exec.write_text("#!/bin/sh\n")
    for naga in (str(tmp_path / "missing"), str(not_exec)):
        with pytest.raises(UnitError, match="is not an executable file"):
            install_user_units(str(tmp_path / "home"), naga, str(tmp_path / "units"))
    assert not (tmp_path / "units").exists()
    assert not (tmp_path / "home").exists()


def test_install_refuses_a_home_others_can_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    with pytest.raises(ConfigError, match="must not be readable by others"):
        install_user_units(str(home), venv_naga(), str(tmp_path / "units"))
    assert not (tmp_path / "units" / USER_UNIT).exists()


def test_install_system_unit(tmp_path: Path) -> None:
    result = install_system_unit(venv_naga(), str(tmp_path))
    assert result.path == str(tmp_path / SYSTEM_UNIT)
    assert _mode(result.path) == 0o644
    assert "naga@USER.service" in result.next_steps[-1]


# --- systemd-analyze verify -------------------------------------------------------------


def _verify(unit: str, *, user: bool, runtime: Path) -> tuple[int, str]:
    assert ANALYZE is not None
    env = {k: v for k, v in os.environ.items() if k != "SYSTEMD_LOG_LEVEL"}
    cmd = [ANALYZE]
    if user:  # a user manager needs a runtime directory, even an empty one
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        cmd.append("--user")
    cmd += ["verify", "--man=no", unit]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=60)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


@needs_analyze
def test_the_installed_user_unit_verifies_clean(tmp_path: Path) -> None:
    result = install_user_units(str(tmp_path / "home"), venv_naga(), str(tmp_path / "units"))
    assert _verify(result.path, user=True, runtime=tmp_path / "rt") == (0, "")


@needs_analyze
@pytest.mark.parametrize("home", [None, "/srv/naga"])
def test_the_system_unit_verifies_clean_as_an_instance(tmp_path: Path, home: str | None) -> None:
    install_system_unit(venv_naga(), str(tmp_path), home=home)
    assert _verify(str(tmp_path / "naga@root.service"), user=False, runtime=tmp_path) == (0, "")


@needs_analyze
def test_verification_does_catch_a_bad_unit(tmp_path: Path) -> None:
    """The clean results above mean something: a broken unit is reported."""
    text = render_user_unit(home=str(tmp_path), naga_bin=venv_naga()).text
    broken = tmp_path / USER_UNIT
    broken.write_text(text.replace("KillMode=mixed", "KillMode=gently"))
    code, out = _verify(str(broken), user=True, runtime=tmp_path / "rt")
    assert "Failed to parse kill mode specification, ignoring: gently" in out, (code, out)
    missing = tmp_path / "units" / USER_UNIT
    missing.parent.mkdir()
    missing.write_text(render_user_unit(home=str(tmp_path), naga_bin="/nonexistent/naga").text)
    code, out = _verify(str(missing), user=True, runtime=tmp_path / "rt")
    assert code != 0
    assert "/nonexistent/naga is not executable" in out


def test_naga_executable_is_this_installation() -> None:
    assert os.path.dirname(naga_executable()) == os.path.dirname(os.path.abspath(sys.executable))
