"""The narrow filesystem interface the ledger, blob store and snapshots use.

Everything durable goes through :class:`FileSystem`, so that tests can swap in
:class:`~naga_core.ledger.SimulatedFileSystem` (lost, reordered, zero-filled
and torn unsynced writes; injected faults) and drive the very same code that
runs in production against :class:`OsFileSystem`.

The primitives are deliberately few: an append/overwrite handle with
``sync``, whole-file reads, renames and directory syncs. Composite operations
(:func:`write_atomic`) are built from them here, once, so a fault can hit
every step.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Callable, Generator
from typing import Literal, Protocol

from naga_core.errors import LedgerLocked

OpenMode = Literal["append", "create_new", "read_write"]


class FileHandle(Protocol):
    """An open file the ledger writes at its end."""

    def write(self, data: bytes) -> None:
        """Write all of ``data`` at the end of the file or raise OSError.

        After an OSError an unknown prefix of ``data`` may be on disk: the
        ledger treats any write error as fatal and lets recovery decide."""
        ...

    def sync(self) -> None:
        """fdatasync: data and size are durable when this returns."""
        ...

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    """What the ledger needs from a filesystem. Paths are absolute strings."""

    def open(self, path: str, mode: OpenMode) -> FileHandle: ...

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes: ...

    def size(self, path: str) -> int: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def mkdir(self, path: str) -> None:
        """Create one directory (mode 0700); its parent must exist."""
        ...

    def rename(self, src: str, dst: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def sync_dir(self, path: str) -> None: ...

    def lock(self, path: str) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive, non-blocking lock; LedgerLocked if taken."""
        ...


# --- composites ---------------------------------------------------------------


def write_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file.

    temp file in the same directory -> write -> fdatasync -> rename -> fsync
    of the directory. A leftover ``.tmp`` is harmless and removed on open.
    """
    tmp = path + ".tmp"
    if fs.exists(tmp):
        fs.remove(tmp)
    handle = fs.open(tmp, "create_new")
    try:
        handle.write(data)
        handle.sync()
    finally:
        handle.close()
    fs.rename(tmp, path)
    fs.sync_dir(os.path.dirname(path))


def makedirs(fs: FileSystem, path: str) -> None:
    """mkdir -p, syncing each parent whose entries changed; safe when
    another thread or process creates the same directories at once."""
    if fs.is_dir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        makedirs(fs, parent)
    try:
        fs.mkdir(path)
    except FileExistsError:
        # Made by another thread between the check and here (blob puts run
        # in worker threads: two turns storing blobs with the same fan-out
        # prefix). Not a failure; but its maker may not have synced the
        # parent yet, so this caller syncs it too before relying on it.
        if not fs.is_dir(path):
            raise
    fs.sync_dir(parent)


def sha256_file(
    fs: FileSystem,
    path: str,
    chunk: int = 4 << 20,
    *,
    length: int | None = None,
    pace: Callable[[int], None] | None = None,
) -> bytes:
    """SHA-256 of a file (or its first ``length`` bytes), streamed so a big
    segment is not held twice. ``pace(n)`` is called before each read of
    ``n`` bytes (a background rehash waits or stops there)."""
    digest = hashlib.sha256()
    total = fs.size(path) if length is None else min(length, fs.size(path))
    offset = 0
    while offset < total:
        n = min(chunk, total - offset)
        if pace is not None:
            pace(n)
        part = fs.read(path, offset, n)
        if not part:
            break
        digest.update(part)
        offset += len(part)
    return digest.digest()


# --- the real one ----------------------------------------------------------------


class _OsHandle:
    __slots__ = ("_fd", "_path")

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self._path = path

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            if written <= 0:  # pragma: no cover - os.write raises instead
                raise OSError(errno.EIO, "short write", self._path)
            view = view[written:]

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        os.lseek(self._fd, size, os.SEEK_SET)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFileSystem:
    """The real filesystem, through ``os`` calls with explicit syncs."""

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        flags = os.O_WRONLY | os.O_CLOEXEC
        if mode == "create_new":
            flags |= os.O_CREAT | os.O_EXCL
        elif mode == "append":
            flags |= os.O_CREAT
        fd = os.open(path, flags, 0o600)
        os.lseek(fd, 0, os.SEEK_END)
        return _OsHandle(fd, path)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read() if length is None else f.read(length)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        # Not os.path.lexists: it says False on EIO or EACCES too, and an
        # unreadable ledger must not look absent (and be created anew).
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o700)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def lock(self, path: str) -> Generator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise LedgerLocked(
                    f"ledger at {os.path.dirname(path)} is held by another process "
                    f"(pid {holder}); stop it first"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)
