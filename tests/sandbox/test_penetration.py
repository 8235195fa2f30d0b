"""Penetration suite: each test is one attack, run by a real sandboxed child
(plugin profile, temp work directory) launched through ``sandbox.launch``.

Every attack must be refused (the attacker reports the errno it got) or end
in the child's death (SIGSYS from the filter, an rlimit signal), and the
sentinel "core" process must keep running with its private files intact.
The expected errno names the layer that refused: EACCES/EXDEV Landlock,
EPERM/ENOSYS seccomp, ECONNREFUSED the private network namespace.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from tests.sandbox.conftest import (
    REPO_ROOT,
    TEST_LIMITS,
    FileLayer,
    Outcome,
    Range,
    Sentinel,
)


def _refused(outcome: Outcome, expected: str) -> None:
    assert outcome.report == expected, f"attacker reported {outcome.report!r}; {outcome.exit}"
    assert outcome.exit.kind is sandbox.ExitKind.EXITED
    assert outcome.exit.code == 0


def _killed_by_filter(outcome: Outcome) -> None:
    assert outcome.report is None, f"attacker reported {outcome.report!r}"
    assert outcome.exit.by_seccomp, outcome.exit


def _nothing_arrived(listener: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        listener.accept()


# --- files -----------------------------------------------------------------------
# Each runs twice: with the whole sandbox the paths are simply absent from the
# child's view (ENOENT), or read-only mounts (EROFS); with Landlock alone it
# refuses them (EACCES, EXDEV for links across hierarchies).


def test_read_etc_passwd(layer: FileLayer, sentinel: Sentinel) -> None:
    _refused(layer.run("read_etc_passwd"), layer.expect(view="ENOENT", landlock="EACCES"))
    sentinel.assert_intact()


def test_read_core_key_files(layer: FileLayer, sentinel: Sentinel) -> None:
    outcome = layer.run("read_core_keys", *map(str, sentinel.files))
    each = layer.expect(view="ENOENT", landlock="EACCES")
    _refused(outcome, ",".join([each] * len(sentinel.files)))
    sentinel.assert_intact()


def test_write_outside_work_dir(layer: FileLayer, sentinel: Sentinel) -> None:
    # The core's home, then /tmp (which in the view is the read-only scaffold).
    outcome = layer.run("write_outside", str(sentinel.home))
    _refused(outcome, layer.expect(view="ENOENT,EROFS", landlock="EACCES,EACCES"))
    assert not list(Path("/tmp").glob("naga-planted-*"))
    sentinel.assert_intact()


def test_truncate_read_only_file(layer: FileLayer, attacker: Range, sentinel: Sentinel) -> None:
    outcome = layer.run("truncate_read_only", str(attacker.ro_file))
    _refused(outcome, layer.expect(view="EROFS,EROFS", landlock="EACCES,EACCES"))
    assert attacker.ro_file.read_bytes() == b"read-only data\n"
    sentinel.assert_intact()


def test_chmod_read_only_file(layer: FileLayer, attacker: Range, sentinel: Sentinel) -> None:
    # Landlock does not cover metadata; the filter refuses chmod outright.
    mode = attacker.ro_file.stat().st_mode
    _refused(layer.run("chmod_read_only", str(attacker.ro_file)), "EPERM")
    assert attacker.ro_file.stat().st_mode == mode
    sentinel.assert_intact()


def test_rename_out_of_work_dir(layer: FileLayer, attacker: Range, sentinel: Sentinel) -> None:
    outcome = layer.run("rename_out", str(sentinel.home))
    _refused(outcome, layer.expect(view="ENOENT", landlock="EACCES"))
    assert (attacker.work / "mine").exists()
    sentinel.assert_intact()


def test_rename_core_key_into_work_dir(
    layer: FileLayer, attacker: Range, sentinel: Sentinel
) -> None:
    outcome = layer.run("rename_in", str(sentinel.files[0]))
    _refused(outcome, layer.expect(view="ENOENT", landlock="EACCES"))
    assert not (attacker.work / "stolen").exists()
    sentinel.assert_intact()


def test_hardlink_core_key_into_work_dir(
    layer: FileLayer, attacker: Range, sentinel: Sentinel
) -> None:
    outcome = layer.run("hardlink_in", str(sentinel.files[0]))
    _refused(outcome, layer.expect(view="ENOENT", landlock="EXDEV"))
    assert not (attacker.work / "stolen").exists()
    sentinel.assert_intact()


def test_symlink_to_core_key(layer: FileLayer, sentinel: Sentinel) -> None:
    outcome = layer.run("symlink_out", str(sentinel.files[0]))
    _refused(outcome, layer.expect(view="ENOENT", landlock="EACCES"))
    sentinel.assert_intact()


def test_write_proc_self_mem(layer: FileLayer, sentinel: Sentinel) -> None:
    _refused(layer.run("write_proc_self_mem"), layer.expect(view="ENOENT", landlock="EACCES"))
    sentinel.assert_intact()


@pytest.fixture
def unix_listener(tmp_path: Path) -> Iterator[tuple[Path, socket.socket]]:
    """A listening Unix socket outside the work directory: a stand-in for a
    systemd user bus, ssh-agent or docker.sock, owned by the same uid."""
    path = tmp_path / "elsewhere" / "agent.sock"
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen()
        s.setblocking(False)
        yield path, s


def test_unix_socket_outside_the_view(
    attacker: Range, sentinel: Sentinel, unix_listener: tuple[Path, socket.socket]
) -> None:
    # Landlock (ABI <= 7) does not cover connecting to a socket by path; the
    # filesystem view is what stops it: the path does not exist in there.
    path, listener = unix_listener
    _refused(attacker.run("unix_connect", str(path)), "ENOENT")
    _nothing_arrived(listener)
    sentinel.assert_intact()


# --- network -------------------------------------------------------------------


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        s.setblocking(False)
        yield s


def test_tcp_connect_without_egress(
    attacker: Range, sentinel: Sentinel, tcp_listener: socket.socket
) -> None:
    port = tcp_listener.getsockname()[1]
    _refused(attacker.run("tcp_connect", str(port)), "EPERM")
    _nothing_arrived(tcp_listener)
    sentinel.assert_intact()


def test_tcp_connect_to_port_not_in_egress(
    attacker: Range, sentinel: Sentinel, tcp_listener: socket.socket
) -> None:
    port = tcp_listener.getsockname()[1]
    other = 443 if port != 443 else 8443
    profile = attacker.profile(egress=(sandbox.Egress("api.example.com", other),))
    _refused(attacker.run("tcp_connect", str(port), profile=profile), "EACCES")
    _nothing_arrived(tcp_listener)
    sentinel.assert_intact()


def test_tcp_fast_open_to_port_not_in_egress(
    attacker: Range, sentinel: Sentinel, tcp_listener: socket.socket
) -> None:
    # Fast Open connects inside sendto()/sendmsg() (or the first write after
    # TCP_FASTOPEN_CONNECT), where Landlock's connect rule never looks: the
    # filter refuses the flag and the options instead.
    port = tcp_listener.getsockname()[1]
    other = 443 if port != 443 else 8443
    profile = attacker.profile(egress=(sandbox.Egress("api.example.com", other),))
    _refused(
        attacker.run("tcp_fastopen", str(port), profile=profile), "EPERM,EPERM,EPERM,EPERM,EPERM"
    )
    _nothing_arrived(tcp_listener)
    sentinel.assert_intact()


def test_tcp_fast_open_from_the_gateway(
    attacker: Range, sentinel: Sentinel, tcp_listener: socket.socket, tmp_path: Path
) -> None:
    # The gateway must connect nowhere but the core's Unix socket.
    port = tcp_listener.getsockname()[1]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as core:
        core.bind(str(tmp_path / "core.sock"))  # the view shows it: it must exist
        outcome = attacker.run("tcp_fastopen", str(port), profile=_gateway(attacker, tmp_path))
    _refused(outcome, "EPERM,EPERM,EPERM,EPERM,EPERM")
    _nothing_arrived(tcp_listener)
    sentinel.assert_intact()


def _gateway(attacker: Range, tmp_path: Path) -> sandbox.Profile:
    return sandbox.Profile.gateway(
        tmp_path / "core.sock", read_only=[attacker.read_only]
    ).with_work_dir(attacker.work)


@pytest.mark.parametrize(
    "case",
    [
        # Before issue 11's last step the gateway bound its own port, and a
        # listen() without bind() got an ephemeral one (Landlock never sees
        # the autobind): now it can make no TCP socket at all.
        ("listen_unbound", "EPERM"),
        ("tcp_bind", "EPERM"),
        ("tcp_connect", "EPERM"),
        ("udp_send", "EPERM"),
        ("raw_socket", "EPERM,EPERM"),
    ],
)
def test_the_gateway_profile_makes_no_network_socket(
    attacker: Range,
    sentinel: Sentinel,
    tcp_listener: socket.socket,
    tmp_path: Path,
    case: tuple[str, str],
) -> None:
    attack, expected = case
    port = str(tcp_listener.getsockname()[1])
    params = () if attack in ("listen_unbound", "raw_socket") else (port,)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as core:
        core.bind(str(tmp_path / "core.sock"))
        _refused(attacker.run(attack, *params, profile=_gateway(attacker, tmp_path)), expected)
    _nothing_arrived(tcp_listener)
    sentinel.assert_intact()


def test_the_gateway_profile_reaches_no_abstract_socket_of_the_host(
    attacker: Range,
    sentinel: Sentinel,
    abstract_listener: tuple[str, socket.socket],
    tmp_path: Path,
) -> None:
    name, listener = abstract_listener
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as core:
        core.bind(str(tmp_path / "core.sock"))
        outcome = attacker.run("abstract_connect", name, profile=_gateway(attacker, tmp_path))
    _refused(outcome, "ECONNREFUSED")  # its own network namespace
    _nothing_arrived(listener)
    sentinel.assert_intact()


def test_a_plugin_with_egress_can_neither_listen_nor_bind(
    attacker: Range, sentinel: Sentinel, tcp_listener: socket.socket
) -> None:
    # It may make TCP sockets (to connect to its declared ports), but not serve.
    port = str(tcp_listener.getsockname()[1])
    profile = attacker.profile(egress=(sandbox.Egress("api.example.com", 443),))
    _refused(attacker.run("listen_unbound", profile=profile), "EPERM")
    _refused(attacker.run("tcp_bind", port, profile=profile), "EPERM")
    sentinel.assert_intact()


def test_a_plugin_with_egress_sends_no_udp(attacker: Range, sentinel: Sentinel) -> None:
    # Landlock has no UDP rules: the filter refuses the datagram socket itself.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.setblocking(False)
        port = str(listener.getsockname()[1])
        profile = attacker.profile(egress=(sandbox.Egress("api.example.com", 443),))
        _refused(attacker.run("udp_send", port, profile=profile), "EPERM")
        with pytest.raises(BlockingIOError):
            listener.recv(64)
    sentinel.assert_intact()


@pytest.fixture
def abstract_listener() -> Iterator[tuple[str, socket.socket]]:
    name = f"naga-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind("\0" + name)
        s.listen()
        s.setblocking(False)
        yield name, s


def test_abstract_unix_socket_from_private_netns(
    attacker: Range, sentinel: Sentinel, abstract_listener: tuple[str, socket.socket]
) -> None:
    # Abstract names live in the network namespace: from its own, ours is absent.
    name, listener = abstract_listener
    _refused(attacker.run("abstract_connect", name), "ECONNREFUSED")
    _nothing_arrived(listener)
    sentinel.assert_intact()


def test_abstract_unix_socket_on_host_network(
    attacker: Range, sentinel: Sentinel, abstract_listener: tuple[str, socket.socket]
) -> None:
    # With egress the host network stays; Landlock's socket scope refuses it.
    name, listener = abstract_listener
    profile = attacker.profile(egress=(sandbox.Egress("api.example.com", 443),))
    _refused(attacker.run("abstract_connect", name, profile=profile), "EPERM")
    _nothing_arrived(listener)
    sentinel.assert_intact()


def test_raw_and_netlink_sockets(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("raw_socket"), "EPERM,EPERM")
    sentinel.assert_intact()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 is an x86_64 ABI")
def test_x32_syscall_numbers_end_the_egress_plugin(attacker: Range, sentinel: Sentinel) -> None:
    # libseccomp treats x32 numbers on an x86_64 filter as a bad arch: killed.
    profile = attacker.profile(egress=(sandbox.Egress("api.example.com", 443),))
    _killed_by_filter(attacker.run("x32_udp_socket", profile=profile))
    sentinel.assert_intact()


# --- processes -----------------------------------------------------------------


def test_execve_shell(attacker: Range, sentinel: Sentinel) -> None:
    _killed_by_filter(attacker.run("execve_shell"))
    sentinel.assert_intact()


def test_memfd_create_and_exec(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("memfd_exec"), "EPERM")
    sentinel.assert_intact()


def test_clone_with_namespace_flags(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("clone_namespace"), "EPERM")
    sentinel.assert_intact()


def test_unshare_namespaces(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("unshare_user"), "EPERM")
    sentinel.assert_intact()


def test_fork_bomb(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("fork_bomb"), "EPERM")
    sentinel.assert_intact()


def test_ptrace_sentinel(attacker: Range, sentinel: Sentinel) -> None:
    _killed_by_filter(attacker.run("ptrace_sentinel", str(sentinel.pid)))
    sentinel.assert_intact()


def test_process_vm_readv_sentinel(attacker: Range, sentinel: Sentinel) -> None:
    _killed_by_filter(attacker.run("process_vm_readv_sentinel", str(sentinel.pid)))
    sentinel.assert_intact()


def test_kill_sentinel(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("kill_sentinel", str(sentinel.pid)), "EPERM,EPERM")
    sentinel.assert_intact()


def test_sigio_at_sentinel(attacker: Range, sentinel: Sentinel) -> None:
    # F_SETOWN/F_SETSIG would make the kernel signal the sentinel for us.
    _refused(attacker.run("sigio_sentinel", str(sentinel.pid)), "EPERM,EPERM")
    sentinel.assert_intact()


def test_raise_rlimits(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("raise_rlimits"), "EPERM,EPERM")
    sentinel.assert_intact()


# --- memory and the kernel ------------------------------------------------------


def test_mprotect_page_executable(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("mprotect_exec"), "EPERM,EPERM")
    sentinel.assert_intact()


@pytest.mark.parametrize("syscall", ["io_uring_setup", "bpf", "userfaultfd", "keyctl"])
def test_kernel_attack_surface(attacker: Range, sentinel: Sentinel, syscall: str) -> None:
    _refused(attacker.run("kernel_surface", syscall), "EPERM")
    sentinel.assert_intact()


def test_ioctl_tiocsti(attacker: Range, sentinel: Sentinel) -> None:
    # Without the filter stdin (/dev/null) would answer ENOTTY.
    _refused(attacker.run("ioctl_tiocsti"), "EPERM")
    sentinel.assert_intact()


def test_thread_started_before_filter_is_filtered(attacker: Range, sentinel: Sentinel) -> None:
    outcome = attacker.run("", target="tests.sandbox._early_thread:run")
    _refused(outcome, "EPERM,EPERM")
    sentinel.assert_intact()


# --- resources -----------------------------------------------------------------


def test_memory_bomb(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("memory_bomb"), "MemoryError")
    sentinel.assert_intact()


def test_cpu_spin(attacker: Range, sentinel: Sentinel) -> None:
    limits = sandbox.Rlimits(address_space=TEST_LIMITS.address_space, cpu_seconds=1)
    outcome = attacker.run("cpu_spin", profile=attacker.profile(limits=limits))
    assert outcome.report is None
    assert outcome.exit.kind is sandbox.ExitKind.SIGNALED
    assert outcome.exit.signal in (signal.SIGXCPU, signal.SIGKILL), outcome.exit
    sentinel.assert_intact()


def test_a_plugin_runs_nicer_than_the_core_and_cannot_renice(
    attacker: Range, sentinel: Sentinel
) -> None:
    # Under CPU contention the core (and whoever it answers) goes first.
    nice = os.getpriority(os.PRIO_PROCESS, 0) + sandbox.PLUGIN_NICE
    _refused(attacker.run("renice"), f"nice={min(nice, 19)},EPERM")
    sentinel.assert_intact()


def test_fd_exhaustion(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("fd_exhaustion"), "EMFILE")
    sentinel.assert_intact()


def test_disk_fill(attacker: Range, sentinel: Sentinel) -> None:
    _refused(attacker.run("disk_fill"), "EFBIG")
    assert TEST_LIMITS.file_size is not None
    assert (attacker.work / "fill").stat().st_size <= TEST_LIMITS.file_size
    sentinel.assert_intact()


# --- crashes and hangs ---------------------------------------------------------


def test_segfault(attacker: Range, sentinel: Sentinel) -> None:
    outcome = attacker.run("segfault")
    assert outcome.report is None
    assert outcome.exit.kind is sandbox.ExitKind.SIGNALED
    assert outcome.exit.signal == signal.SIGSEGV
    assert "crashed (SIGSEGV)" in outcome.exit.cause
    sentinel.assert_intact()


def test_infinite_loop_hits_deadline(attacker: Range, sentinel: Sentinel) -> None:
    limits = sandbox.Rlimits(address_space=TEST_LIMITS.address_space)  # no CPU limit
    outcome = attacker.run("cpu_spin", profile=attacker.profile(limits=limits), timeout=0.5)
    assert outcome.report is None
    assert outcome.exit.kind is sandbox.ExitKind.DEADLINE
    assert outcome.exit.signal == signal.SIGKILL
    sentinel.assert_intact()


def test_sigstop_is_noticed(attacker: Range, sentinel: Sentinel) -> None:
    # A generous timeout: the stop is noticed long before it.
    outcome = attacker.run("stop_self", timeout=30)
    assert outcome.report is None
    assert outcome.exit.kind is sandbox.ExitKind.STOPPED, outcome.exit
    sentinel.assert_intact()


# --- the layers are on ---------------------------------------------------------


def test_proc_status_shows_seccomp_and_no_new_privs(attacker: Range, sentinel: Sentinel) -> None:
    gate_r, gate_w = os.pipe()
    try:
        child, report = attacker.start("block", str(gate_r), pass_fds=(gate_r,))
        with child:
            for task in Path(f"/proc/{child.pid}/task").iterdir():
                status = (task / "status").read_text()
                assert "Seccomp:\t2\n" in status, task
                assert "NoNewPrivs:\t1\n" in status, task
                assert "CapEff:\t0000000000000000\n" in status, task
            os.close(gate_w)
            gate_w = -1
            assert child.wait(timeout=30).code == 0
        assert os.read(report, 64) == b"unblocked\n"
        os.close(report)
    finally:
        os.close(gate_r)
        if gate_w != -1:
            os.close(gate_w)
    sentinel.assert_intact()


# --- the attacks have teeth ------------------------------------------------------


def _unsandboxed(attack: str, *params: str, cwd: Path) -> str:
    """Run an attack in a plain child process, reporting on its stdout."""
    code = "import sys; from tests.sandbox._attacks import run; run(['1', *sys.argv[1:]])"
    result = subprocess.run(
        [sys.executable, "-c", code, attack, *params],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        check=True,
        timeout=60,
    )
    return result.stdout.decode().strip()


def test_attacks_succeed_without_the_sandbox(
    attacker: Range,
    sentinel: Sentinel,
    tcp_listener: socket.socket,
    abstract_listener: tuple[str, socket.socket],
    unix_listener: tuple[Path, socket.socket],
) -> None:
    # The same attack code, unsandboxed, does what the tests above say the
    # sandbox stops: the refusals there are the sandbox's, not the attack's.
    name, listener = abstract_listener
    unix_path, unix_server = unix_listener
    victim = attacker.work / "victim.txt"
    victim.write_bytes(b"x")
    attacks = [
        ("read_etc_passwd",),
        ("read_core_keys", *map(str, sentinel.files)),
        ("truncate_read_only", str(victim)),
        ("chmod_read_only", str(victim)),
        ("write_proc_self_mem",),
        ("mprotect_exec",),
        ("kernel_surface", "io_uring_setup"),
        ("kernel_surface", "userfaultfd"),
        ("kernel_surface", "keyctl"),
        ("tcp_connect", str(tcp_listener.getsockname()[1])),
        ("abstract_connect", name),
        ("unix_connect", str(unix_path)),
    ]
    for attack in attacks:
        assert _unsandboxed(*attack, cwd=attacker.work).startswith("ESCAPED"), attack
    tcp_listener.accept()[0].close()
    listener.accept()[0].close()
    unix_server.accept()[0].close()
    sentinel.assert_intact()
