"""sd_notify from a real core: a datagram socket stands in for systemd's
(NOTIFY_SOCKET, WATCHDOG_USEC in a core process's environment). READY=1
comes once the socket answers, WATCHDOG=1 pings keep coming, STOPPING=1
follows SIGTERM or a Shutdown call."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from naga.sdk import Client
from naga_core._sdnotify import Notifier
from tests.daemon.conftest import REPO, core_in_thread

WATCHDOG_USEC = 200_000  # pings every 0.1 s
CORE_ARGV = (
    sys.executable,
    "-m",
    "naga_core.cli",
    "daemon",
    "start",
    "--foreground",
    "--no-gateway",
)


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    with (
        tempfile.TemporaryDirectory(prefix="naga-n-") as d,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        path = os.path.join(d, "notify")
        sock.bind(path)
        sock.settimeout(30)
        yield sock, path


def _until(sock: socket.socket, field: bytes) -> list[bytes]:
    """Datagrams up to and including the first with line ``field``."""
    seen: list[bytes] = []
    while True:
        message = sock.recv(4096)
        seen.append(message)
        if field in message.split(b"\n"):
            return seen


def test_ready_watchdog_and_stopping(
    home: str, tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NOTIFY_SOCKET": path,
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    env.pop("WATCHDOG_PID", None)
    with open(tmp_path / "core.log", "ab") as log:
        proc = subprocess.Popen(
            [*CORE_ARGV, "--home", home],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=REPO,
        )
    try:
        before = _until(sock, b"READY=1")
        # The moment READY=1 arrives, the socket answers.
        with Client.connect(home) as c:
            assert c.status().processes[0].pid == proc.pid
        assert b"STATUS=opening the ledger" in before
        ready = before[-1].split(b"\n")
        assert ready[1].startswith(b"STATUS=serving on unix:")
        assert b"WATCHDOG=1" in before  # the first ping precedes serving
        for _ in range(3):  # and pings keep coming while it serves
            assert _until(sock, b"WATCHDOG=1")[-1] == b"WATCHDOG=1"
        os.kill(proc.pid, signal.SIGTERM)
        stopping = _until(sock, b"STOPPING=1")[-1]
        assert stopping == b"STOPPING=1\nSTATUS=stopping: SIGTERM"
        assert proc.wait(30) == 0, (tmp_path / "core.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_shutdown_call_says_stopping(home: str, notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    with core_in_thread(home, notifier=Notifier.parse(path)) as core:
        assert _until(sock, b"READY=1")[-1].startswith(b"READY=1\nSTATUS=serving on unix:")
        with core.client() as c:
            c.shutdown("upgrade")
        assert _until(sock, b"STOPPING=1")[-1] == (
            b"STOPPING=1\nSTATUS=stopping: Shutdown by owner: upgrade"
        )
        assert not core.join().failed
