"""The disk under a :class:`~naga_core.ledger._simfs.SimulatedFileSystem`.

Files and directories with their durable and pending state, the namespace
log, the fates a pending op meets at a power loss (:func:`land`), fault
matching, and the file handles. The model these follow is described in
``_simfs``'s docstring; the filesystem's paths, errors and power-loss
operations are built on this module there.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

SECTOR = 512
_HANDLE_OPS = ("write", "sync", "truncate")
FAULT_OPS = frozenset(
    (*_HANDLE_OPS, "open", "read", "rename", "remove", "mkdir", "sync_dir", "listdir")
)


class SimulatedCrashError(RuntimeError):
    """A crashed filesystem was used; use the one ``crash()`` returned.

    Not an OSError on purpose: code under test must not swallow it as an I/O
    failure and carry on.
    """


@dataclass(frozen=True, slots=True)
class _Write:
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class _Truncate:
    size: int


class File:
    __slots__ = ("current", "durable", "pending")

    def __init__(self, content: bytes = b"") -> None:
        self.durable = bytearray(content)
        self.current = bytearray(content)
        self.pending: list[_Write | _Truncate] = []


class Dir:
    __slots__ = ("current", "durable", "pending")

    def __init__(self) -> None:
        self.durable: dict[str, Node] = {}
        self.current: dict[str, Node] = {}
        self.pending: list[NsOp] = []


Node: TypeAlias = "File | Dir"
# (directory, name, node, link): a link sets the name; an unlink removes the
# name only if it still names ``node``, so that replaying a two-directory
# rename late cannot delete a file created under the old name since.
_Effect: TypeAlias = "tuple[Dir, str, Node, bool]"


@dataclass(eq=False, slots=True)
class NsOp:
    effects: tuple[_Effect, ...]
    unsynced: set[Dir]


@dataclass(slots=True)
class Fault:
    op: str
    glob: str
    skip: int
    times: int | None
    errno: int
    partial: bool

    def error(self, op: str, path: str, other: str | None = None) -> OSError:
        return OSError(self.errno, f"simulated {op} fault", path, None, other)


def oserror(code: int, path: str) -> OSError:
    # OSError picks the subclass (FileNotFoundError, ...) from the code.
    return OSError(code, os.strerror(code), path)


def put(buf: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _resize(buf: bytearray, size: int) -> None:
    if size < len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


def _apply(op: NsOp, entries: Callable[[Dir], dict[str, Node]]) -> None:
    for directory, name, node, link in op.effects:
        table = entries(directory)
        if link:
            table[name] = node
        elif table.get(name) is node:
            del table[name]


def land(file: File, rng: random.Random | None) -> bytes:
    """The file's disk content once its pending ops met their fates (all land if no rng)."""
    out = bytearray(file.durable)
    for op in file.pending:
        if isinstance(op, _Truncate):
            if rng is None or rng.random() < 0.5:
                _resize(out, op.size)
            continue
        fate = 1 if rng is None else rng.randrange(4)
        if fate == 1:
            put(out, op.offset, op.data)
        elif fate == 2:
            put(out, op.offset, bytes(len(op.data)))
        elif fate == 3:
            start, end = op.offset, op.offset + len(op.data)
            while start < end:
                stop = min(end, (start // SECTOR + 1) * SECTOR)
                sector_fate = 1 if rng is None else rng.randrange(3)
                if sector_fate == 1:
                    put(out, start, op.data[start - op.offset : stop - op.offset])
                elif sector_fate == 2:
                    put(out, start, bytes(stop - start))
                start = stop
    return bytes(out)


class Disk:
    """All state of one simulated boot, shared by the filesystem and its handles."""

    def __init__(self, seed: int, capacity: int | None) -> None:
        self.root = Dir()
        self.dirs = [self.root]
        # Namespace ops not yet folded into the directories' durable entries,
        # in the order they happened; a fully synced op waits here behind an
        # older one still pending elsewhere, so durable state replays in order.
        self.log: deque[NsOp] = deque()
        self.rng = random.Random(seed)
        self.capacity = capacity
        self.faults: list[Fault] = []
        self.calls: dict[str, int] = {}
        self.locked: set[File] = set()
        self.dead = False

    def count(self, op: str) -> None:
        if self.dead:
            raise SimulatedCrashError("this filesystem crashed; use the one crash() returned")
        self.calls[op] = self.calls.get(op, 0) + 1

    def check(self, op: str, *paths: str) -> Fault | None:
        """Count a faultable call; return the fault it triggers, if any."""
        self.count(op)
        hit: Fault | None = None
        for fault in self.faults:
            if fault.op not in ("*", op):
                continue
            if not any(fnmatch.fnmatchcase(path, fault.glob) for path in paths):
                continue
            if fault.skip:
                fault.skip -= 1
            elif hit is None and fault.times != 0:
                hit = fault
                if fault.times is not None:
                    fault.times -= 1
        return hit

    def enter(self, op: str, *paths: str) -> None:
        fault = self.check(op, *paths)
        if fault is not None:
            raise fault.error(op, *paths)

    def walk(self, path: str) -> Node:
        node: Node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, Dir):
                raise oserror(errno.ENOTDIR, path)
            child = node.current.get(part)
            if child is None:
                raise oserror(errno.ENOENT, path)
            node = child
        return node

    def parent(self, path: str) -> tuple[Dir, str]:
        if path == "/":
            raise oserror(errno.EBUSY, path)
        head, name = posixpath.split(path)
        directory = self.walk(head)
        if not isinstance(directory, Dir):
            raise oserror(errno.ENOTDIR, path)
        return directory, name

    def record(self, *effects: _Effect) -> None:
        op = NsOp(effects, {effect[0] for effect in effects})
        self.log.append(op)
        for directory in op.unsynced:
            directory.pending.append(op)

    def link(self, directory: Dir, name: str, node: Node) -> None:
        if isinstance(node, Dir):
            self.dirs.append(node)
        directory.current[name] = node
        self.record((directory, name, node, True))

    def sync_dir(self, directory: Dir) -> None:
        for op in directory.pending:
            op.unsynced.discard(directory)
        directory.pending.clear()
        while self.log and not self.log[0].unsynced:
            _apply(self.log.popleft(), lambda d: d.durable)

    def resolve(self, survives: Callable[[NsOp], bool]) -> dict[Dir, dict[str, Node]]:
        """Directory entries after a crash in which ``survives`` says which pending ops land."""
        table = {directory: dict(directory.durable) for directory in self.dirs}
        for op in self.log:
            if not op.unsynced or survives(op):
                _apply(op, table.__getitem__)
        return table

    def used(self, directory: Dir | None = None) -> int:
        """Bytes of current content under ``directory`` (a tree: renames move)."""
        nodes = (directory or self.root).current.values()
        return sum(len(n.current) if isinstance(n, File) else self.used(n) for n in nodes)

    def write(self, file: File, offset: int, data: bytes) -> None:
        if data:
            put(file.current, offset, data)
            file.pending.append(_Write(offset, data))

    def truncate(self, file: File, size: int) -> None:
        _resize(file.current, size)
        file.pending.append(_Truncate(size))


class SimHandle:
    __slots__ = ("_closed", "_disk", "_file", "_path", "_pos")

    def __init__(self, disk: Disk, file: File, path: str) -> None:
        self._disk = disk
        self._file = file
        self._path = path
        # A file position of its own, like the fd OsFileSystem opens: at the
        # end when opened, moved by writes and truncate.
        self._pos = len(file.current)
        self._closed = False

    def _begin(self, op: str) -> Fault | None:
        if self._closed and not self._disk.dead:
            raise oserror(errno.EBADF, self._path)
        return self._disk.check(op, self._path) if op in FAULT_OPS else self._disk.count(op)

    def write(self, data: bytes) -> None:
        fault = self._begin("write")
        disk = self._disk
        if fault is not None and not fault.partial:
            raise fault.error("write", self._path)
        if fault is not None:
            data = data[: disk.rng.randrange(len(data))] if data else b""
        fits = len(data)
        if disk.capacity is not None:
            limit = len(self._file.current) + max(0, disk.capacity - disk.used())
            fits = max(0, min(fits, limit - self._pos))
        disk.write(self._file, self._pos, bytes(data[:fits]))
        self._pos += fits
        if fault is not None:
            raise fault.error("write", self._path)
        if fits < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def sync(self) -> None:
        fault = self._begin("sync")
        # Success writes exactly the pending ops, not the cache: after a failed
        # sync the two differ for good, as on Linux.
        self._file.durable = bytearray(land(self._file, self._disk.rng if fault else None))
        self._file.pending.clear()
        if fault is not None:
            raise fault.error("sync", self._path)
        # The size, though, is the inode's, and fdatasync persists it (the
        # FileHandle.sync contract: "data and size"): a truncation or an
        # extension whose earlier sync failed is durable once one succeeds,
        # over whatever content the disk has there.
        _resize(self._file.durable, len(self._file.current))

    def size(self) -> int:
        self._begin("size")
        return len(self._file.current)

    def truncate(self, size: int) -> None:
        fault = self._begin("truncate")
        if fault is not None:
            raise fault.error("truncate", self._path)
        if size < 0:
            raise oserror(errno.EINVAL, self._path)
        self._disk.truncate(self._file, size)
        self._pos = size

    def close(self) -> None:
        self._disk.count("close")
        self._closed = True


__all__ = [
    "FAULT_OPS",
    "SECTOR",
    "Dir",
    "Disk",
    "Fault",
    "File",
    "Node",
    "NsOp",
    "SimHandle",
    "SimulatedCrashError",
    "land",
    "oserror",
    "put",
]
