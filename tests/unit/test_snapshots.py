"""Snapshots: format, fallback to an older snapshot, pruning, naming."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.errors import LedgerError
from naga_core.ledger import _snapshots
from naga_core.ledger._fs import OsFileSystem
from naga_core.ledger._snapshots import Snapshot, SnapshotStore


def _leaf(seq: int) -> bytes:
    return hashlib.sha256(b"leaf %d" % seq).digest()


def _any(_seq: int, _leaf_hash: bytes) -> bool:
    return True


def _ledger_check(seq: int, leaf_hash: bytes) -> bool:
    """What the ledger passes: record ``seq`` exists with this leaf hash."""
    return leaf_hash == _leaf(seq)


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "ledger" / "snapshots")


@pytest.fixture
def store(root: str) -> SnapshotStore:
    return SnapshotStore(OsFileSystem(), root)


def test_round_trip(store: SnapshotStore, root: str) -> None:
    store.save("kernel", 42, _leaf(42), b"state bytes")
    path = f"{root}/kernel-{42:020d}.snap"
    assert Path(path).is_file()
    assert store.list("kernel") == [(42, path)]
    snap = store.latest("kernel", _ledger_check)
    assert snap == Snapshot(seq=42, leaf_hash=_leaf(42), state=b"state bytes", name="kernel")
    assert store.skipped == []


def test_latest_of_nothing(store: SnapshotStore) -> None:
    assert store.list("kernel") == []
    assert store.latest("kernel", _any) is None
    assert store.skipped == []


def test_latest_picks_newest_by_seq_not_save_order(store: SnapshotStore) -> None:
    for seq in (5, 100, 7):
        store.save("kernel", seq, _leaf(seq), b"at %d" % seq)
    snap = store.latest("kernel", _ledger_check)
    assert snap is not None
    assert (snap.seq, snap.state) == (100, b"at 100")


def test_same_seq_replaces(store: SnapshotStore) -> None:
    store.save("kernel", 3, _leaf(3), b"first")
    store.save("kernel", 3, _leaf(3), b"second")
    assert len(store.list("kernel")) == 1
    snap = store.latest("kernel", _any)
    assert snap is not None
    assert snap.state == b"second"


def test_pruning_keeps_newest_n(root: str) -> None:
    store = SnapshotStore(OsFileSystem(), root, keep=2)
    for seq in range(1, 6):
        store.save("kernel", seq * 10, _leaf(seq * 10), b"s")
        store.save("other", seq, _leaf(seq), b"o")
    assert [seq for seq, _ in store.list("kernel")] == [40, 50]
    assert [seq for seq, _ in store.list("other")] == [4, 5]
    assert sorted(p.name for p in Path(root).iterdir()) == [
        f"kernel-{40:020d}.snap",
        f"kernel-{50:020d}.snap",
        f"other-{4:020d}.snap",
        f"other-{5:020d}.snap",
    ]


def test_default_keep_is_the_constant(store: SnapshotStore) -> None:
    for seq in range(_snapshots.SNAPSHOTS_KEPT + 4):
        store.save("kernel", seq, _leaf(seq), b"")
    assert len(store.list("kernel")) == _snapshots.SNAPSHOTS_KEPT


def test_save_removes_debris_of_an_interrupted_save(store: SnapshotStore, root: str) -> None:
    store.save("kernel", 1, _leaf(1), b"a")
    debris = Path(root) / f"kernel-{9:020d}.snap.tmp"
    debris.write_bytes(b"half a snapsh")
    assert [seq for seq, _ in store.list("kernel")] == [1]
    store.save("kernel", 2, _leaf(2), b"b")
    assert not debris.exists()


def test_corrupt_newest_falls_back_to_older(store: SnapshotStore) -> None:
    store.save("kernel", 10, _leaf(10), b"older state")
    store.save("kernel", 20, _leaf(20), b"newer state")
    newest = store.list("kernel")[-1][1]
    raw = bytearray(Path(newest).read_bytes())
    raw[-40] ^= 0xFF  # inside the state
    Path(newest).write_bytes(bytes(raw))

    snap = store.latest("kernel", _ledger_check)
    assert snap is not None
    assert (snap.seq, snap.state) == (10, b"older state")
    assert len(store.skipped) == 1
    assert store.skipped[0][0] == newest
    assert "checksum mismatch" in store.skipped[0][1]


def test_not_matching_the_ledger_is_skipped(store: SnapshotStore) -> None:
    store.save("kernel", 10, _leaf(10), b"good")
    store.save("kernel", 20, b"\x07" * 32, b"from another history")
    snap = store.latest("kernel", _ledger_check)
    assert snap is not None
    assert snap.seq == 10
    [(path, reason)] = store.skipped
    assert path.endswith(f"kernel-{20:020d}.snap")
    assert "does not match the ledger" in reason
    assert ("07" * 32) in reason


def test_all_rejected_gives_none_and_reports_each(store: SnapshotStore) -> None:
    store.save("kernel", 1, _leaf(1), b"a")
    store.save("kernel", 2, _leaf(2), b"b")
    assert store.latest("kernel", lambda _s, _h: False) is None
    assert [p for p, _ in store.skipped] == [p for _, p in reversed(store.list("kernel"))]


def test_is_valid_sees_seq_and_leaf_hash(store: SnapshotStore) -> None:
    store.save("kernel", 9, _leaf(9), b"x")
    seen: list[tuple[int, bytes]] = []

    def check(seq: int, leaf_hash: bytes) -> bool:
        seen.append((seq, leaf_hash))
        return True

    assert store.latest("kernel", check) is not None
    assert seen == [(9, _leaf(9))]


def _damage(store: SnapshotStore, root: str, mutate: bytes | None = None, cut: int = 0) -> str:
    """Save seq 1 and 2, replace seq 2's file, return the reason it was skipped."""
    store.save("kernel", 1, _leaf(1), b"fallback")
    store.save("kernel", 2, _leaf(2), b"the newest state")
    path = Path(root) / f"kernel-{2:020d}.snap"
    raw = path.read_bytes()
    path.write_bytes(mutate if mutate is not None else raw[: len(raw) - cut])
    snap = store.latest("kernel", _ledger_check)
    assert snap is not None
    assert snap.seq == 1
    [(skipped_path, reason)] = store.skipped
    assert skipped_path == str(path)
    return reason


@pytest.mark.parametrize("cut", [1, 32, 33, 60])
def test_truncated_file(store: SnapshotStore, root: str, cut: int) -> None:
    assert "truncated" in _damage(store, root, cut=cut)


def test_empty_file(store: SnapshotStore, root: str) -> None:
    assert "truncated" in _damage(store, root, mutate=b"")


def test_trailing_garbage(store: SnapshotStore, root: str) -> None:
    raw = _snapshots._encode("kernel", 2, _leaf(2), b"s")  # pyright: ignore[reportPrivateUsage]
    assert "7 bytes of trailing garbage" in _damage(store, root, mutate=raw + b"garbage")


def test_bad_magic(store: SnapshotStore, root: str) -> None:
    raw = _snapshots._encode("kernel", 2, _leaf(2), b"s")  # pyright: ignore[reportPrivateUsage]
    assert "bad magic" in _damage(store, root, mutate=b"NGSNAP2\n" + raw[8:])


def test_zero_filled_file(store: SnapshotStore, root: str) -> None:
    assert "bad magic" in _damage(store, root, mutate=bytes(200))


def test_header_disagrees_with_file_name(store: SnapshotStore, root: str) -> None:
    # A whole, checksummed snapshot of seq 7 copied under seq 2's name.
    raw = _snapshots._encode("kernel", 7, _leaf(7), b"s")  # pyright: ignore[reportPrivateUsage]
    assert "file name disagrees" in _damage(store, root, mutate=raw)


def test_unreadable_file_is_skipped(store: SnapshotStore, root: str) -> None:
    store.save("kernel", 1, _leaf(1), b"fallback")
    (Path(root) / f"kernel-{2:020d}.snap").mkdir()
    snap = store.latest("kernel", _any)
    assert snap is not None
    assert snap.seq == 1
    assert store.skipped[0][1].startswith("unreadable")


def test_skipped_accumulates_across_names(store: SnapshotStore, root: str) -> None:
    for name in ("kernel", "projection"):
        store.save(name, 1, _leaf(1), b"")
        Path(root, f"{name}-{5:020d}.snap").write_bytes(b"junk")
        assert store.latest(name, _ledger_check) is not None
    assert [Path(p).name.split("-")[0] for p, _ in store.skipped] == ["kernel", "projection"]


def test_series_with_dashes_do_not_mix(store: SnapshotStore) -> None:
    store.save("a", 1, _leaf(1), b"a")
    store.save("a-b", 2, _leaf(2), b"a-b")
    store.save("a-b-c", 3, _leaf(3), b"a-b-c")
    assert [s for s, _ in store.list("a")] == [1]
    assert [s for s, _ in store.list("a-b")] == [2]
    snap = store.latest("a-b", _ledger_check)
    assert snap is not None
    assert (snap.name, snap.state) == ("a-b", b"a-b")


def test_unrelated_files_are_ignored(store: SnapshotStore, root: str) -> None:
    store.save("kernel", 1, _leaf(1), b"")
    for junk in ("kernel-1.snap", "kernel-0000000000000000000x.snap", "kernel.snap", "README"):
        Path(root, junk).write_bytes(b"junk")
    assert [s for s, _ in store.list("kernel")] == [1]


@pytest.mark.parametrize("name", ["", "Kernel", "a/b", "a b", "x" * 41, "é", "kern\n", "snap\x00"])
def test_name_validation(store: SnapshotStore, name: str) -> None:
    with pytest.raises(ValueError, match="snapshot name"):
        store.save(name, 1, _leaf(1), b"")
    with pytest.raises(ValueError, match="snapshot name"):
        store.list(name)
    with pytest.raises(ValueError, match="snapshot name"):
        store.latest(name, _any)


@pytest.mark.parametrize("name", ["k", "x" * 40, "kernel.v2", "a_b-c.9", ".."])
def test_valid_names(store: SnapshotStore, name: str) -> None:
    store.save(name, 1, _leaf(1), b"n")
    snap = store.latest(name, _any)
    assert snap is not None
    assert snap.name == name


def test_argument_checks(root: str) -> None:
    store = SnapshotStore(OsFileSystem(), root)
    with pytest.raises(ValueError, match="64-bit"):
        store.save("kernel", -1, _leaf(1), b"")
    with pytest.raises(ValueError, match="64-bit"):
        store.save("kernel", 1 << 64, _leaf(1), b"")
    with pytest.raises(ValueError, match="32 bytes"):
        store.save("kernel", 1, b"short", b"")
    with pytest.raises(ValueError, match="keep"):
        SnapshotStore(OsFileSystem(), root, keep=0)
    with pytest.raises(ValueError, match="absolute"):
        SnapshotStore(OsFileSystem(), "relative/snapshots")


def test_largest_seq(store: SnapshotStore) -> None:
    top = (1 << 64) - 1
    store.save("kernel", top, _leaf(top), b"end")
    snap = store.latest("kernel", _ledger_check)
    assert snap is not None
    assert snap.seq == top


def test_save_failure_is_a_ledger_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    store = SnapshotStore(OsFileSystem(), str(blocker / "snapshots"))
    with pytest.raises(LedgerError, match="cannot save snapshot"):
        store.save("kernel", 1, _leaf(1), b"")


# --- the format, without I/O --------------------------------------------------

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=40)
_seqs = st.integers(min_value=0, max_value=(1 << 64) - 1)
_hashes = st.binary(min_size=32, max_size=32)


@settings(max_examples=200, derandomize=True, database=None)
@given(name=_names, seq=_seqs, leaf_hash=_hashes, state=st.binary(max_size=512))
def test_format_round_trip(name: str, seq: int, leaf_hash: bytes, state: bytes) -> None:
    raw = _snapshots._encode(name, seq, leaf_hash, state)  # pyright: ignore[reportPrivateUsage]
    assert raw.startswith(b"NGSNAP1\n")
    decoded = _snapshots._decode(raw)  # pyright: ignore[reportPrivateUsage]
    assert decoded == Snapshot(seq, leaf_hash, state, name)


@settings(max_examples=300, derandomize=True, database=None)
@given(state=st.binary(max_size=64), data=st.data())
def test_every_single_byte_change_or_cut_is_caught(state: bytes, data: st.DataObject) -> None:
    raw = _snapshots._encode("kernel", 3, _leaf(3), state)  # pyright: ignore[reportPrivateUsage]
    where = data.draw(st.integers(0, len(raw) - 1))
    flip = data.draw(st.integers(1, 255))
    damaged = [
        raw[:where] + bytes((raw[where] ^ flip,)) + raw[where + 1 :],
        raw[:where],
        raw + raw[where:],
    ]
    for bad in damaged:
        with pytest.raises(_snapshots._Damaged):  # pyright: ignore[reportPrivateUsage]
            _snapshots._decode(bad)  # pyright: ignore[reportPrivateUsage]
