"""The ``model_server`` profile (the embedded local model's sandbox): what it
allows on paper, and attacks run under it by a real sandboxed child.

The real llama.cpp server runs under this profile in tests/localmodel; here
a small Python attacker stands in for a compromised server, so each
refusal is cheap to show: the model directory is read-only, nothing
outside the profile exists, and it has no network of its own (no TCP
socket at all: it serves only the listening socket the core hands it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from sandbox import _syscalls
from sandbox._policy import Action
from tests.sandbox.conftest import REPO_ROOT, Outcome, Range, Sentinel


@pytest.fixture
def models(tmp_path: Path) -> Path:
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / "model.gguf").write_bytes(b"GGUF weights")
    return directory


@pytest.fixture
def server_profile(attacker: Range, models: Path) -> sandbox.Profile:
    return sandbox.Profile.model_server(models, work_dir=attacker.work)


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as s:
        s.setblocking(False)
        yield s


def _refused(outcome: Outcome, expected: str) -> None:
    assert outcome.report == expected, f"attacker reported {outcome.report!r}; {outcome.exit}"
    assert outcome.exit.kind is sandbox.ExitKind.EXITED
    assert outcome.exit.code == 0


# --- on paper ----------------------------------------------------------------------


def test_the_profile_reads_its_model_and_has_no_network_of_its_own(models: Path) -> None:
    profile = sandbox.Profile.model_server(models)
    assert profile.kind is sandbox.Kind.MODEL_SERVER
    assert profile.name == "model_server"
    assert profile.network is sandbox.NetworkPolicy.ACCEPT
    assert profile.network.private_netns
    assert (profile.bind_ports, profile.connect_ports) == ((), ())
    assert profile.core_socket is None
    assert str(models) in profile.read_only
    assert "/etc/resolv.conf" not in profile.read_only  # no name resolution to do
    assert profile.env_allowed == frozenset({"OMP_WAIT_POLICY"})
    limits = profile.rlimits
    assert limits.address_space == sandbox.MODEL_SERVER_ADDRESS_SPACE
    assert limits.file_size == sandbox.MODEL_SERVER_LOG_LIMIT
    assert limits.cpu_seconds is None  # long-running: no CPU budget


def test_its_filter_accepts_on_a_socket_but_cannot_make_a_network_one() -> None:
    policy = _syscalls.model_server_policy()
    allowed = policy.syscalls(Action.ALLOW)
    assert {"listen", "accept", "accept4"} <= allowed
    assert "bind" not in allowed
    families = {
        rule.args[0].value for rule in policy.rules_for("socket") if rule.action is Action.ALLOW
    }
    assert families == {socket.AF_UNIX}
    for name in ("mlock", "mlock2", "mlockall"):
        assert policy.unconditional(name) is Action.ERRNO
    for name in ("execve", "ptrace", "mount"):
        assert policy.unconditional(name) is Action.KILL_PROCESS


@pytest.mark.parametrize("bad", ["relative/models", "", "/no/such/models"])
def test_a_bad_model_directory_is_refused(bad: str) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="model directory"):
        sandbox.Profile.model_server(bad)


def test_a_model_file_instead_of_its_directory_is_refused(models: Path) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="not a directory"):
        sandbox.Profile.model_server(models / "model.gguf")


def test_a_work_directory_inside_the_model_directory_is_refused(models: Path) -> None:
    inside = models / "work"
    inside.mkdir()
    with pytest.raises(sandbox.ProfileInvalid, match="overlaps the read-only path"):
        sandbox.Profile.model_server(models, work_dir=inside)


def test_only_the_openmp_setting_passes_into_its_environment(
    attacker: Range, server_profile: sandbox.Profile
) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="'API_KEY' is not allowed"):
        sandbox.launch(
            server_profile,
            "tests.sandbox._attacks:run",
            forker=attacker.forker,
            env={"API_KEY": "k"},
        )


# --- attacks -----------------------------------------------------------------------


def test_reading_etc_passwd_finds_nothing(
    attacker: Range, server_profile: sandbox.Profile, sentinel: Sentinel
) -> None:
    _refused(attacker.run("read_etc_passwd", profile=server_profile), "ENOENT")
    sentinel.assert_intact()


def test_the_model_cannot_be_changed(
    attacker: Range, server_profile: sandbox.Profile, models: Path, sentinel: Sentinel
) -> None:
    model = models / "model.gguf"
    outcome = attacker.run("truncate_read_only", str(model), profile=server_profile)
    _refused(outcome, "EROFS,EROFS")  # open(O_TRUNC), truncate()
    assert model.read_bytes() == b"GGUF weights"
    sentinel.assert_intact()


def test_connecting_out_is_refused(
    attacker: Range,
    server_profile: sandbox.Profile,
    tcp_listener: socket.socket,
    sentinel: Sentinel,
) -> None:
    port = str(tcp_listener.getsockname()[1])
    _refused(attacker.run("tcp_connect", port, profile=server_profile), "EPERM")
    _refused(attacker.run("udp_send", port, profile=server_profile), "EPERM")
    with pytest.raises(BlockingIOError):
        tcp_listener.accept()
    sentinel.assert_intact()


def test_binding_a_port_of_its_own_is_refused(
    attacker: Range, server_profile: sandbox.Profile, sentinel: Sentinel
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    _refused(attacker.run("tcp_bind", port, profile=server_profile), "EPERM")
    sentinel.assert_intact()


def test_pinning_memory_is_refused(
    attacker: Range, server_profile: sandbox.Profile, sentinel: Sentinel
) -> None:
    _refused(attacker.run("mlock_memory", profile=server_profile), "EPERM")
    sentinel.assert_intact()


def test_the_new_attacks_succeed_without_the_sandbox(
    attacker: Range, tcp_listener: socket.socket
) -> None:
    # The refusals above are the sandbox's, not the attack code's.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = str(probe.getsockname()[1])
    code = "import sys; from tests.sandbox._attacks import run; run(['1', *sys.argv[1:]])"
    for attack in (("tcp_bind", free), ("udp_send", free), ("mlock_memory",)):
        result = subprocess.run(
            [sys.executable, "-c", code, *attack],
            cwd=attacker.work,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert result.stdout.decode().startswith("ESCAPED"), (attack, result.stdout)
