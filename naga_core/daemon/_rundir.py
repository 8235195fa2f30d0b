"""``$NAGA_HOME/run``: the core's lock, pid file, socket and owner credential.

The lock (``core.lock``, ``flock``) is what makes a core *the* core of a
home: it is taken before anything else in ``run/`` is touched, so a stale
socket or pid file is only ever removed by the process that owns the home,
and it is released by the kernel however the core dies.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Generator

from naga.constants import CORE_SOCKET_NAME, OWNER_TOKEN_NAME, RUN_DIR_NAME
from naga_core._home import Home
from naga_core.daemon._errors import CoreAlreadyRunning, RunDirError

#: sun_path holds 108 bytes with the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107


def binding_path(socket_path: str) -> str:
    """The private name a socket is bound under before it is narrowed to
    0600 and renamed to ``socket_path`` (same directory, one byte longer)."""
    head, tail = os.path.split(socket_path)
    return os.path.join(head, "." + tail)


class RunDir:
    """Paths of one home's run directory."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.path = os.path.join(home.root, RUN_DIR_NAME)
        self.lock_path = os.path.join(self.path, "core.lock")
        self.pid_path = os.path.join(self.path, "core.pid")
        #: Set by :meth:`locked`: the pid a previous core left in its pid
        #: file (0 if unreadable), None after a clean stop.
        self.stale_pid: int | None = None
        self.socket_path = os.path.join(self.path, CORE_SOCKET_NAME)
        self.token_path = os.path.join(self.path, OWNER_TOKEN_NAME)
        self.log_path = os.path.join(self.path, "core.log")

    @property
    def address(self) -> str:
        return "unix:" + self.socket_path

    def prepare(self) -> None:
        """Create the home and ``run/`` (0700); refuse a socket path the
        kernel cannot bind."""
        self.home.ensure()
        try:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            os.chmod(self.path, 0o700)  # makedirs' mode is cut by the umask
        except OSError as exc:
            raise RunDirError(f"cannot create {self.path}: {exc}") from None
        # The longest name bound is the private one the socket starts under.
        size = len(os.fsencode(binding_path(self.socket_path)))
        if size > MAX_SOCKET_PATH_BYTES:
            raise RunDirError(
                f"the socket path {self.socket_path} is {size} bytes; Unix sockets allow "
                f"{MAX_SOCKET_PATH_BYTES}: use a shorter NAGA_HOME"
            )

    @contextlib.contextmanager
    def locked(self) -> Generator[None]:
        """Hold the home's core lock, with this process's pid in it and in
        ``core.pid``; both files' contents and the socket go on exit."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RunDirError(f"cannot open {self.lock_path}: {exc}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise RunDirError(f"cannot lock {self.lock_path}: {exc}") from None
                raise CoreAlreadyRunning(self.home.root, _read_pid(self.lock_path)) from None
            # A graceful stop removes its pid file: one still here is a
            # core that was killed or crashed (the start's note says so).
            self.stale_pid = _read_pid(self.pid_path) if os.path.exists(self.pid_path) else None
            pid = f"{os.getpid()}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, pid, 0)
            _write_file(self.pid_path, pid)
            # Ours now: whatever a killed core left is stale.
            self.remove_socket()
            try:
                yield
            finally:
                self.remove_socket()
                for path in (self.pid_path, self.token_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # releases the flock

    def remove_socket(self) -> None:
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise RunDirError(f"{self.socket_path} exists and is not a socket; remove it")
        os.unlink(self.socket_path)

    def secure_socket(self) -> None:
        """The bound socket is 0600 (belt and braces: it is bound 0600)."""
        os.chmod(self.socket_path, 0o600)


def running_pid(home: Home) -> int | None:
    """The pid of the core serving ``home``, or None when none holds its lock.

    Used by offline commands that open the ledger directly, to refuse with
    a clear message instead of racing the core for the ledger.
    """
    rd = RunDir(home)
    try:
        fd = os.open(rd.lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return _read_pid(rd.lock_path) or 0
            raise
        return None
    finally:
        os.close(fd)


def _read_pid(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(32).strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


__all__ = ["MAX_SOCKET_PATH_BYTES", "RunDir", "running_pid"]
