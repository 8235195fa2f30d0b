"""The systemd watchdog means progress: pings stop while the ledger writer is
stuck (an fdatasync that does not return, as on a disk that stopped
answering) and resume once it finishes; a supervisor that ended stops them
too. A real datagram socket stands in for systemd's; a real ledger on the
real filesystem, whose data syncs can be held."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Literal

import pytest
import trio

from naga_core._sdnotify import Notifier, run_watchdog
from naga_core.daemon._liveness import Liveness
from naga_core.ledger import FileHandle, Ledger, OsFileSystem
from tests.ledger_helpers import fixed_signer

INTERVAL_NS = 200_000_000  # pings every 0.1 s
QUIET_S = 1.0  # ten ping periods


class HeldSyncs(OsFileSystem):
    """The real filesystem; while ``held``, an fdatasync waits for release."""

    def __init__(self) -> None:
        super().__init__()
        self.free = threading.Event()
        self.free.set()
        self.entered = threading.Event()

    def open(self, path: str, mode: Literal["create_new", "append", "read_write"]) -> FileHandle:
        return _Held(super().open(path, mode), self)


class _Held:
    def __init__(self, inner: FileHandle, fs: HeldSyncs) -> None:
        self._inner = inner
        self._fs = fs

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def sync(self) -> None:
        if not self._fs.free.is_set():
            self._fs.entered.set()
            self._fs.free.wait()
        self._inner.sync()

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def notify() -> Iterator[tuple[socket.socket, Notifier]]:
    with (
        tempfile.TemporaryDirectory(prefix="naga-w-") as d,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        path = os.path.join(d, "notify")
        sock.bind(path)
        yield sock, Notifier.parse(path)


def _next(sock: socket.socket, timeout: float) -> bytes | None:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096)
    except TimeoutError:
        return None


def _quiet(sock: socket.socket, seconds: float) -> list[bytes]:
    """Every datagram within ``seconds`` (the socket's clock, not a sleep)."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        message = _next(sock, left)
        if message is not None:
            got.append(message)
    return got


def _pings(sock: socket.socket, n: int) -> None:
    seen = 0
    while seen < n:
        message = _next(sock, 30)
        assert message is not None, "no datagram for 30 s"
        seen += message == b"WATCHDOG=1"


def test_a_stalled_ledger_writer_stops_the_pings(
    notify: tuple[socket.socket, Notifier], tmp_path: os.PathLike[str]
) -> None:
    sock, notifier = notify
    fs = HeldSyncs()
    ledger = Ledger.open(os.path.join(str(tmp_path), "ledger"), fixed_signer(), fs=fs)
    liveness = Liveness(ledger, stopping=lambda: False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_watchdog, notifier, INTERVAL_NS, liveness)
            await trio.to_thread.run_sync(_pings, sock, 3)
            ledger.append("test.record", b"before")  # a commit that finishes
            await trio.to_thread.run_sync(_pings, sock, 2)
            fs.free.clear()
            writer = threading.Thread(target=ledger.append, args=("test.record", b"stuck"))
            writer.start()
            assert await trio.to_thread.run_sync(fs.entered.wait, 30)
            stalled = await trio.to_thread.run_sync(_quiet_after_status, sock)
            assert any(m.startswith(b"STATUS=stalled: the ledger writer") for m in stalled)
            fs.free.set()  # the disk answers again
            await trio.to_thread.run_sync(writer.join, 30)
            resumed = await trio.to_thread.run_sync(_until_ping, sock)
            assert b"STATUS=serving (progress again)" in resumed
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        fs.free.set()
        ledger.close()
    with Ledger.open(os.path.join(str(tmp_path), "ledger"), fixed_signer()) as reopened:
        assert reopened.size == 2  # the stuck commit finished once the disk answered


def _quiet_after_status(sock: socket.socket) -> list[bytes]:
    """From the first ``STATUS=stalled`` on: no ping for QUIET_S."""
    seen: list[bytes] = []
    while True:
        message = _next(sock, 30)
        assert message is not None, "no STATUS=stalled within 30 s"
        seen.append(message)
        if message.startswith(b"STATUS=stalled"):
            break
    after = _quiet(sock, QUIET_S)
    assert b"WATCHDOG=1" not in after, after
    return seen + after


def _until_ping(sock: socket.socket) -> list[bytes]:
    seen: list[bytes] = []
    while True:
        message = _next(sock, 30)
        assert message is not None, "no ping within 30 s after the writer finished"
        seen.append(message)
        if message == b"WATCHDOG=1":
            return seen


def test_an_ended_supervisor_stops_the_pings(
    notify: tuple[socket.socket, Notifier], tmp_path: os.PathLike[str]
) -> None:
    sock, notifier = notify
    ledger = Ledger.open(os.path.join(str(tmp_path), "ledger"), fixed_signer())
    liveness = Liveness(ledger, stopping=lambda: False)

    async def supervisor(*, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        await ended.wait()

    ended = trio.Event()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_watchdog, notifier, INTERVAL_NS, liveness)
            await nursery.start(liveness.watched, "the plugins", supervisor)
            await trio.to_thread.run_sync(_pings, sock, 2)
            ended.set()
            stalled = await trio.to_thread.run_sync(_quiet_after_status, sock)
            assert any(b"the supervisor of the plugins no longer serves" in m for m in stalled)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        ledger.close()
