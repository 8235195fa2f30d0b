"""The launcher: what a sandboxed child can still do, what it is handed
(environment, descriptors, session), how setup failures and exits are
reported, and what happens on kernels that lack a layer."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

import sandbox
from sandbox._exit import describe_status
from tests.sandbox.conftest import TEST_LIMITS, Range, Sentinel

WORKLOADS = "tests.sandbox._workloads"


def _run(
    attacker: Range,
    target: str,
    *params: str,
    profile: sandbox.Profile | None = None,
    kernel: sandbox.KernelReport | None = None,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> tuple[str, sandbox.Exit, sandbox.Sandboxed]:
    r, w = os.pipe()
    try:
        child = sandbox.launch(
            profile or attacker.profile(),
            target,
            [str(w), *params],
            pass_fds=[w, *pass_fds],
            kernel=kernel or attacker.kernel,
            env=env,
            stderr=subprocess.DEVNULL,
            forker=attacker.forker,
        )
        os.close(w)
        w = -1
        end = child.wait(timeout=30)
        data = b"".join(iter(lambda: os.read(r, 4096), b""))
    finally:
        os.close(r)
        if w != -1:
            os.close(w)
    return data.decode().strip(), end, child


def test_everyday_work_still_runs(attacker: Range) -> None:
    line, end, child = _run(attacker, f"{WORKLOADS}:everyday", str(attacker.ro_file))
    assert end.kind is sandbox.ExitKind.EXITED, end
    assert end.code == 0
    assert line == "499500 ping read-only data True"
    assert (attacker.work / "sub" / "out.txt").read_text() == "written"
    assert child.degraded == ()
    assert child.ready_seconds > 0
    assert [layer for layer, _ in child.timings] == [
        sandbox.Layer.RLIMITS,
        sandbox.Layer.NO_NEW_PRIVS,
        sandbox.Layer.NET_NAMESPACE,
        sandbox.Layer.MOUNT_NAMESPACE,
        sandbox.Layer.CAPABILITIES,
        sandbox.Layer.LANDLOCK_FS,
        sandbox.Layer.TARGET,
        sandbox.Layer.SECCOMP,
    ]


@pytest.fixture
def core_socket(tmp_path: Path) -> Iterator[Path]:
    """A gRPC echo server on a Unix socket, standing in for the core's."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    path = run_dir / "core.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "test.Echo",
        {"Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"pong:" + req)},  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{path}")
    server.start()
    yield path
    server.stop(None)


def test_executor_reaches_the_core_over_grpc(
    attacker: Range, core_socket: Path, sentinel: Sentinel
) -> None:
    profile = sandbox.Profile.executor(core_socket, rlimits=TEST_LIMITS)
    line, end, _ = _run(
        attacker, f"{WORKLOADS}:grpc_echo", profile=profile.with_work_dir(attacker.work)
    )
    assert end.code == 0, end
    assert line == "pong:ping"
    sentinel.assert_intact()


def test_gateway_serves_the_socket_it_is_handed(attacker: Range, core_socket: Path) -> None:
    profile = sandbox.Profile.gateway(core_socket, rlimits=TEST_LIMITS)
    r, w = os.pipe()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        try:
            with sandbox.launch(
                profile.with_work_dir(attacker.work),
                f"{WORKLOADS}:serve_once",
                [str(w), str(listener.fileno())],
                pass_fds=[w, listener.fileno()],
                kernel=attacker.kernel,
                forker=attacker.forker,
            ) as child:
                os.close(w)
                w = -1
                # Its own word that it serves: a line on the pipe, not a delay.
                assert os.read(r, 100) == b"serving, own socket EPERM\n"
                with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                    conn.sendall(b"hello")
                    assert conn.recv(100) == b"echo:hello"
                assert child.wait(timeout=30).code == 0
        finally:
            os.close(r)
            if w != -1:
                os.close(w)


def test_gateway_connects_nowhere(attacker: Range, core_socket: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        profile = sandbox.Profile.gateway(core_socket, rlimits=TEST_LIMITS)
        line, end, _ = _run(
            attacker,
            f"{WORKLOADS}:tcp_connect",
            str(port),
            profile=profile.with_work_dir(attacker.work),
        )
    assert end.code == 1  # PermissionError from seccomp: no TCP socket at all
    assert line == ""


def test_egress_reaches_its_declared_port(attacker: Range) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        profile = attacker.profile(egress=(sandbox.Egress("127.0.0.1", port),))
        line, end, _ = _run(attacker, f"{WORKLOADS}:tcp_connect", str(port), profile=profile)
        conn, _ = listener.accept()
        with conn:
            assert conn.recv(5) == b"hello"
    assert (line, end.code) == ("sent", 0)


def test_environment_is_scrubbed(attacker: Range, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAGA_SECRET_FOR_TEST", "must-not-leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    line, end, _ = _run(attacker, f"{WORKLOADS}:environment", env={sandbox.TOKEN_ENV: "token-123"})
    assert end.code == 0
    env = dict(item.split("=", 1) for item in line.split(" "))
    assert "NAGA_SECRET_FOR_TEST" not in env
    assert env[sandbox.TOKEN_ENV] == "token-123"
    assert env["LANG"] == "C.UTF-8"
    assert env["HOME"] == env["TMPDIR"] == str(attacker.work)
    allowed = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", sandbox.TOKEN_ENV}
    launcher_set = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE"}
    launcher_set |= {"MALLOC_ARENA_MAX", "HOME", "TMPDIR"}
    assert set(env) <= allowed | launcher_set


def test_env_name_outside_the_profile_is_refused(attacker: Range) -> None:
    with pytest.raises(sandbox.ProfileInvalid, match="'AWS_SECRET' is not allowed"):
        sandbox.launch(
            attacker.profile(),
            f"{WORKLOADS}:environment",
            env={"AWS_SECRET": "x"},
            forker=attacker.forker,
        )


def test_only_passed_descriptors_are_inherited(attacker: Range) -> None:
    kept_r, kept_w = os.pipe()
    leak_r, leak_w = os.pipe()
    try:
        os.set_inheritable(leak_r, True)  # inheritable, but not passed
        line, _, _ = _run(attacker, f"{WORKLOADS}:descriptor", str(leak_r))
        assert line == "EBADF"
        line, _, _ = _run(attacker, f"{WORKLOADS}:descriptor", str(kept_r), pass_fds=(kept_r,))
        assert line == "open"
    finally:
        for fd in (kept_r, kept_w, leak_r, leak_w):
            os.close(fd)


def test_child_has_its_own_session(attacker: Range) -> None:
    line, _, _ = _run(attacker, f"{WORKLOADS}:session")
    assert line == "True"


def test_exit_code_and_exception_are_reported(attacker: Range) -> None:
    _, end, _ = _run(attacker, f"{WORKLOADS}:exit_with", "7")
    assert (end.kind, end.code, end.cause) == (sandbox.ExitKind.EXITED, 7, "exited with code 7")
    _, end, _ = _run(attacker, f"{WORKLOADS}:fail")
    assert (end.kind, end.code) == (sandbox.ExitKind.EXITED, 1)


def test_kill_reports_the_supervisor(attacker: Range) -> None:
    gate_r, gate_w = os.pipe()
    try:
        child, report = attacker.start("block", str(gate_r), pass_fds=(gate_r,))
        os.close(report)
        end = child.kill()
        assert (end.kind, end.signal) == (sandbox.ExitKind.KILLED, signal.SIGKILL)
        assert child.poll() is end
        assert child.pidfd is None
    finally:
        os.close(gate_r)
        os.close(gate_w)


_CGROUPS = sandbox.detect_cgroups()


def _swap_on() -> bool:
    with open("/proc/swaps", encoding="ascii") as f:
        return len(f.read().splitlines()) > 1


@pytest.mark.skipif(not _CGROUPS.usable, reason=_CGROUPS.line())
def test_an_oom_kill_in_its_cgroup_is_named(attacker: Range) -> None:
    # A ceiling far below its address-space limit (512 MiB): the kernel's OOM
    # killer in its cgroup ends it with a SIGKILL no supervisor sent, and
    # the cgroup's counters, read before it goes, say so.
    if _CGROUPS.version is sandbox.CgroupVersion.V1 and _swap_on():
        pytest.skip("cgroup v1 with swap on: past its ceiling the child swaps, not OOM-killed")
    group = sandbox.Cgroup.create(_CGROUPS, "oom-test", sandbox.CgroupLimits(memory_bytes=64 << 20))
    r, w = os.pipe()
    try:
        child = sandbox.launch(
            attacker.profile(),
            f"{WORKLOADS}:hoard",
            [str(w)],
            pass_fds=[w],
            kernel=attacker.kernel,
            stderr=subprocess.DEVNULL,
            cgroup=group,
            forker=attacker.forker,
        )
        os.close(w)
        w = -1
        end = child.wait(timeout=30)
        line = b"".join(iter(lambda: os.read(r, 4096), b"")).decode().strip()
    finally:
        os.close(r)
        if w != -1:
            os.close(w)
        group.remove()
    assert line == ""  # no MemoryError: the ceiling came first
    assert (end.kind, end.signal, end.by_oom_killer) == (
        sandbox.ExitKind.SIGNALED,
        signal.SIGKILL,
        True,
    ), end
    assert end.cause == (
        "memory ceiling exceeded: killed (SIGKILL) by the kernel's OOM killer "
        "at its cgroup's limit of 64 MiB"
    )
    assert not any(os.path.exists(d) for d in group.dirs)


def test_a_sigkill_nobody_accounts_for_stays_vague() -> None:
    end = describe_status(-signal.SIGKILL)
    assert not end.by_oom_killer
    assert "CPU hard limit, out of memory, or another process" in end.cause
    end = describe_status(-signal.SIGKILL, sandbox.ExitKind.KILLED, oom_killed=True)
    assert (end.kind, end.by_oom_killer) == (sandbox.ExitKind.KILLED, False)


# --- setup failures ----------------------------------------------------------------


def test_missing_target_module_fails_at_target_layer(attacker: Range) -> None:
    with pytest.raises(
        sandbox.LaunchFailed, match=r"No module named 'tests\.sandbox\.nope'"
    ) as info:
        sandbox.launch(
            attacker.profile(),
            "tests.sandbox.nope:run",
            stderr=subprocess.DEVNULL,
            forker=attacker.forker,
        )
    assert info.value.layer == "target"
    assert info.value.exit == "exited with code 70"


def test_missing_target_function_fails_at_target_layer(attacker: Range) -> None:
    with pytest.raises(sandbox.LaunchFailed, match="has no callable 'nope'") as info:
        sandbox.launch(attacker.profile(), f"{WORKLOADS}:nope", forker=attacker.forker)
    assert info.value.layer == "target"


def test_target_import_error_fails_at_target_layer(attacker: Range) -> None:
    with pytest.raises(sandbox.LaunchFailed, match="refuses to load") as info:
        sandbox.launch(
            attacker.profile(), "tests.sandbox._fails_on_import:run", forker=attacker.forker
        )
    assert info.value.layer == "target"


def test_target_that_never_gets_ready_is_killed(attacker: Range) -> None:
    with pytest.raises(sandbox.LaunchFailed, match="not ready before the deadline") as info:
        sandbox.launch(
            attacker.profile(),
            "tests.sandbox._hangs_on_import:run",
            ready_timeout=1,
            forker=attacker.forker,
        )
    assert info.value.exit == "killed (SIGKILL) by its supervisor"


def test_vanished_read_only_path_fails_the_launch(attacker: Range) -> None:
    profile = attacker.profile()
    attacker.ro_file.unlink()
    attacker.read_only.rmdir()
    with pytest.raises(sandbox.LaunchFailed, match="No such file or directory") as info:
        sandbox.launch(profile, f"{WORKLOADS}:session", forker=attacker.forker)
    assert (info.value.layer, info.value.errno) == ("mount_namespace", errno.ENOENT)
    assert str(attacker.read_only) in info.value.detail
    # Without the view, Landlock is the layer that finds it missing.
    kernel = dataclasses.replace(attacker.kernel, mount_namespaces=False)
    with pytest.raises(sandbox.LaunchFailed, match="No such file or directory") as info:
        sandbox.launch(
            dataclasses.replace(profile, allow_degraded=True),
            f"{WORKLOADS}:session",
            kernel=kernel,
            forker=attacker.forker,
        )
    assert (info.value.layer, info.value.errno) == ("landlock_fs", errno.ENOENT)


def test_bad_launch_arguments(attacker: Range) -> None:
    profile = attacker.profile()
    for target in ("no_colon", "a.b:", ":f", "a b:c", "a.b:c.d", "../x:y"):
        with pytest.raises(sandbox.ProfileInvalid, match="target must look like"):
            sandbox.launch(profile, target, forker=attacker.forker)
    with pytest.raises(sandbox.ProfileInvalid, match="args must be a sequence of strings"):
        sandbox.launch(profile, f"{WORKLOADS}:session", "abc", forker=attacker.forker)
    with pytest.raises(sandbox.ProfileInvalid, match="pass_fds"):
        sandbox.launch(profile, f"{WORKLOADS}:session", pass_fds=[2], forker=attacker.forker)
    with pytest.raises(sandbox.ProfileInvalid, match="outside the profile's read-only paths"):
        sandbox.launch(
            profile, f"{WORKLOADS}:session", import_paths=["/etc"], forker=attacker.forker
        )
    executor = sandbox.Profile.executor("/run/core.sock")
    with pytest.raises(sandbox.ProfileInvalid, match="needs a work directory"):
        sandbox.launch(executor, f"{WORKLOADS}:session", forker=attacker.forker)


# --- kernels without a layer ---------------------------------------------------------


def test_missing_landlock_is_refused_unless_degraded_mode(attacker: Range) -> None:
    old_kernel = dataclasses.replace(attacker.kernel, landlock_abi=0, mount_namespaces=False)
    with pytest.raises(sandbox.LayerUnavailable, match="landlock_fs: no Landlock") as info:
        sandbox.launch(
            attacker.profile(), f"{WORKLOADS}:session", kernel=old_kernel, forker=attacker.forker
        )
    assert info.value.profile == "plugin"
    assert [layer for layer, _ in info.value.missing] == ["mount_namespace", "landlock_fs"]
    degraded = dataclasses.replace(attacker.profile(), allow_degraded=True)
    r, w = os.pipe()
    try:
        child = sandbox.launch(
            degraded,
            "tests.sandbox._attacks:run",
            [str(w), "read_etc_passwd"],
            pass_fds=[w],
            kernel=old_kernel,
            forker=attacker.forker,
        )
        os.close(w)
        w = -1
        assert [d.layer for d in child.degraded] == [
            sandbox.Layer.MOUNT_NAMESPACE,
            sandbox.Layer.LANDLOCK_FS,
        ]
        assert child.wait(timeout=30).code == 0
        # The degradation is real: with neither layer, /etc/passwd is readable.
        assert os.read(r, 100).startswith(b"ESCAPED")
    finally:
        os.close(r)
        if w != -1:
            os.close(w)


def test_missing_seccomp_is_refused_even_in_degraded_mode(attacker: Range) -> None:
    kernel = dataclasses.replace(attacker.kernel, seccomp=False)
    profile = dataclasses.replace(attacker.profile(), allow_degraded=True)
    with pytest.raises(sandbox.LayerUnavailable, match="seccomp"):
        sandbox.launch(profile, f"{WORKLOADS}:session", kernel=kernel, forker=attacker.forker)


def test_without_tsync_a_threaded_target_is_refused(attacker: Range) -> None:
    kernel = dataclasses.replace(attacker.kernel, seccomp_tsync=False)
    profile = dataclasses.replace(attacker.profile(), allow_degraded=True)
    with pytest.raises(sandbox.LaunchFailed, match="cannot synchronise") as info:
        sandbox.launch(
            profile, "tests.sandbox._early_thread:run", ["0"], kernel=kernel, forker=attacker.forker
        )
    assert info.value.layer == "seccomp"
    # A single-threaded target still runs, with the gap recorded.
    line, end, child = _run(attacker, f"{WORKLOADS}:session", profile=profile, kernel=kernel)
    assert (line, end.code) == ("True", 0)
    assert [d.layer for d in child.degraded] == [sandbox.Layer.SECCOMP_TSYNC]


def test_unprivileged_path_enters_a_user_namespace(attacker: Range) -> None:
    # The plan for a non-root caller: unshare the user namespace with the
    # network one and map our ids. Root can take the same path.
    kernel = dataclasses.replace(attacker.kernel, root=False)
    gate_r, gate_w = os.pipe()
    r, w = os.pipe()
    try:
        child = sandbox.launch(
            attacker.profile(),
            "tests.sandbox._attacks:run",
            [str(w), "block", str(gate_r)],
            pass_fds=[w, gate_r],
            kernel=kernel,
            forker=attacker.forker,
        )
        with child:
            assert sandbox.Layer.USER_NAMESPACE in [layer for layer, _ in child.timings]
            ours = os.stat("/proc/self/ns/user").st_ino
            assert os.stat(f"/proc/{child.pid}/ns/user").st_ino != ours
            uid_map = Path(f"/proc/{child.pid}/uid_map").read_text().split()
            assert uid_map == [str(os.getuid()), str(os.getuid()), "1"]
            os.close(gate_w)
            gate_w = -1
            assert child.wait(timeout=30).code == 0
    finally:
        for fd in (gate_r, r, w, gate_w):
            if fd != -1:
                os.close(fd)
