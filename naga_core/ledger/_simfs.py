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
import os
import posixpath
import random
from collections.abc import Callable, Generator

from naga_core.errors import LedgerLocked
from naga_core.ledger._fs import FileHandle, OpenMode
from naga_core.ledger._simdisk import (
    FAULT_OPS,
    SECTOR,
    Dir,
    Disk,
    Fault,
    File,
    Node,
    NsOp,
    SimHandle,
    SimulatedCrashError,
    land,
    oserror,
    put,
)

__all__ = ["FAULT_OPS", "SECTOR", "SimulatedFileSystem", "SimulatedCrashError"]


class SimulatedFileSystem:
    """In-memory FileSystem with power loss and fault injection (see module doc)."""

    def __init__(self, seed: int = 0, capacity: int | None = None) -> None:
        self._disk = Disk(seed, capacity)

    # --- the FileSystem protocol --------------------------------------------------

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        path = _norm(path)
        disk = self._disk
        disk.enter("open", path)
        directory, name = disk.parent(path)
        node = directory.current.get(name)
        if mode == "create_new" and node is not None:
            raise oserror(errno.EEXIST, path)
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR, path)
        if node is None:
            if mode == "read_write":
                raise oserror(errno.ENOENT, path)
            node = File()
            disk.link(directory, name, node)
        return SimHandle(disk, node, path)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        path = _norm(path)
        self._disk.enter("read", path)
        file = self._file(path)
        if offset < 0:
            raise oserror(errno.EINVAL, path)
        end = len(file.current) if length is None or length < 0 else offset + length
        return bytes(file.current[offset:end])

    def size(self, path: str) -> int:
        path = _norm(path)
        self._disk.count("size")
        node = self._disk.walk(path)
        return len(node.current) if isinstance(node, File) else 0

    def exists(self, path: str) -> bool:
        return self._lookup("exists", path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._lookup("is_dir", path), Dir)

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
            raise oserror(errno.EEXIST, path)
        disk.link(directory, name, Dir())

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        disk = self._disk
        disk.enter("rename", src, dst)
        src_dir, src_name = disk.parent(src)
        node = src_dir.current.get(src_name)
        if node is None:
            raise oserror(errno.ENOENT, src)
        dst_dir, dst_name = disk.parent(dst)
        target = dst_dir.current.get(dst_name)
        if target is node:
            return
        if isinstance(node, Dir):
            if dst.startswith(src + "/"):
                raise oserror(errno.EINVAL, dst)
            if isinstance(target, File):
                raise oserror(errno.ENOTDIR, dst)
            if isinstance(target, Dir) and target.current:
                raise oserror(errno.ENOTEMPTY, dst)
        elif isinstance(target, Dir):
            raise oserror(errno.EISDIR, dst)
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
            raise oserror(errno.ENOENT, path)
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR, path)
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
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR, path)
        if node is None:
            node = File()
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
        self._disk.faults.append(Fault(op, path_glob, after, times, errno, partial))

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
        kept: dict[Dir, set[NsOp]] = {}
        for directory in disk.dirs:
            cut = rng.randint(0, len(directory.pending))
            kept[directory] = set(directory.pending[:cut])
        table = disk.resolve(lambda op: all(op in kept[d] for d in op.unsynced))
        return self._reboot(table.__getitem__, lambda f: land(f, rng), rng)

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
        put(file.current, offset, data)
        on_disk = data[: max(0, len(file.durable) - offset)]
        file.durable[offset : offset + len(on_disk)] = on_disk

    def durable_bytes(self, path: str) -> bytes | None:
        """What ``crash_clean()`` would show at ``path``, or None if no file there."""
        path = _norm(path)
        self._disk.count("durable_bytes")
        table = self._disk.resolve(lambda op: False)
        node: Node | None = self._disk.root
        for part in path.split("/"):
            if part and isinstance(node, Dir):
                node = table[node].get(part)
            elif part:
                return None
        return bytes(node.durable) if isinstance(node, File) else None

    # --- internals ----------------------------------------------------------------

    def _lookup(self, op: str, path: str) -> Node | None:
        path = _norm(path)
        self._disk.count(op)
        try:
            return self._disk.walk(path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _file(self, path: str) -> File:
        node = self._disk.walk(path)
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR, path)
        return node

    def _dir(self, path: str) -> Dir:
        node = self._disk.walk(path)
        if not isinstance(node, Dir):
            raise oserror(errno.ENOTDIR, path)
        return node

    def _reboot(
        self,
        entries: Callable[[Dir], dict[str, Node]],
        content: Callable[[File], bytes],
        rng: random.Random,
    ) -> SimulatedFileSystem:
        old = self._disk
        new = SimulatedFileSystem(rng.getrandbits(64), old.capacity)
        made: dict[int, Node] = {id(old.root): new._disk.root}

        def copy_dir(source: Dir, into: Dir) -> None:
            for name, child in entries(source).items():
                twin = made.get(id(child))
                if twin is None and isinstance(child, Dir):
                    twin = made[id(child)] = Dir()
                    new._disk.dirs.append(twin)
                    copy_dir(child, twin)
                elif twin is None and isinstance(child, File):
                    twin = made[id(child)] = File(content(child))
                assert twin is not None
                into.durable[name] = into.current[name] = twin

        copy_dir(old.root, new._disk.root)
        old.dead = True
        return new


def _norm(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"SimulatedFileSystem paths are absolute: {path!r}")
    return "/" + posixpath.normpath(path).lstrip("/")
