"""A record may name a blob still being stored (BlobStore.put_soon) when the
ledger's commit waits for that blob first (Ledger.commit_after): no record
is ever durable before a blob it references (docs/adr/0043)."""

from __future__ import annotations

import errno
import hashlib
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from naga_core.errors import BlobError, LedgerFailed
from naga_core.ledger import BlobStore, Entry, OsFileSystem
from naga_core.ledger._fs import FileHandle, OpenMode
from tests.unit.test_ledger import open_small


class _Gate(Future[bytes]):
    """A future that says when a commit started waiting for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.waited.set()
        return super().exception(timeout)


def test_commit_waits_for_the_barrier_before_it_writes(tmp_path: Path) -> None:
    ledger = open_small(str(tmp_path / "ledger"))
    try:
        gate = _Gate()
        ledger.commit_after(gate)
        ledger.stage(Entry.of("t.after", b"names a blob"))
        committer = threading.Thread(target=ledger.commit)
        committer.start()
        assert gate.waited.wait(10)
        assert ledger.size == 0
        assert committer.is_alive()
        gate.set_result(b"")
        committer.join(10)
        assert ledger.size == 1
        # Waited for once: a later commit does not wait again.
        ledger.append("t.next", b"no barrier")
        assert ledger.size == 2
    finally:
        ledger.close()


def test_a_failed_barrier_fails_the_ledger_and_writes_nothing(tmp_path: Path) -> None:
    directory = str(tmp_path / "ledger")
    ledger = open_small(directory)
    try:
        ledger.append("t.before", b"durable")
        gate: Future[bytes] = Future()
        ledger.commit_after(gate)
        ledger.stage(Entry.of("t.after", b"names a blob that never got there"))
        gate.set_exception(BlobError("injected: the blob's sync failed"))
        with pytest.raises(LedgerFailed, match="injected"):
            ledger.commit()
        with pytest.raises(LedgerFailed):
            ledger.stage(Entry.of("t.later", b"refused"))
        assert ledger.size == 1
    finally:
        ledger.close()
    reopened = open_small(directory)
    try:
        assert reopened.size == 1
        assert reopened.read(0).kind == "t.before"
    finally:
        reopened.close()


def test_put_soon_gives_the_digest_at_once_and_the_blob_when_done(tmp_path: Path) -> None:
    store = BlobStore(OsFileSystem(), str(tmp_path / "blobs"))
    digest, done = store.put_soon(b"an answer")
    assert digest == hashlib.sha256(b"an answer").digest()
    assert done.result(10) == digest
    assert store.get(digest) == b"an answer"


class _HeldSync(OsFileSystem):
    """The real filesystem whose file syncs wait for ``release`` (or fail)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.fail = False

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        return _Held(super().open(path, mode), self)


class _Held:
    def __init__(self, inner: FileHandle, fs: _HeldSync) -> None:
        self._inner, self._fs = inner, fs

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def sync(self) -> None:
        assert self._fs.release.wait(10)
        if self._fs.fail:
            raise OSError(errno.EIO, "injected fdatasync failure")
        self._inner.sync()

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def close(self) -> None:
        self._inner.close()


def test_a_record_naming_a_blob_is_durable_only_after_the_blob(tmp_path: Path) -> None:
    fs = _HeldSync()
    store = BlobStore(fs, str(tmp_path / "blobs"))
    ledger = open_small(str(tmp_path / "ledger"))
    try:
        digest, done = store.put_soon(b"the model's answer")
        gate = _Gate()
        done.add_done_callback(lambda f: gate.set_result(f.result()))
        ledger.commit_after(gate)
        ledger.stage(Entry.of("turn.model", b"trace", (digest,)))
        committer = threading.Thread(target=ledger.commit)
        committer.start()
        assert gate.waited.wait(10)  # the commit waits, the blob's sync is held
        assert ledger.size == 0
        assert not store.exists(digest)
        fs.release.set()
        committer.join(10)
        assert ledger.size == 1
        assert store.get(digest) == b"the model's answer"
    finally:
        ledger.close()


def test_a_failed_blob_put_never_lets_its_record_commit(tmp_path: Path) -> None:
    fs = _HeldSync()
    fs.fail = True
    fs.release.set()
    store = BlobStore(fs, str(tmp_path / "blobs"))
    directory = str(tmp_path / "ledger")
    ledger = open_small(directory)
    try:
        digest, done = store.put_soon(b"lost")
        ledger.commit_after(done)
        ledger.stage(Entry.of("turn.model", b"trace", (digest,)))
        with pytest.raises(LedgerFailed, match="injected"):
            ledger.commit()
        assert ledger.size == 0
    finally:
        ledger.close()
    # What a restart sees: nothing names the missing blob (the open checks).
    reopened = open_small(directory, blobs=BlobStore(OsFileSystem(), store.root))
    try:
        assert reopened.size == 0
    finally:
        reopened.close()
