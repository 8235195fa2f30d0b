"""The content-addressed blob store, on the real filesystem."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga_core.errors import BlobCorrupt, BlobError, NotFound
from naga_core.ledger import _blobs
from naga_core.ledger._blobs import BlobProblem, BlobStore
from naga_core.ledger._fs import FileHandle, OpenMode, OsFileSystem


class _SpyFs(OsFileSystem):
    """The real filesystem, logging each mutating call; optionally failing syncs."""

    def __init__(self, *, fail_sync: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_sync = fail_sync

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        self.calls.append(f"open {mode} {path}")
        handle = super().open(path, mode)
        return _FailingSyncHandle(handle) if self.fail_sync else handle

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(f"rename {src} {dst}")
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self.calls.append(f"remove {path}")
        super().remove(path)

    def mkdir(self, path: str) -> None:
        self.calls.append(f"mkdir {path}")
        super().mkdir(path)

    def sync_dir(self, path: str) -> None:
        self.calls.append(f"sync_dir {path}")
        super().sync_dir(path)


class _FailingSyncHandle:
    def __init__(self, inner: FileHandle) -> None:
        self._inner = inner

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def sync(self) -> None:
        raise OSError(errno.EIO, "injected fdatasync failure")

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(OsFileSystem(), str(tmp_path / "blobs"))


def _flip(path: str, offset: int = 0) -> None:
    raw = bytearray(Path(path).read_bytes())
    raw[offset] ^= 0x01
    Path(path).write_bytes(bytes(raw))


@settings(
    max_examples=60,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.binary(max_size=4096))
def test_round_trip(store: BlobStore, data: bytes) -> None:
    digest = store.put(data)
    assert digest == hashlib.sha256(data).digest()
    assert store.exists(digest)
    assert store.get(digest) == data
    assert store.path_of(digest).endswith(f"/sha256/{digest.hex()[:2]}/{digest.hex()}")


def test_layout_and_empty_blob(store: BlobStore) -> None:
    digest = store.put(b"")
    assert store.path_of(digest) == os.path.join(
        store.root, "sha256", digest.hex()[:2], digest.hex()
    )
    assert Path(store.path_of(digest)).read_bytes() == b""
    assert store.get(digest) == b""
    assert os.listdir(os.path.join(store.root, "tmp")) == []


def test_put_is_idempotent_and_writes_nothing_the_second_time(tmp_path: Path) -> None:
    fs = _SpyFs()
    store = BlobStore(fs, str(tmp_path / "blobs"))
    digest = store.put(b"hello")
    assert any(c.startswith("rename ") for c in fs.calls)
    fs.calls.clear()
    assert store.put(b"hello") == digest
    # no file written, renamed or made; only the directory entry made durable
    assert fs.calls == [f"sync_dir {os.path.dirname(store.path_of(digest))}"]
    assert store.get(digest) == b"hello"


def test_get_verifies_content(store: BlobStore) -> None:
    digest = store.put(b"some payload")
    path = store.path_of(digest)
    _flip(path, 3)
    with pytest.raises(BlobCorrupt) as info:
        store.get(digest)
    assert info.value.path == path
    assert "hashes to" in info.value.reason
    assert path in str(info.value)


def test_get_missing_is_not_found(store: BlobStore) -> None:
    with pytest.raises(NotFound):
        store.get(bytes(32))
    store.put(b"x")  # the directories exist now; still not found
    with pytest.raises(NotFound):
        store.get(hashlib.sha256(b"y").digest())
    assert not store.exists(hashlib.sha256(b"y").digest())


def test_put_replaces_a_corrupt_copy(tmp_path: Path) -> None:
    fs = _SpyFs()
    store = BlobStore(fs, str(tmp_path / "blobs"))
    digest = store.put(b"original bytes")
    path = store.path_of(digest)
    Path(path).write_bytes(b"rotten")
    fs.calls.clear()
    assert store.put(b"original bytes") == digest
    assert any(c.startswith("rename ") and c.endswith(path) for c in fs.calls)
    assert store.get(digest) == b"original bytes"
    assert store.verify_all() == []


def test_verify_all_detects_replaced_blob(store: BlobStore) -> None:
    good = store.put(b"good")
    bad = store.put(b"will be replaced")
    Path(store.path_of(bad)).write_bytes(b"something else entirely")
    problems = store.verify_all()
    assert [(p.path, p.kind) for p in problems] == [(store.path_of(bad), "corrupt")]
    assert "hashes to" in problems[0].reason
    assert store.get(good) == b"good"
    # read-only: the bad file is still there, unchanged
    assert Path(store.path_of(bad)).read_bytes() == b"something else entirely"


def test_verify_all_reports_strays_and_tmp_leftovers(store: BlobStore) -> None:
    digest = store.put(b"real")
    hx = digest.hex()
    objects = Path(store.root) / "sha256"
    fan = objects / hx[:2]
    other_fan = "00" if hx[:2] != "00" else "01"
    strays = {
        fan / "notes.txt": "64-digit",
        fan / hx.upper(): "64-digit",
        objects / other_fan / hx: "belongs in",
        objects / "README": "fan-out directories",
        Path(store.root) / "index.db": "not part",
        Path(store.root) / "tmp" / f"{hx}.deadbeef": "interrupted put",
    }
    (objects / other_fan).mkdir()
    for path in strays:
        path.write_bytes(b"real" if path.name == hx else b"junk")
    for directory, reason in ((objects / "zz", "2 lowercase hex"), (fan / "sub", "a directory")):
        directory.mkdir()
        strays[directory] = reason

    problems = store.verify_all()
    tmp = Path(store.root) / "tmp"
    assert [p.kind for p in problems if Path(p.path).parent == tmp] == ["leftover"]
    assert all(p.kind == "stray" for p in problems if Path(p.path).parent != tmp)
    assert [p.path for p in problems] == sorted(str(p) for p in strays)
    for p in problems:
        assert strays[Path(p.path)] in p.reason
    # nothing was removed
    assert all(path.exists() for path in strays)
    assert store.get(digest) == b"real"


def test_iter_digests_sorted_and_strict(store: BlobStore) -> None:
    digests = [store.put(bytes([i]) * i) for i in range(40)]
    assert list(store.iter_digests()) == sorted(digests)
    stray = Path(store.path_of(digests[0])).parent / "stray"
    stray.write_bytes(b"")
    with pytest.raises(BlobCorrupt) as info:
        list(store.iter_digests())
    assert info.value.path == str(stray)


def test_iter_digests_ignores_tmp(store: BlobStore) -> None:
    assert list(store.iter_digests()) == []
    digest = store.put(b"a")
    (Path(store.root) / "tmp" / "leftover").write_bytes(b"b")
    assert list(store.iter_digests()) == [digest]


def test_failed_sync_leaves_no_blob_only_debris(tmp_path: Path) -> None:
    fs = _SpyFs(fail_sync=True)
    store = BlobStore(fs, str(tmp_path / "blobs"))
    with pytest.raises(BlobError, match="injected"):
        store.put(b"never durable")
    digest = hashlib.sha256(b"never durable").digest()
    assert not store.exists(digest)
    problems = store.verify_all()
    assert [p.kind for p in problems] == ["leftover"]
    assert problems[0].path.startswith(os.path.join(store.root, "tmp") + "/")

    # a failed sync is never retried: this store refuses until reopened
    fs.fail_sync = False
    with pytest.raises(BlobError, match="failed earlier"):
        store.put(b"anything")

    reopened = BlobStore(fs, store.root)
    assert reopened.clean_tmp() == [problems[0].path]
    assert reopened.verify_all() == []
    assert reopened.clean_tmp() == []
    assert reopened.get(reopened.put(b"never durable")) == b"never durable"


def test_clean_tmp_on_empty_store(store: BlobStore) -> None:
    assert store.clean_tmp() == []
    assert store.verify_all() == []


def test_size_limit(store: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_blobs, "MAX_BLOB_BYTES", 16)
    assert store.get(store.put(b"x" * 16)) == b"x" * 16
    with pytest.raises(BlobError, match="exceeds"):
        store.put(b"x" * 17)
    assert not (Path(store.root) / "tmp").exists() or not os.listdir(Path(store.root) / "tmp")


def test_get_refuses_oversized_file_without_loading(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = store.put(b"x" * 20)
    monkeypatch.setattr(_blobs, "MAX_BLOB_BYTES", 16)
    with pytest.raises(BlobCorrupt, match="more than any blob"):
        store.get(digest)


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_bad_digest_length(store: BlobStore, length: int) -> None:
    bad = b"\x01" * length
    for call in (store.get, store.exists, store.path_of):
        with pytest.raises(ValueError, match="32 bytes"):
            call(bad)


def test_hex_string_is_not_a_digest(store: BlobStore) -> None:
    with pytest.raises(TypeError):
        store.get("ab" * 32)  # pyright: ignore[reportArgumentType]


def test_relative_root_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        BlobStore(OsFileSystem(), "blobs")


def test_permissions(store: BlobStore) -> None:
    digest = store.put(b"private")
    path = Path(store.path_of(digest))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (
        Path(store.root),
        Path(store.root) / "sha256",
        path.parent,
        Path(store.root) / "tmp",
    ):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_blob_problem_is_frozen() -> None:
    problem = BlobProblem("/x", "why", "stray")
    with pytest.raises(AttributeError):
        problem.path = "/y"  # pyright: ignore[reportAttributeAccessIssue]


class _RacedFs(OsFileSystem):
    """The real filesystem, where another party creates each directory just
    before this store's own mkdir of it (as a concurrent put in another
    thread does): the mkdir then finds it there."""

    def __init__(self) -> None:
        self.raced: list[str] = []

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o700)
        self.raced.append(path)
        super().mkdir(path)  # FileExistsError, as in the race


def test_a_directory_made_meanwhile_by_another_put_is_not_a_failure(tmp_path: Path) -> None:
    """Two turns storing blobs with the same fan-out prefix at once: the one
    that loses the mkdir race must not mark the whole store failed (which
    failed every later turn of the core)."""
    fs = _RacedFs()
    store = BlobStore(fs, str(tmp_path / "blobs"))
    first = store.put(b"one")
    assert fs.raced, "the race was not staged"
    assert store.get(first) == b"one"
    second = store.put(b"two")  # the store goes on
    assert store.get(second) == b"two"
    assert store.verify_all() == []


def test_a_file_where_a_directory_belongs_still_fails_the_put(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = BlobStore(OsFileSystem(), str(root))
    digest = hashlib.sha256(b"x").hexdigest()
    (root / "sha256").mkdir(parents=True)
    (root / "sha256" / digest[:2]).write_bytes(b"not a directory")
    with pytest.raises(BlobError, match="cannot store blob"):
        store.put(b"x")
