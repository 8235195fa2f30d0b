"""``naga doctor``: every check's pass and fail path on real files, sockets
and processes in a temporary home, and the command end to end."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from naga_core._doctor import (
    Check,
    CheckResult,
    cgroups_verdict,
    checks_for,
    flock_holder,
    run_checks,
)
from naga_core._home import Home
from tests.cli.conftest import Cli, LedgerHome, naga_command
from tests.daemon.conftest import start_core_process

# --- fixtures -----------------------------------------------------------------------


@pytest.fixture
def home(base_home: LedgerHome) -> Iterator[LedgerHome]:
    """A healthy home with a ledger, at a short path: a Unix socket's path
    (run/core.sock) must fit in 107 bytes, which tmp_path does not promise."""
    d = tempfile.mkdtemp(prefix="naga-dr-")
    try:
        yield base_home.copy_to(os.path.join(d, "home"))
    finally:
        shutil.rmtree(d)


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Processes:
    """Real processes for pid files to name; each is killed at teardown."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def sleeper(self, *, naga: bool) -> int:
        """A live process, blocked reading stdin; ``naga`` puts the word in
        its command line, as the core's (``.../bin/naga daemon start``) has."""
        argv = ["sh", "-c", "read line", "naga-core" if naga else "other-program"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE)
        self._procs.append(proc)
        return proc.pid

    def ledger_holder(self, home: Home) -> int:
        """A process holding the home's ledger open for writing (its lock)."""
        code = (
            "import sys\n"
            "from naga_core._store import open_ledger\n"
            "from naga_core._home import Home\n"
            "with open_ledger(Home(sys.argv[1]), create=False):\n"
            "    print('ready', flush=True)\n"
            "    sys.stdin.read()\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, home.root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        self._procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        return proc.pid

    def dead(self) -> int:
        proc = subprocess.Popen(["sh", "-c", "exit 0"])
        proc.wait()
        return proc.pid

    def close(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def procs() -> Iterator[Processes]:
    p = Processes()
    yield p
    p.close()


def check(home: LedgerHome | Home, name: str, port: int | None = None) -> CheckResult:
    h = home.home if isinstance(home, LedgerHome) else home
    webchat = ("127.0.0.1", port if port is not None else 1)
    (only,) = [c for c in checks_for(h, webchat=webchat) if c.name == name]
    return only.run()


def assert_fails(result: CheckResult, pattern: str) -> None:
    assert not result.ok, result
    assert re.search(pattern, result.detail), result.detail


def run_dir(home: LedgerHome) -> Path:
    d = Path(home.root) / "run"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def bind_socket(path: Path, mode: int = 0o600) -> None:
    """A socket file as the core leaves it (the socket itself is closed)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    os.chmod(path, mode)


def core_running(home: LedgerHome, procs: Processes) -> int:
    pid = procs.sleeper(naga=True)
    bind_socket(run_dir(home) / "core.sock")
    (run_dir(home) / "core.pid").write_text(f"{pid}\n")
    return pid


# --- a healthy home ---------------------------------------------------------------------


def test_a_healthy_home_passes_every_check(home: LedgerHome, free_port: int) -> None:
    results = run_checks(checks_for(home.home, webchat=("127.0.0.1", free_port)))
    assert [r.name for r in results] == [
        "home permissions",
        "key files",
        "token key",
        "credentials",
        "model provider",
        "ledger",
        "constitution",
        "run directory",
        "core process",
        "core answers",
        "webchat port",
        "sandbox",
        "cgroups",
    ]
    assert [r for r in results if not r.ok] == []
    by_name = {r.name: r for r in results}
    assert (
        by_name["home permissions"].line()
        == f"ok   home permissions: {home.root} is 0700, owned by you"
    )
    assert by_name["ledger"].detail.startswith(f"verified: {home.records} records")
    assert by_name["webchat port"].detail == f"127.0.0.1:{free_port} is free"


def test_the_cgroups_check_names_the_fallback_and_why() -> None:
    none = sandbox.CgroupSupport(sandbox.CgroupVersion.NONE, reason="no writable hierarchy")
    ok, said = cgroups_verdict(none)
    assert ok  # a fallback, not a failure
    assert said == (
        "none: each worker's CPU share is the supervisor's windowed check and a renice, "
        "its memory the resident check (no writable hierarchy)"
    )
    v1 = sandbox.CgroupSupport(sandbox.CgroupVersion.V1, "/cg/cpu/naga", "/cg/mem/naga", "why")
    assert cgroups_verdict(v1) == (
        True,
        "v1 (cpu quota, memory ceiling) under /cg/cpu/naga, /cg/mem/naga; not v2: why",
    )


# --- home -------------------------------------------------------------------------------


def test_home_wider_than_0700_fails(home: LedgerHome) -> None:
    os.chmod(home.root, 0o750)
    assert_fails(
        check(home, "home permissions"),
        re.escape(f"{home.root} is 0750, must be 0700 (chmod 700 {home.root})"),
    )


def test_missing_home_fails_and_so_does_the_ledger(tmp_path: Path) -> None:
    missing = Home(str(tmp_path / "nothing"))
    assert_fails(check(missing, "home permissions"), "does not exist")
    assert_fails(check(missing, "ledger"), "no ledger at")
    # What cannot be wrong in an absent home passes.
    assert check(missing, "key files").ok
    assert check(missing, "credentials").ok
    assert check(missing, "core process").ok
    assert not (tmp_path / "nothing").exists()  # the doctor creates nothing


def test_a_file_where_the_home_should_be_fails(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("")
    assert_fails(check(Home(str(tmp_path / "home")), "home permissions"), "is not a directory")


# --- keys -------------------------------------------------------------------------------


def test_ledger_key_readable_by_others_fails(home: LedgerHome) -> None:
    key = home.home.signing_key_path
    os.chmod(key, 0o644)
    assert_fails(check(home, "key files"), re.escape(f"{key} is 0644, wider than 0600 (chmod 600"))
    # The ledger check cannot verify with a key it refuses to load; it says so.
    assert_fails(check(home, "ledger"), "could not check: .*must be 0600")
    assert check(home, "home permissions").ok


def test_token_key_is_checked_when_present(home: LedgerHome) -> None:
    token = Path(home.home.keys_dir) / "token.key"
    token.write_bytes(b"k" * 32)
    os.chmod(token, 0o600)
    result = check(home, "key files")
    assert result.ok
    assert "ledger.key, token.key" in result.detail
    os.chmod(token, 0o640)
    assert_fails(check(home, "key files"), re.escape(f"{token} is 0640"))


def test_the_token_key_is_what_the_core_would_accept(home: LedgerHome) -> None:
    token = Path(home.home.keys_dir) / "token.key"
    assert check(home, "token key").detail.startswith(f"no {token} yet")
    token.write_bytes(b"k" * 32)
    os.chmod(token, 0o600)
    assert check(home, "token key").detail == (
        f"{token} is 0600, 32 bytes, yours: capability tokens can be checked"
    )
    os.chmod(token, 0o644)
    assert_fails(check(home, "token key"), re.escape(f"{token} has mode 0644; it must be 0600"))
    os.chmod(token, 0o600)
    token.write_bytes(b"k" * 31)
    assert_fails(check(home, "token key"), "holds 31 bytes; a token root key is exactly 32")


def test_missing_ledger_key_fails(home: LedgerHome) -> None:
    os.remove(home.home.signing_key_path)
    assert_fails(check(home, "key files"), "ledger.key is missing; the ledger cannot be signed")


def test_key_file_symlink_fails(home: LedgerHome, tmp_path: Path) -> None:
    key = home.home.signing_key_path
    elsewhere = tmp_path / "ledger.key"
    shutil.move(key, elsewhere)
    os.symlink(elsewhere, key)
    assert_fails(check(home, "key files"), "is a symlink; a private file must be a regular file")


def test_keys_directory_wider_than_0700_fails(home: LedgerHome) -> None:
    os.chmod(home.home.keys_dir, 0o755)
    assert_fails(check(home, "key files"), re.escape(f"{home.home.keys_dir} is 0755, must be 0700"))


# --- credentials -----------------------------------------------------------------------


def test_provider_credentials_mode(home: LedgerHome) -> None:
    assert check(home, "credentials").detail.startswith("no ")
    creds = Path(home.root) / "credentials"
    creds.mkdir(mode=0o700)
    providers = creds / "providers.json"
    providers.write_text("{}")
    os.chmod(providers, 0o600)
    assert check(home, "credentials").ok
    os.chmod(providers, 0o400)
    assert check(home, "credentials").ok  # narrower is fine
    os.chmod(providers, 0o604)
    assert_fails(check(home, "credentials"), re.escape(f"{providers} is 0604, wider than 0600"))
    os.chmod(providers, 0o600)
    os.chmod(creds, 0o711)
    assert_fails(check(home, "credentials"), re.escape(f"{creds} is 0711, must be 0700"))


# --- ledger -----------------------------------------------------------------------------


def test_tampered_ledger_fails_naming_the_place(home: LedgerHome) -> None:
    log = home.sealed_logs[0]
    with open(log, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert_fails(check(home, "ledger"), "NOT verified, [0-9]+ problem.*" + re.escape(log))


def test_ledger_held_by_the_running_core_is_not_a_failure(
    home: LedgerHome, procs: Processes
) -> None:
    holder = procs.ledger_holder(home.home)
    assert flock_holder(os.path.join(home.home.ledger_dir, "LOCK")) == holder
    (run_dir(home) / "core.pid").write_text(f"{holder}\n")
    result = check(home, "ledger")
    assert result.ok, result
    assert result.detail.startswith(f"held by the running core (pid {holder})")


def test_ledger_held_by_another_process_fails(home: LedgerHome, procs: Processes) -> None:
    holder = procs.ledger_holder(home.home)
    assert_fails(
        check(home, "ledger"),
        re.escape(f"the ledger is held by pid {holder}, which is not a running core"),
    )


def test_an_unlocked_ledger_has_no_holder(home: LedgerHome) -> None:
    assert flock_holder(os.path.join(home.home.ledger_dir, "LOCK")) is None


# --- run directory and core process ---------------------------------------------------


def test_run_directory_and_socket_modes(home: LedgerHome) -> None:
    assert check(home, "run directory").detail.endswith("(the core has not run here)")
    run = run_dir(home)
    bind_socket(run / "core.sock", 0o600)
    result = check(home, "run directory")
    assert result.ok
    assert result.detail == f"{run} is 0700; core.sock is 0600"
    os.chmod(run / "core.sock", 0o666)
    assert_fails(check(home, "run directory"), "core.sock is 0666, wider than 0600")
    os.chmod(run / "core.sock", 0o600)
    os.chmod(run, 0o755)
    assert_fails(check(home, "run directory"), re.escape(f"{run} is 0755, must be 0700"))


def test_a_regular_file_as_the_socket_fails(home: LedgerHome) -> None:
    (run_dir(home) / "core.sock").write_text("")
    assert_fails(check(home, "run directory"), "core.sock is not a socket")


def test_owner_token_must_be_private(home: LedgerHome) -> None:
    token = run_dir(home) / "owner.token"
    token.write_bytes(b"t" * 32)
    os.chmod(token, 0o600)
    assert check(home, "run directory").ok
    os.chmod(token, 0o644)
    assert_fails(check(home, "run directory"), re.escape(f"{token} is 0644"))


def test_running_core(home: LedgerHome, procs: Processes) -> None:
    pid = core_running(home, procs)
    result = check(home, "core process")
    assert result.ok
    assert result.detail == f"running (pid {pid}), serving {run_dir(home) / 'core.sock'}"


def test_a_live_core_answers_status_through_the_sdk(tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="naga-dc-") as d:
        home = os.path.join(d, "home")
        core = start_core_process(home, tmp_path / "core.log")
        try:
            result = check(Home(home), "core answers")
            assert result.ok, result
            assert result.detail.startswith(f"core pid {core.pid} answers Status: ledger ")
            assert check(Home(home), "token key").ok  # created by the core at its start
        finally:
            core.proc.terminate()
            assert core.proc.wait(30) == 0
        assert check(Home(home), "core answers").detail.startswith("no live core to ask")


def test_a_live_core_that_does_not_answer_fails(home: LedgerHome, procs: Processes) -> None:
    pid = core_running(home, procs)  # a Naga process and a socket nobody listens on
    assert_fails(check(home, "core answers"), f"core pid {pid} does not answer Status: ")


def test_stale_socket_and_pid_file_fail(home: LedgerHome, procs: Processes) -> None:
    run = run_dir(home)
    bind_socket(run / "core.sock")
    assert_fails(
        check(home, "core process"), "stale socket .*core.sock: no .*core.pid names a core"
    )
    dead = procs.dead()
    (run / "core.pid").write_text(f"{dead}\n")
    assert_fails(
        check(home, "core process"),
        re.escape(f"stale socket and pid file: {run / 'core.pid'} names pid {dead}, which is not"),
    )
    os.remove(run / "core.sock")
    assert_fails(check(home, "core process"), f"^stale pid file: .* names pid {dead}")


def test_pid_file_naming_another_program_fails(home: LedgerHome, procs: Processes) -> None:
    other = procs.sleeper(naga=False)
    bind_socket(run_dir(home) / "core.sock")
    (run_dir(home) / "core.pid").write_text(f"{other}\n")
    assert_fails(check(home, "core process"), f"names pid {other}, which is not a Naga process")


def test_live_core_without_its_socket_fails(home: LedgerHome, procs: Processes) -> None:
    pid = procs.sleeper(naga=True)
    (run_dir(home) / "core.pid").write_text(f"{pid}\n")
    assert_fails(check(home, "core process"), f"core pid {pid} runs but .*core.sock is missing")


@pytest.mark.parametrize("content", [b"", b"abc\n", b"-5\n", b"0\n", b"99999999999\n", b"\xff"])
def test_garbled_pid_file_fails(home: LedgerHome, content: bytes) -> None:
    (run_dir(home) / "core.pid").write_bytes(content)
    assert_fails(check(home, "core process"), "core.pid does not hold a pid")


# --- webchat port ---------------------------------------------------------------------------


def test_webchat_port_served_while_the_core_runs(
    home: LedgerHome, procs: Processes, free_port: int
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free_port))
        listener.listen()
        assert_fails(
            check(home, "webchat port", free_port),
            "served by another program while the core is not running",
        )
        core_running(home, procs)
        result = check(home, "webchat port", free_port)
    assert result.ok
    assert result.detail == f"127.0.0.1:{free_port} is served (the running core's gateway)"


def test_webchat_port_bound_but_not_listening_fails(home: LedgerHome, free_port: int) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", free_port))
        assert_fails(
            check(home, "webchat port", free_port), "is bound by another program but not accepting"
        )


# --- the check list ---------------------------------------------------------------------


def test_checks_can_be_appended_and_a_failing_probe_is_reported(home: LedgerHome) -> None:
    def unreadable() -> tuple[bool, str]:
        raise PermissionError(13, "Permission denied", "/proc/self/unreadable")

    checks = checks_for(home.home)
    checks.append(Check("sandbox features", lambda: (True, "seccomp, landlock")))
    checks.append(Check("grpc health", unreadable))
    assert len(checks_for(home.home)) == len(checks) - 2  # a fresh list each time
    results = run_checks(checks)
    assert results[-2] == CheckResult("sandbox features", True, "seccomp, landlock")
    assert results[-1].line() == (
        "FAIL grpc health: could not check: [Errno 13] Permission denied: '/proc/self/unreadable'"
    )


# --- the command ----------------------------------------------------------------------------


def _by_name(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    checks = doc["checks"]
    assert isinstance(checks, list)
    return {str(c["name"]): c for c in checks}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


def test_doctor_command_lines_and_exit_code(cli: Cli, home: LedgerHome) -> None:
    out = cli("doctor", "--home", home.root)
    lines = out.out.splitlines()
    assert len(lines) == 14
    assert lines[0] == f"ok   home permissions: {home.root} is 0700, owned by you"
    assert all(re.match(r"(ok   |FAIL )[a-z ]+: ", line) for line in lines[:-1])
    # 127.0.0.1:18789 belongs to this machine, not the test: judge it apart.
    webchat = next(i for i, line in enumerate(lines) if "webchat port:" in line)
    others_ok = all(line.startswith("ok") for i, line in enumerate(lines[:-1]) if i != webchat)
    assert others_ok, lines
    webchat_ok = lines[webchat].startswith("ok   webchat port: 127.0.0.1:18789 is ")
    assert out.code == (0 if webchat_ok else 1)
    assert lines[-1] == ("all 13 checks passed" if webchat_ok else "1 of 13 checks failed")

    os.chmod(home.home.signing_key_path, 0o640)
    bad = cli("doctor", "--home", home.root, "--json")
    assert bad.code == 1
    doc = bad.json()
    assert doc["ok"] is False
    assert doc["home"] == home.root
    checks = _by_name(doc)
    assert checks["key files"]["ok"] is False
    assert "is 0640, wider than 0600" in str(checks["key files"]["detail"])
    assert checks["home permissions"] == {
        "name": "home permissions",
        "ok": True,
        "detail": f"{home.root} is 0700, owned by you",
    }


def test_doctor_in_a_subprocess_honours_naga_home(home: LedgerHome, tmp_path: Path) -> None:
    os.chmod(home.root, 0o755)
    env = {**os.environ, "NAGA_HOME": home.root}
    proc = subprocess.run(
        [*naga_command(), "doctor", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["home"] == home.root
    assert _by_name(doc)["home permissions"]["detail"] == (
        f"{home.root} is 0755, must be 0700 (chmod 700 {home.root})"
    )


def test_the_sandbox_check_names_each_missing_layer() -> None:
    import dataclasses

    import sandbox
    from naga_core._doctor import sandbox_verdict

    here = sandbox.detect()
    ok, detail = sandbox_verdict(here)
    assert ok, detail  # this machine enforces every layer (CI's too)
    assert f"Landlock ABI {here.landlock_abi}" in detail
    weak = dataclasses.replace(here, landlock_abi=0, mount_namespaces=False)
    ok, detail = sandbox_verdict(weak)
    assert not ok
    assert "no Landlock, no mount namespaces (the private filesystem view)" in detail
    assert "unless degraded mode is allowed" in detail
