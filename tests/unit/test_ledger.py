"""The ledger on the real filesystem: append, read, seal, prove, reopen, refuse."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from naga_core.errors import InvalidRecord, LedgerCorrupt, LedgerLocked, NotFound
from naga_core.ledger import (
    BlobStore,
    Checkpoint,
    Entry,
    GroupCommitter,
    Ledger,
    OsFileSystem,
    verify_consistency,
    verify_inclusion,
)
from tests.ledger_helpers import (
    SMALL_SEGMENT,
    fill,
    fixed_signer,
    make_ledger,
    payload,
    segment_files,
)


def open_small(directory: str, **kw: object) -> Ledger:
    return Ledger.open(directory, fixed_signer(), segment_max_bytes=SMALL_SEGMENT, **kw)  # type: ignore[arg-type]


def test_append_read_and_reopen_round_trip(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    with open_small(d) as ledger:
        r0 = ledger.append("a.b", b"first")
        r1 = ledger.append("a.c", b"second", [bytes(32)])
        assert (r0.seq, r1.seq) == (0, 1)
        before = [ledger.read(0), ledger.read(1)]
        head = ledger.head()
    with open_small(d) as again:
        assert again.head() == head
        assert [again.read(0), again.read(1)] == before
        assert before[1].prev_hash == before[0].leaf_hash
        assert before[1].blob_refs == (bytes(32),)
        assert before[1].timestamp_ns >= before[0].timestamp_ns


def test_timestamps_never_go_backwards_even_if_the_clock_does(tmp_path: Path) -> None:
    times = iter([50, 10, 40, 60])
    with Ledger.open(str(tmp_path / "l"), fixed_signer(), clock=lambda: next(times)) as ledger:
        for _ in range(4):
            ledger.append("t.t", b"")
        assert [r.timestamp_ns for r in ledger.iter_records()] == [50, 50, 50, 60]


def test_segments_seal_and_proofs_verify_offline(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 600)
    with open_small(d) as ledger:
        head = ledger.head()
        assert head.size == 600
        assert head.sealed_segments >= 5
        verifier = ledger.signer.verifier()
        for seq in (0, 1, 299, 599):
            p = ledger.prove_inclusion(seq)
            cp = verifier.verify(p.checkpoint)
            assert cp == Checkpoint(ledger.signer.key_name, 600, head.root)
            verify_inclusion(p.leaf_hash, seq, p.tree_size, p.path, cp.root)
        for seal in ledger.seals():
            assert verifier.verify(seal.checkpoint).size == seal.tree_size
        verify_consistency(
            123, 600, ledger.root_at(123), head.root, ledger.prove_consistency(123, 600)
        )
        assert [r.payload for r in ledger.iter_records(0)] == [payload(i) for i in range(600)]


def test_every_segment_respects_the_size_bound(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 700)
    for path in segment_files(d):
        assert os.path.getsize(path) <= SMALL_SEGMENT


def test_bad_entries_are_refused_with_a_reason() -> None:
    with pytest.raises(InvalidRecord, match="ASCII"):
        Entry.of("kïnd", b"")
    with pytest.raises(InvalidRecord, match=r"1\.\.64"):
        Entry.of("", b"")
    with pytest.raises(InvalidRecord, match="spaces"):
        Entry.of("a b", b"")
    with pytest.raises(InvalidRecord, match="32-byte"):
        Entry.of("a.b", b"", [b"short"])
    with pytest.raises(InvalidRecord, match="blob store"):
        Entry.of("a.b", bytes(1 << 20))


def test_second_writer_is_locked_out(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    with open_small(d), pytest.raises(LedgerLocked, match="pid"):
        open_small(d)


def test_reading_beyond_the_end_is_not_found(tmp_path: Path) -> None:
    with open_small(str(tmp_path / "l")) as ledger:
        fill(ledger, 3)
        with pytest.raises(NotFound, match="has 3 records"):
            ledger.read(3)
        with pytest.raises(NotFound):
            ledger.prove_inclusion(5)


# --- recovery -----------------------------------------------------------------


def test_torn_tail_is_cut_and_reported(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 30)
    active = segment_files(d)[-1]
    with open(active, "rb") as f:
        data = f.read()
    with open(active, "ab") as f:  # a half-written record: header and part of a body
        f.write(data[:40])
    size_before = os.path.getsize(active)
    with open_small(d) as ledger:
        assert ledger.size == 30
        (cut,) = ledger.report.cut
        assert (cut.path, cut.offset, cut.bytes_cut) == (active, size_before - 40, 40)
        fill(ledger, 5)  # and it keeps going after the cut
    with open_small(d) as ledger:
        assert ledger.size == 35
        assert not ledger.report.cut


def test_damage_inside_the_last_write_reads_as_a_torn_tail(tmp_path: Path) -> None:
    # The documented limit (docs/design/ledger.md): records of one unsynced
    # write may persist in any order, so damage confined to the newest write
    # cannot be told from a torn write. It is cut, never acknowledged data
    # from an earlier write.
    d = str(tmp_path / "l")
    with open_small(d) as ledger:
        fill(ledger, 1)
        fill(ledger, 10)
    active = segment_files(d)[-1]
    offsets = _offsets(active)
    with open(active, "r+b") as f:
        f.seek(offsets[3] + 30)
        f.write(b"\xff")
    with open_small(d) as ledger:
        assert ledger.size == 3
        assert ledger.report.cut[0].offset == offsets[3]


def test_zero_filled_tail_is_a_torn_tail(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 10)
    active = segment_files(d)[-1]
    with open(active, "ab") as f:
        f.write(bytes(4096))
    with open_small(d) as ledger:
        assert ledger.size == 10
        assert ledger.report.cut[0].reason.startswith("bad magic")


def _offsets(path: str) -> list[int]:
    from naga_core.ledger._record import Frame, iter_frames

    with open(path, "rb") as f:
        view = memoryview(f.read())
    return [fr.offset for fr in iter_frames(view) if isinstance(fr, Frame)]


def test_bad_record_followed_by_good_ones_refuses_and_names_the_place(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    with open_small(d) as ledger:
        for _ in range(20):  # one commit each: the damage is followed by later writes
            fill(ledger, 1)
    active = segment_files(d)[-1]
    offsets = _offsets(active)
    target = offsets[1] + 30
    with open(active, "r+b") as f:
        f.seek(target)
        byte = f.read(1)
        f.seek(target)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(LedgerCorrupt) as exc:
        open_small(d)
    assert exc.value.path == active
    assert exc.value.offset == offsets[1]
    assert "checksum mismatch" in exc.value.reason
    assert "not a torn tail" in exc.value.reason


def test_sealed_segment_tampering_refuses_to_open(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 300)
    first = segment_files(d)[0]
    with open(first, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x80]))
    with pytest.raises(LedgerCorrupt, match="does not match its seal") as exc:
        open_small(d)
    assert exc.value.path == first


class _CountingBytes(OsFileSystem):
    def __init__(self) -> None:
        self.bytes_read = 0

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        data = super().read(path, offset, length)
        self.bytes_read += len(data)
        return data


def test_a_start_open_hashes_no_sealed_segment_and_still_catches_a_flipped_byte(
    tmp_path: Path,
) -> None:
    """The core's start opens with ``check_contents=False`` (ADR 0057): no
    sealed segment or index is read whole, yet a byte flipped in a sealed
    segment is refused by every read of its record and named by
    ``check_sealed`` (the core's background rehash); an open that hashes
    (every other open) refuses it as before."""
    d = str(tmp_path / "l")
    make_ledger(d, 300)
    sealed = segment_files(d)[:-1]
    assert len(sealed) >= 3
    fs = _CountingBytes()
    with Ledger.open(d, fixed_signer(), fs=fs, segment_max_bytes=SMALL_SEGMENT) as ledger:
        opened = fs.bytes_read
        assert ledger.check_sealed() == []
    whole = sum(os.path.getsize(p) for p in sealed)
    fs = _CountingBytes()
    with Ledger.open(
        d, fixed_signer(), fs=fs, segment_max_bytes=SMALL_SEGMENT, check_contents=False
    ) as ledger:
        assert fs.bytes_read < opened - whole, (fs.bytes_read, opened, whole)
    first = sealed[0]
    with open(first, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x80]))
    with open_small(d, check_contents=False) as ledger:
        found = ledger.check_sealed()
        assert [(e.path, e.reason) for e in found] == [
            (first, "sealed segment content does not match its seal")
        ]
        with pytest.raises(LedgerCorrupt, match=r"changed since it was written|unreadable") as exc:
            list(ledger.iter_records(0, ledger.seals()[0].tree_size))
        assert exc.value.path == first
    with pytest.raises(LedgerCorrupt, match="does not match its seal"):
        open_small(d)


def test_missing_segment_refuses_to_open(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 300)
    second = segment_files(d)[1]
    for suffix in (".log", ".idx", ".seal"):
        os.remove(second[: -len(".log")] + suffix)
    with pytest.raises(LedgerCorrupt, match="missing or out of order"):
        open_small(d)


def test_stray_file_in_segments_refuses_to_open(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 5)
    stray = os.path.join(d, "segments", "notes.txt")
    Path(stray).write_text("hello")
    with pytest.raises(LedgerCorrupt, match="unexpected file") as exc:
        open_small(d)
    assert exc.value.path == stray


def test_missing_referenced_blob_refuses_to_open(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    blobs = BlobStore(OsFileSystem(), str(tmp_path / "blobs"))
    digest = blobs.put(b"an image")
    with Ledger.open(d, fixed_signer(), blobs=blobs) as ledger:
        ledger.append("media.image", b"", [digest])
    os.remove(blobs.path_of(digest))
    with pytest.raises(LedgerCorrupt, match="referenced blob is missing"):
        Ledger.open(d, fixed_signer(), blobs=blobs)


def test_leftover_temp_files_are_removed_and_reported(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    make_ledger(d, 5)
    debris = os.path.join(d, "segments", "00000000000000000000.seal.tmp")
    Path(debris).write_bytes(b"half a seal")
    with open_small(d) as ledger:
        assert ledger.report.removed == (debris,)
    assert not os.path.exists(debris)


# --- group commit ------------------------------------------------------------------


def test_group_commit_shares_syncs_and_acknowledges_in_order(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    ledger = Ledger.open(d, fixed_signer())
    acked: list[int] = []

    async def main() -> None:
        gc = GroupCommitter(ledger)
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)

            async def appender(i: int) -> None:
                for j in range(20):
                    r = await gc.append(Entry.of("gc.test", f"{i}:{j}".encode()))
                    assert ledger.size > r.seq  # durable when acknowledged
                    acked.append(r.seq)

            async with trio.open_nursery() as inner:
                for i in range(16):
                    inner.start_soon(appender, i)
            assert gc.commits < len(acked)  # syncs were shared
            nursery.cancel_scope.cancel()

    trio.run(main)
    ledger.close()
    assert sorted(acked) == list(range(320))
    with Ledger.open(d, fixed_signer()) as again:
        assert again.size == 320


def test_a_failed_group_commit_fails_every_waiter_and_the_committer() -> None:
    from naga_core.errors import LedgerFailed
    from naga_core.ledger import SimulatedFileSystem

    fs = SimulatedFileSystem(seed=1)
    fs.mkdir("/home")
    ledger = Ledger.open("/home/ledger", fixed_signer(), fs=fs)
    ledger.append("before.fault", b"kept")
    fs.fail("sync", "*.log", times=None)
    outcomes: list[str] = []

    async def appender(gc: GroupCommitter) -> None:
        try:
            await gc.append(Entry.of("gc.doomed", b"x"))
            outcomes.append("acknowledged")
        except LedgerFailed:
            outcomes.append("failed")

    async def main() -> None:
        gc = GroupCommitter(ledger)
        with pytest.RaisesGroup(LedgerFailed):  # the committer ends with the failure
            async with trio.open_nursery() as nursery:
                await nursery.start(gc.run)
                for _ in range(5):
                    nursery.start_soon(appender, gc)
        with pytest.raises(LedgerFailed):  # and nothing more is accepted
            await gc.append(Entry.of("gc.after", b""))

    trio.run(main)
    assert outcomes == ["failed"] * 5
    assert ledger.read(0).payload == b"kept"
    ledger.close()


def test_bytes_past_a_seal_are_reported_by_verify_and_cut_by_open(tmp_path: Path) -> None:
    # What a same-boot reopen after a failed sync and a failed cut-back can
    # leave on disk (found by tests/property/test_power_loss.py, seed
    # 4104711508): the sealed prefix is intact, the tail was never in the tree.
    from naga_core.ledger import verify_ledger

    d = str(tmp_path / "l")
    make_ledger(d, 300)
    first = segment_files(d)[0]
    sealed_size = os.path.getsize(first)
    with open(first, "ab") as f:
        f.write(b"\x00" * 97)
    report = verify_ledger(OsFileSystem(), d, fixed_signer().verifier())
    assert not report.ok
    assert any("past the end its seal covers" in p.what for p in report.problems)
    with open_small(d) as ledger:
        (cut,) = ledger.report.cut
        assert (cut.path, cut.offset, cut.bytes_cut) == (first, sealed_size, 97)
        assert ledger.size == 300
    assert verify_ledger(OsFileSystem(), d, fixed_signer().verifier()).ok


def test_sealed_leaves_are_read_back_from_their_checked_indexes(tmp_path: Path) -> None:
    """A sealed segment's leaf hashes and offsets are not held in memory
    (docs/adr/0036): reads, proofs and the head still see every record, the
    same before and after a reopen, and an index changed after the open is
    refused on read-back, never trusted."""
    d = str(tmp_path / "l")
    with open_small(d) as ledger:
        receipts = ledger.append_many([Entry.of("t.x", bytes([i]) * 300) for i in range(60)])
        assert len(ledger.seals()) >= 3
        assert [ledger.leaf_hash(r.seq) for r in receipts] == [r.leaf_hash for r in receipts]
        assert [r.payload for r in ledger.iter_records()] == [bytes([i]) * 300 for i in range(60)]
        first = ledger.seals()[0].tree_size
        proof = ledger.prove_inclusion(1, first)
        again = ledger.prove_consistency(first, ledger.size)
        root = ledger.root_at(first)
    with open_small(d) as ledger:
        assert [ledger.leaf_hash(r.seq) for r in receipts] == [r.leaf_hash for r in receipts]
        assert ledger.prove_inclusion(1, first) == proof
        assert ledger.prove_consistency(first, ledger.size) == again
        assert ledger.root_at(first) == root
    with open_small(d) as ledger:  # nothing read back yet
        idx = Path(d, "segments", ledger.seals()[1].segment.replace(".log", ".idx"))
        raw = bytearray(idx.read_bytes())
        raw[-1] ^= 0x01
        idx.write_bytes(bytes(raw))
        with pytest.raises(LedgerCorrupt, match="index does not match its seal"):
            ledger.read(ledger.seals()[1].first_seq)


class _CountingReads(OsFileSystem):
    def __init__(self) -> None:
        self.reads = 0

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        self.reads += 1
        return super().read(path, offset, length)


def test_the_latest_records_are_read_from_memory_and_match_the_disk(tmp_path: Path) -> None:
    """A stream following the head reads each new record: the last ones
    committed come from memory (no open of the segment), the same records
    a reopen reads from disk; older and large ones are read from disk."""
    d = str(tmp_path / "l")
    fs = _CountingReads()
    sizes = [10, 20_000, 300] * 70  # past the records kept, some larger than kept
    with Ledger.open(d, fixed_signer(), fs=fs) as ledger:
        for i, n in enumerate(sizes):
            ledger.stage(Entry.of("t.r", bytes([i % 256]) * n))
            if i % 3 == 2:
                ledger.commit()
        fs.reads = 0
        last = ledger.read(len(sizes) - 1)
        assert fs.reads == 0, "the latest record was read from the segment"
        large = ledger.read(len(sizes) - 2)
        assert fs.reads > 0, "a record larger than those kept came from memory"
        fs.reads = 0
        live = [ledger.read(seq) for seq in range(len(sizes))]
        assert fs.reads > 0, "every record was kept in memory"
    with open_small(d) as again:
        assert [again.read(seq) for seq in range(len(sizes))] == live
    assert live[-1] == last
    assert live[-2] == large
    assert [len(r.payload) for r in live] == sizes
