"""The content-addressed blob store: payloads too big for a record.

A blob lives at ``root/sha256/ab/<64 lowercase hex>``, named by the SHA-256
of its content, so a record references it by digest alone and anyone can
check that what they read is what was referenced. Writes go through
``root/tmp`` and a rename, so a crash leaves either no blob or a whole one,
plus at worst a temp file that :meth:`BlobStore.clean_tmp` removes (the
ledger's open does, so every start cleans what a kill left).

Everything touches the disk through :class:`~naga_core.ledger._fs.FileSystem`,
so the simulated filesystem can inject faults and crashes into every step.

One writer at a time: the holder of the ledger lock. Reads may run alongside.
"""

from __future__ import annotations

import hashlib
import os.path
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from naga.constants import MAX_BLOB_BYTES
from naga_core.errors import BlobCorrupt, BlobError, NotFound
from naga_core.ledger._fs import FileSystem, makedirs, sha256_file

_DIGEST_BYTES = 32
_HEX = frozenset("0123456789abcdef")
# The algorithm is part of the layout so another hash can move in beside it.
_ALGO_DIR = "sha256"
_TMP_DIR = "tmp"

ProblemKind = Literal["corrupt", "stray", "leftover"]


@dataclass(frozen=True, slots=True)
class BlobProblem:
    """One thing :meth:`BlobStore.verify_all` found wrong.

    ``kind`` is ``"corrupt"`` for a blob whose content does not match its name
    (or cannot be read), ``"stray"`` for a file that is not a blob at all (a
    misnamed or misplaced file) and ``"leftover"`` for a temp file of an
    interrupted put: what a crash leaves by design, removed by the next open
    (:meth:`BlobStore.clean_tmp`), so not damage.
    """

    path: str
    reason: str
    kind: ProblemKind


def _is_hex(name: str, length: int) -> bool:
    return len(name) == length and _HEX.issuperset(name)


def _check_digest(digest: bytes) -> bytes:
    if not isinstance(digest, bytes | bytearray | memoryview):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"a blob digest is bytes, got {type(digest).__name__}")
    raw = bytes(digest)
    if len(raw) != _DIGEST_BYTES:
        raise ValueError(f"a blob digest is {_DIGEST_BYTES} bytes (SHA-256), got {len(raw)}")
    return raw


class BlobStore:
    """Content-addressed, verified, atomically written blobs under ``root``."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        if not os.path.isabs(root):
            raise ValueError(f"blob store root must be an absolute path, got {root!r}")
        self._fs = fs
        self._root = os.path.normpath(root)
        self._objects = os.path.join(self._root, _ALGO_DIR)
        self._tmp = os.path.join(self._root, _TMP_DIR)
        # Set by the first failed write or sync. As with the ledger, a failed
        # fsync is never retried: the kernel may have dropped the pages and a
        # second fsync can report success anyway, so put refuses from then on.
        self._failed: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def root(self) -> str:
        return self._root

    def path_of(self, digest: bytes) -> str:
        """Where the blob with this digest lives (whether or not it exists)."""
        name = _check_digest(digest).hex()
        return os.path.join(self._objects, name[:2], name)

    def exists(self, digest: bytes) -> bool:
        """Whether a file sits at the blob's address; its content is not checked."""
        path = self.path_of(digest)
        try:
            return self._fs.exists(path)
        except OSError as e:
            raise BlobError(f"cannot check blob {path}: {e}") from e

    def put(self, data: bytes) -> bytes:
        """Store ``data`` and return its 32-byte SHA-256 digest.

        Idempotent: if the blob is already stored with the right content,
        nothing is written. If a file is at the address but its content is
        wrong (bit rot, a stray write), it is *replaced*, atomically, by
        ``data``, which does match the address; the bad copy is not kept.

        The new file is written in ``root/tmp``, fdatasync'ed, renamed into
        place, and the target directory is fsync'ed, so when this returns the
        blob is durable, and a crash before that leaves the address as it was
        (empty, or holding the corrupt copy being replaced).
        An existing blob's directory is fsync'ed too (cheap when clean), so the
        blob is durable even if whoever wrote it did not get that far.

        BlobError if ``data`` is larger than MAX_BLOB_BYTES or the disk fails.
        After a failed write or sync every later put raises BlobError; the
        remedy is a new store (whose opener runs :meth:`clean_tmp`) that
        sees what is really on disk. Reads keep working.
        """
        if self._failed is not None:
            raise BlobError(f"blob store {self._root} failed earlier ({self._failed}); reopen it")
        if len(data) > MAX_BLOB_BYTES:
            raise BlobError(f"blob of {len(data)} bytes exceeds the limit of {MAX_BLOB_BYTES}")
        digest = hashlib.sha256(data).digest()
        path = self.path_of(digest)
        try:
            present = self._fs.exists(path) and self._matches(path, digest, len(data))
        except OSError as e:
            raise BlobError(f"cannot check blob {path}: {e}") from e
        try:
            if present:
                self._fs.sync_dir(os.path.dirname(path))
            else:
                self._write(path, data)
        except OSError as e:
            self._failed = f"storing {path}: {e}"
            raise BlobError(f"cannot store blob {path}: {e}") from e
        return digest

    def put_soon(self, data: bytes) -> tuple[bytes, Future[bytes]]:
        """Start :meth:`put` of ``data`` on a thread of this store: its
        digest now, and the put's future (done when the blob is durable, or
        failed with its BlobError). A record may name the digest at once if
        the ledger's commit waits for the future first
        (:meth:`Ledger.commit_after`): the blob is durable before any record
        that references it, as with put, without its syncs on the caller's
        path."""
        if len(data) > MAX_BLOB_BYTES:
            raise BlobError(f"blob of {len(data)} bytes exceeds the limit of {MAX_BLOB_BYTES}")
        digest = hashlib.sha256(data).digest()
        with self._pool_lock:
            if self._pool is None:
                # Two: a put's syncs overlap the next one's write.
                self._pool = ThreadPoolExecutor(2, thread_name_prefix="naga-blob")
            return digest, self._pool.submit(self.put, data)

    def get(self, digest: bytes) -> bytes:
        """Read a blob and check it: NotFound if absent, BlobCorrupt if altered."""
        path = self.path_of(digest)
        try:
            if not self._fs.exists(path):
                raise NotFound(f"blob {digest.hex()} is not in the store")
            if self._fs.is_dir(path):
                raise BlobCorrupt(path, "is a directory, not a blob file")
            size = self._fs.size(path)
            # A file larger than any blob can be cannot match; do not load it.
            if size > MAX_BLOB_BYTES:
                raise BlobCorrupt(path, f"{size} bytes, more than any blob ({MAX_BLOB_BYTES})")
            data = self._fs.read(path)
        except FileNotFoundError:
            raise NotFound(f"blob {digest.hex()} is not in the store") from None
        except OSError as e:
            raise BlobError(f"cannot read blob {path}: {e}") from e
        actual = hashlib.sha256(data).digest()
        if actual != digest:
            raise BlobCorrupt(path, f"content hashes to {actual.hex()}, not to its name")
        return data

    def iter_digests(self) -> Iterator[bytes]:
        """Every stored blob's digest, in ascending byte order.

        Contents are not read. A file that cannot be a blob (a name that is not
        64 lowercase hex, or one in the wrong fan-out directory) raises
        BlobCorrupt naming it: the caller asked for the store's contents and
        the store is not what Naga wrote. :meth:`verify_all` reports instead.
        """
        try:
            for path, problem in self._walk_objects():
                if problem is not None:
                    raise BlobCorrupt(path, problem)
                yield bytes.fromhex(os.path.basename(path))
        except OSError as e:
            raise BlobError(f"cannot list blob store {self._root}: {e}") from e

    def verify_all(self) -> list[BlobProblem]:
        """Rehash every blob and list everything wrong; changes nothing.

        Reports corrupt blobs, stray files anywhere under ``root`` and temp
        files left in ``root/tmp`` by an interrupted put (kind ``leftover``:
        :meth:`clean_tmp` removes those).
        """
        problems: list[BlobProblem] = []
        try:
            for path, problem in self._walk_objects():
                if problem is not None:
                    problems.append(BlobProblem(path, problem, "stray"))
                    continue
                reason = self._check_content(path)
                if reason is not None:
                    problems.append(BlobProblem(path, reason, "corrupt"))
            if self._fs.is_dir(self._root):
                for name in sorted(self._fs.listdir(self._root)):
                    path = os.path.join(self._root, name)
                    if name not in (_ALGO_DIR, _TMP_DIR) or not self._fs.is_dir(path):
                        problems.append(BlobProblem(path, "not part of the blob store", "stray"))
            for path in self._tmp_entries():
                if self._fs.is_dir(path):  # never made by a put: not ours to remove
                    problems.append(BlobProblem(path, "a directory in the temp area", "stray"))
                else:
                    problems.append(
                        BlobProblem(path, "temp file left by an interrupted put", "leftover")
                    )
        except OSError as e:
            raise BlobError(f"cannot verify blob store {self._root}: {e}") from e
        problems.sort(key=lambda p: p.path)
        return problems

    def clean_tmp(self) -> list[str]:
        """Remove what interrupted puts left in ``root/tmp``; return the paths.

        Only safe when no put is in flight, i.e. when the ledger is opened.
        Subdirectories (which Naga never makes there) are left for a human.
        """
        removed: list[str] = []
        try:
            for path in self._tmp_entries():
                if self._fs.is_dir(path):
                    continue
                self._fs.remove(path)
                removed.append(path)
            if removed:
                self._fs.sync_dir(self._tmp)
        except OSError as e:
            raise BlobError(f"cannot clean {self._tmp}: {e}") from e
        return removed

    # --- internals -----------------------------------------------------------

    def _matches(self, path: str, digest: bytes, size: int) -> bool:
        if self._fs.is_dir(path) or self._fs.size(path) != size:
            return False
        return sha256_file(self._fs, path) == digest

    def _write(self, path: str, data: bytes) -> None:
        makedirs(self._fs, self._tmp)
        makedirs(self._fs, os.path.dirname(path))
        # A random suffix keeps two stores (or a put after a crash) from
        # colliding on a name, without first listing the directory.
        tmp = os.path.join(self._tmp, f"{os.path.basename(path)}.{secrets.token_hex(8)}")
        handle = self._fs.open(tmp, "create_new")
        try:
            handle.write(data)
            handle.sync()
        finally:
            handle.close()
        # Only a synced file is renamed in: a failed sync leaves debris, never
        # a blob whose bytes the kernel may have dropped.
        self._fs.rename(tmp, path)
        self._fs.sync_dir(os.path.dirname(path))

    def _check_content(self, path: str) -> str | None:
        expected = bytes.fromhex(os.path.basename(path))
        try:
            actual = sha256_file(self._fs, path)
        except OSError as e:
            return f"unreadable: {e}"
        if actual != expected:
            return f"content hashes to {actual.hex()}, not to its name"
        return None

    def _walk_objects(self) -> Iterator[tuple[str, str | None]]:
        """(path, None) for each well-placed blob file, (path, why) for strays."""
        fs = self._fs
        if not fs.is_dir(self._objects):
            return
        for fan in sorted(fs.listdir(self._objects)):
            fan_path = os.path.join(self._objects, fan)
            if not fs.is_dir(fan_path):
                yield fan_path, "a file where only fan-out directories belong"
                continue
            if not _is_hex(fan, 2):
                yield fan_path, "fan-out directory name is not 2 lowercase hex digits"
                continue
            for name in sorted(fs.listdir(fan_path)):
                path = os.path.join(fan_path, name)
                if fs.is_dir(path):
                    yield path, "a directory where only blob files belong"
                elif not _is_hex(name, 2 * _DIGEST_BYTES):
                    yield path, "name is not a 64-digit lowercase hex SHA-256"
                elif not name.startswith(fan):
                    yield path, f"blob in fan-out directory {fan!r}, belongs in {name[:2]!r}"
                else:
                    yield path, None

    def _tmp_entries(self) -> list[str]:
        if not self._fs.is_dir(self._tmp):
            return []
        return [os.path.join(self._tmp, n) for n in sorted(self._fs.listdir(self._tmp))]
