"""An in-memory :class:`~naga_core.ledger._fs.FileSystem` that loses power.

The model, which the power-loss tests rely on:

* Each file has DURABLE content (what survives a crash) and a list of PENDING
  data operations (a write at an offset, a truncation) that, applied in order
  on top, give the CURRENT content every read sees. ``FileHandle.sync``
  (fdatasync) makes that file's pending data ops durable, data and size.
* Namespace operations (create a file, mkdir, rename, remove) are pending in
  their parent directory until ``sync_dir(parent)`` makes that directory's
  pending ops durable, in order. A rename between two directories is pending
  in both and durable once both are synced. A file whose name never became
  durable is gone after a crash even if its data was synced; a durable name
  keeps its file's synced data.
* :meth:`SimulatedFileSystem.crash` returns a NEW filesystem holding one
  possible state after a power loss. Per file, each pending data op
  independently is lost, applied, applied zero-filled, or torn: each 512-byte
  sector it touches (aligned to absolute file offsets) is written, lost or
  zero-filled. Independence also covers reordering. Surviving ops are replayed
  in order on the durable content, so the file ends where the furthest
  surviving piece ends (or where a surviving truncation put it): a lost write
  at the end leaves the file shorter, a lost write before a surviving one
  leaves zeros (or the older bytes) in between. Per
  directory, a random PREFIX of its pending namespace ops survives, because
  metadata journals keep order; a two-directory rename survives only if it is
  inside both prefixes. :meth:`~SimulatedFileSystem.crash_clean` keeps durable
  state only (the harshest legal outcome) and
  :meth:`~SimulatedFileSystem.snapshot_current` keeps everything visible (a
  clean shutdown).

A crash is a reboot: faults, locks and call counts do not carry over, and the
old object and its handles raise :class:`SimulatedCrashError` on every call, so
a test cannot keep writing through a stale handle (only ``calls()`` still
answers). :meth:`SimulatedFileSystem.clone` is the one non-destructive copy,
for drawing many crash outcomes from one state.

Faults: :meth:`SimulatedFileSystem.fail` makes the (after+1)-th matching call
of an operation raise ``OSError`` (once, N times, or from then on); a
``partial`` write fault first writes a random prefix, like a short write
before ENOSPC. ``capacity`` bounds the bytes of current file content. A failed
``sync`` is Linux after a writeback error: the pending ops meet a crash's fates
on the disk right then and are forgotten, while reads still show them, so a
retried sync "succeeds" without writing them (why an fsync error is fatal).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import fnmatch
import os
import posixpath
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TypeAlias

from naga_core.errors import LedgerLocked
from naga_core.ledger._fs import FileHandle, OpenMode

__all__ = ["FAULT_OPS", "SECTOR", "SimulatedFileSystem", "SimulatedCrashError"]

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


class _File:
    __slots__ = ("current", "durable", "pending")

    def __init__(self, content: bytes = b"") -> None:
        self.durable = bytearray(content)
        self.current = bytearray(content)
        self.pending: list[_Write | _Truncate] = []


class _Dir:
    __slots__ = ("current", "durable", "pending")

    def __init__(self) -> None:
        self.durable: dict[str, _Node] = {}
        self.current: dict[str, _Node] = {}
        self.pending: list[_NsOp] = []


_Node: TypeAlias = "_File | _Dir"
# (directory, name, node, link): a link sets the name; an unlink removes the
# name only if it still names ``node``, so that replaying a two-directory
# rename late cannot delete a file created under the old name since.
_Effect: TypeAlias = "tuple[_Dir, str, _Node, bool]"


@dataclass(eq=False, slots=True)
class _NsOp:
    effects: tuple[_Effect, ...]
    unsynced: set[_Dir]


@dataclass(slots=True)
class _Fault:
    op: str
    glob: str
    skip: int
    times: int | None
    errno: int
    partial: bool

    def error(self, op: str, path: str, other: str | None = None) -> OSError:
        return OSError(self.errno, f"simulated {op} fault", path, None, other)


def _oserror(code: int, path: str) -> OSError:
    # OSError picks the subclass (FileNotFoundError, ...) from the code.
    return OSError(code, os.strerror(code), path)


def _put(buf: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _resize(buf: bytearray, size: int) -> None:
    if size < len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


def _apply(op: _NsOp, entries: Callable[[_Dir], dict[str, _Node]]) -> None:
    for directory, name, node, link in op.effects:
        table = entries(directory)
        if link:
            table[name] = node
        elif table.get(name) is node:
            del table[name]


def _land(file: _File, rng: random.Random | None) -> bytes:
    """The file's disk content once its pending ops met their fates (all land if no rng)."""
    out = bytearray(file.durable)
    for op in file.pending:
        if isinstance(op, _Truncate):
            if rng is None or rng.random() < 0.5:
                _resize(out, op.size)
            continue
        fate = 1 if rng is None else rng.randrange(4)
        if fate == 1:
            _put(out, op.offset, op.data)
        elif fate == 2:
            _put(out, op.offset, bytes(len(op.data)))
        elif fate == 3:
            start, end = op.offset, op.offset + len(op.data)
            while start < end:
                stop = min(end, (start // SECTOR + 1) * SECTOR)
                sector_fate = 1 if rng is None else rng.randrange(3)
                if sector_fate == 1:
                    _put(out, start, op.data[start - op.offset : stop - op.offset])
                elif sector_fate == 2:
                    _put(out, start, bytes(stop - start))
                start = stop
    return bytes(out)


class _Disk:
    """All state of one simulated boot, shared by the filesystem and its handles."""

    def __init__(self, seed: int, capacity: int | None) -> None:
        self.root = _Dir()
        self.dirs = [self.root]
        # Namespace ops not yet folded into the directories' durable entries,
        # in the order they happened; a fully synced op waits here behind an
        # older one still pending elsewhere, so durable state replays in order.
        self.log: deque[_NsOp] = deque()
        self.rng = random.Random(seed)
        self.capacity = capacity
        self.faults: list[_Fault] = []
        self.calls: dict[str, int] = {}
        self.locked: set[_File] = set()
        self.dead = False

    def count(self, op: str) -> None:
        if self.dead:
            raise SimulatedCrashError("this filesystem crashed; use the one crash() returned")
        self.calls[op] = self.calls.get(op, 0) + 1

    def check(self, op: str, *paths: str) -> _Fault | None:
        """Count a faultable call; return the fault it triggers, if any."""
        self.count(op)
        hit: _Fault | None = None
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

    def walk(self, path: str) -> _Node:
        node: _Node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, _Dir):
                raise _oserror(errno.ENOTDIR, path)
            child = node.current.get(part)
            if child is None:
                raise _oserror(errno.ENOENT, path)
            node = child
        return node

    def parent(self, path: str) -> tuple[_Dir, str]:
        if path == "/":
            raise _oserror(errno.EBUSY, path)
        head, name = posixpath.split(path)
        directory = self.walk(head)
        if not isinstance(directory, _Dir):
            raise _oserror(errno.ENOTDIR, path)
        return directory, name

    def record(self, *effects: _Effect) -> None:
        op = _NsOp(effects, {effect[0] for effect in effects})
        self.log.append(op)
        for directory in op.unsynced:
            directory.pending.append(op)

    def link(self, directory: _Dir, name: str, node: _Node) -> None:
        if isinstance(node, _Dir):
            self.dirs.append(node)
        directory.current[name] = node
        self.record((directory, name, node, True))

    def sync_dir(self, directory: _Dir) -> None:
        for op in directory.pending:
            op.unsynced.discard(directory)
        directory.pending.clear()
        while self.log and not self.log[0].unsynced:
            _apply(self.log.popleft(), lambda d: d.durable)

    def resolve(self, survives: Callable[[_NsOp], bool]) -> dict[_Dir, dict[str, _Node]]:
        """Directory entries after a crash in which ``survives`` says which pending ops land."""
        table = {directory: dict(directory.durable) for directory in self.dirs}
        for op in self.log:
            if not op.unsynced or survives(op):
                _apply(op, table.__getitem__)
        return table

    def used(self, directory: _Dir | None = None) -> int:
        """Bytes of current content under ``directory`` (a tree: renames move)."""
        nodes = (directory or self.root).current.values()
        return sum(len(n.current) if isinstance(n, _File) else self.used(n) for n in nodes)

    def write(self, file: _File, offset: int, data: bytes) -> None:
        if data:
            _put(file.current, offset, data)
            file.pending.append(_Write(offset, data))

    def truncate(self, file: _File, size: int) -> None:
        _resize(file.current, size)
        file.pending.append(_Truncate(size))


class _SimHandle:
    __slots__ = ("_closed", "_disk", "_file", "_path", "_pos")

    def __init__(self, disk: _Disk, file: _File, path: str) -> None:
        self._disk = disk
        self._file = file
        self._path = path
        # A file position of its own, like the fd OsFileSystem opens: at the
        # end when opened, moved by writes and truncate.
        self._pos = len(file.current)
        self._closed = False

    def _begin(self, op: str) -> _Fault | None:
        if self._closed and not self._disk.dead:
            raise _oserror(errno.EBADF, self._path)
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
        self._file.durable = bytearray(_land(self._file, self._disk.rng if fault else None))
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
            raise _oserror(errno.EINVAL, self._path)
        self._disk.truncate(self._file, size)
        self._pos = size

    def close(self) -> None:
        self._disk.count("close")
        self._closed = True


class SimulatedFileSystem:
    """In-memory FileSystem with power loss and fault injection (see module doc)."""

    def __init__(self, seed: int = 0, capacity: int | None = None) -> None:
        self._disk = _Disk(seed, capacity)

    # --- the FileSystem protocol --------------------------------------------------

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        path = _norm(path)
        disk = self._disk
        disk.enter("open", path)
        directory, name = disk.parent(path)
        node = directory.current.get(name)
        if mode == "create_new" and node is not None:
            raise _oserror(errno.EEXIST, path)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, path)
        if node is None:
            if mode == "read_write":
                raise _oserror(errno.ENOENT, path)
            node = _File()
            disk.link(directory, name, node)
        return _SimHandle(disk, node, path)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        path = _norm(path)
        self._disk.enter("read", path)
        file = self._file(path)
        if offset < 0:
            raise _oserror(errno.EINVAL, path)
        end = len(file.current) if length is None or length < 0 else offset + length
        return bytes(file.current[offset:end])

    def size(self, path: str) -> int:
        path = _norm(path)
        self._disk.count("size")
        node = self._disk.walk(path)
        return len(node.current) if isinstance(node, _File) else 0

    def exists(self, path: str) -> bool:
        return self._lookup("exists", path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._lookup("is_dir", path), _Dir)

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        self._disk.enter("listdir", path)
        return sorted(self._dir(path).current)

    def mkdir(self, path: str) -> None:
        path = _norm(path)
        disk = self._disk
        disk.enter("mkdir", path)
        directory, name = disk.parent(path)
        if name in directory.current:
            raise _oserror(errno.EEXIST, path)
        disk.link(directory, name, _Dir())

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        disk = self._disk
        disk.enter("rename", src, dst)
        src_dir, src_name = disk.parent(src)
        node = src_dir.current.get(src_name)
        if node is None:
            raise _oserror(errno.ENOENT, src)
        dst_dir, dst_name = disk.parent(dst)
        target = dst_dir.current.get(dst_name)
        if target is node:
            return
        if isinstance(node, _Dir):
            if dst.startswith(src + "/"):
                raise _oserror(errno.EINVAL, dst)
            if isinstance(target, _File):
                raise _oserror(errno.ENOTDIR, dst)
            if isinstance(target, _Dir) and target.current:
                raise _oserror(errno.ENOTEMPTY, dst)
        elif isinstance(target, _Dir):
            raise _oserror(errno.EISDIR, dst)
        del src_dir.current[src_name]
        dst_dir.current[dst_name] = node
        disk.record((src_dir, src_name, node, False), (dst_dir, dst_name, node, True))

    def remove(self, path: str) -> None:
        path = _norm(path)
        disk = self._disk
        disk.enter("remove", path)
        directory, name = disk.parent(path)
        node = directory.current.get(name)
        if node is None:
            raise _oserror(errno.ENOENT, path)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, path)
        del directory.current[name]
        disk.record((directory, name, node, False))

    def sync_dir(self, path: str) -> None:
        path = _norm(path)
        self._disk.enter("sync_dir", path)
        self._disk.sync_dir(self._dir(path))

    @contextlib.contextmanager
    def lock(self, path: str) -> Generator[None]:
        path = _norm(path)
        disk = self._disk
        disk.count("lock")
        directory, name = disk.parent(path)
        node = directory.current.get(name)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, path)
        if node is None:
            node = _File()
            disk.link(directory, name, node)
        if node in disk.locked:
            raise LedgerLocked(
                f"ledger at {posixpath.dirname(path)} is held by another holder "
                "in this simulated filesystem; stop it first"
            )
        disk.locked.add(node)
        try:
            # Same bytes as OsFileSystem leaves, so sizes and listings agree.
            disk.truncate(node, 0)
            disk.write(node, 0, f"{os.getpid()}\n".encode())
            yield
        finally:
            disk.locked.discard(node)

    # --- faults ---------------------------------------------------------------

    def fail(
        self,
        op: str,
        path_glob: str = "*",
        *,
        after: int = 0,
        times: int | None = 1,
        errno: int = errno.EIO,
        partial: bool = False,
    ) -> None:
        """Make the (after+1)-th call of ``op`` on a path matching ``path_glob`` fail.

        ``op`` is one of :data:`FAULT_OPS` or ``"*"`` for any of them (to fail
        the N-th primitive whatever it is). The fault fires ``times`` times in
        a row, or on every later match when ``times`` is None. ``partial``
        write faults first write a random prefix of the data. A rename matches
        on its source or its destination.
        """
        self._disk.count("fail")
        if op != "*" and op not in FAULT_OPS:
            raise ValueError(f"unknown operation {op!r}; expected one of {sorted(FAULT_OPS)}")
        if after < 0 or (times is not None and times < 1):
            raise ValueError("after must be >= 0 and times >= 1 or None")
        if partial and op not in ("write", "*"):
            raise ValueError("partial applies to write faults only")
        self._disk.faults.append(_Fault(op, path_glob, after, times, errno, partial))

    def clear_faults(self) -> None:
        self._disk.count("clear_faults")
        self._disk.faults.clear()

    def calls(self, op: str) -> int:
        """How many times ``op`` was called on this boot, failed calls included.

        Still answers after a crash, to tell how far the run got.
        """
        return self._disk.calls.get(op, 0)

    # --- power loss -------------------------------------------------------------

    def crash(self, rng: random.Random) -> SimulatedFileSystem:
        """One random post-power-loss state, drawn from ``rng``; this object dies."""
        disk = self._disk
        disk.count("crash")
        kept: dict[_Dir, set[_NsOp]] = {}
        for directory in disk.dirs:
            cut = rng.randint(0, len(directory.pending))
            kept[directory] = set(directory.pending[:cut])
        table = disk.resolve(lambda op: all(op in kept[d] for d in op.unsynced))
        return self._reboot(table.__getitem__, lambda f: _land(f, rng), rng)

    def crash_clean(self) -> SimulatedFileSystem:
        """Only what is durable survives; nothing pending lands. This object dies."""
        self._disk.count("crash")
        table = self._disk.resolve(lambda op: False)
        return self._reboot(table.__getitem__, lambda f: bytes(f.durable), self._disk.rng)

    def snapshot_current(self) -> SimulatedFileSystem:
        """A clean shutdown: everything visible now is durable. This object dies."""
        self._disk.count("crash")
        return self._reboot(lambda d: d.current, lambda f: bytes(f.current), self._disk.rng)

    def clone(self) -> SimulatedFileSystem:
        """An independent copy of durable and pending state; this object lives on.

        Open handles, faults, locks and call counts are not copied.
        """
        self._disk.count("clone")
        twin = SimulatedFileSystem(self._disk.rng.getrandbits(64), self._disk.capacity)
        disk = copy.deepcopy(self._disk)
        disk.rng, disk.faults, disk.calls = twin._disk.rng, [], {}
        disk.locked = set()
        twin._disk = disk
        return twin

    # --- helpers for tests ------------------------------------------------------

    def corrupt(self, path: str, offset: int, data: bytes) -> None:
        """Overwrite bytes as bit rot or tampering would: on disk and in the cache.

        Bytes past the durable end change only the current content: nothing
        is on the disk there to rot.
        """
        path = _norm(path)
        self._disk.count("corrupt")
        file = self._file(path)
        _put(file.current, offset, data)
        on_disk = data[: max(0, len(file.durable) - offset)]
        file.durable[offset : offset + len(on_disk)] = on_disk

    def durable_bytes(self, path: str) -> bytes | None:
        """What ``crash_clean()`` would show at ``path``, or None if no file there."""
        path = _norm(path)
        self._disk.count("durable_bytes")
        table = self._disk.resolve(lambda op: False)
        node: _Node | None = self._disk.root
        for part in path.split("/"):
            if part and isinstance(node, _Dir):
                node = table[node].get(part)
            elif part:
                return None
        return bytes(node.durable) if isinstance(node, _File) else None

    # --- internals ----------------------------------------------------------------

    def _lookup(self, op: str, path: str) -> _Node | None:
        path = _norm(path)
        self._disk.count(op)
        try:
            return self._disk.walk(path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _file(self, path: str) -> _File:
        node = self._disk.walk(path)
        if isinstance(node, _Dir):
            raise _oserror(errno.EISDIR, path)
        return node

    def _dir(self, path: str) -> _Dir:
        node = self._disk.walk(path)
        if not isinstance(node, _Dir):
            raise _oserror(errno.ENOTDIR, path)
        return node

    def _reboot(
        self,
        entries: Callable[[_Dir], dict[str, _Node]],
        content: Callable[[_File], bytes],
        rng: random.Random,
    ) -> SimulatedFileSystem:
        old = self._disk
        new = SimulatedFileSystem(rng.getrandbits(64), old.capacity)
        made: dict[int, _Node] = {id(old.root): new._disk.root}

        def copy_dir(source: _Dir, into: _Dir) -> None:
            for name, child in entries(source).items():
                twin = made.get(id(child))
                if twin is None and isinstance(child, _Dir):
                    twin = made[id(child)] = _Dir()
                    new._disk.dirs.append(twin)
                    copy_dir(child, twin)
                elif twin is None and isinstance(child, _File):
                    twin = made[id(child)] = _File(content(child))
                assert twin is not None
                into.durable[name] = into.current[name] = twin

        copy_dir(old.root, new._disk.root)
        old.dead = True
        return new


def _norm(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"SimulatedFileSystem paths are absolute: {path!r}")
    return "/" + posixpath.normpath(path).lstrip("/")
