"""The SQLite projection: deterministic rebuilds, catch-up, self-healing, queries."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.errors import LedgerError, LedgerFailed, NotFound
from naga_core.ledger._projection import (
    BATCH_RECORDS,
    CatchUp,
    HistoryRow,
    Projection,
    ProjectionError,
    RecordSource,
    verify_projection,
)
from naga_core.ledger._record import GENESIS_PREV, Entry, Record, encode_body, leaf_hash_of

Spec = tuple[str, bytes, tuple[bytes, ...]]


class ListSource:
    """An in-memory ledger: the read side the projection needs, over a list."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = list(records)

    @property
    def size(self) -> int:
        return len(self.records)

    def iter_records(self, from_seq: int = 0) -> Iterator[Record]:
        yield from self.records[from_seq:]

    def leaf_hash(self, seq: int) -> bytes:
        if not 0 <= seq < len(self.records):
            raise NotFound(f"no record {seq}")
        return self.records[seq].leaf_hash


def chain(specs: Sequence[Spec], base: Sequence[Record] = ()) -> list[Record]:
    """Records for ``specs`` appended after ``base``, hash-chained like the ledger's."""
    out = list(base)
    for kind, payload, refs in specs:
        seq = len(out)
        prev = out[-1].leaf_hash if out else GENESIS_PREV
        ts = 1_700_000_000_000_000_000 + seq
        body = encode_body(Entry.of(kind, payload, refs), seq, ts, prev)
        out.append(Record(seq, ts, kind, payload, refs, prev, leaf_hash_of(body), body))
    return out


def digest32(n: int) -> bytes:
    return hashlib.sha256(b"blob %d" % n).digest()


def simple(n: int, start: int = 0) -> list[Spec]:
    kinds = ("chat.in", "chat.out", "effect")
    return [
        (kinds[i % 3], b"payload %d" % i, (digest32(i),) if i % 4 == 0 else ())
        for i in range(start, start + n)
    ]


def source_of(n: int) -> ListSource:
    return ListSource(chain(simple(n)))


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "projection.sqlite3")


_kinds = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=6
)
_specs = st.lists(
    st.tuples(
        _kinds,
        st.binary(max_size=48),
        st.lists(st.sampled_from([digest32(i) for i in range(4)]), max_size=3).map(tuple),
    ),
    max_size=30,
)


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(specs=_specs, cut=st.integers(min_value=0, max_value=30))
def test_rebuilds_and_catch_up_give_identical_dumps(specs: list[Spec], cut: int) -> None:
    source = ListSource(chain(specs))
    with tempfile.TemporaryDirectory() as tmp:
        with (
            Projection.rebuild(f"{tmp}/a", source) as a,
            Projection.rebuild(f"{tmp}/b", source) as b,
        ):
            dump = a.dump()
            assert dump == b.dump()
            assert a.digest() == b.digest() == hashlib.sha256(dump.encode()).digest()
        # Catching up in two steps (some records now, the rest later) lands on
        # the same bytes as a rebuild.
        with Projection.open(f"{tmp}/c") as c:
            assert c.catch_up(ListSource(source.records[:cut])) == CatchUp(
                min(cut, len(specs)), False, None
            )
            assert c.catch_up(source) == CatchUp(len(specs) - min(cut, len(specs)), False, None)
            assert c.dump() == dump
        assert verify_projection(f"{tmp}/c", source) is None


def test_dump_is_the_canonical_sql_text(path: str) -> None:
    with Projection.rebuild(path, source_of(2)) as proj:
        lines = proj.dump().splitlines()
    assert lines[0] == "BEGIN TRANSACTION;"
    assert lines[-1] == "COMMIT;"
    assert sum(line.startswith('INSERT INTO "records"') for line in lines) == 2
    assert "CREATE INDEX records_kind_seq ON records (kind, seq);" in lines


def test_catch_up_after_append_matches_rebuild_across_batches(tmp_path: Path) -> None:
    first = chain(simple(BATCH_RECORDS + 5))
    full = ListSource(chain(simple(BATCH_RECORDS + 20, BATCH_RECORDS + 5), first))
    with Projection.open(str(tmp_path / "live")) as live:
        assert live.catch_up(ListSource(first)) == CatchUp(BATCH_RECORDS + 5, False, None)
        assert live.catch_up(full).applied == BATCH_RECORDS + 20
        assert live.catch_up(full) == CatchUp(0, False, None)
        assert live.head() == (full.size - 1, full.records[-1].leaf_hash)
        with Projection.rebuild(str(tmp_path / "fresh"), full) as fresh:
            assert live.digest() == fresh.digest()


def test_catch_up_rebuilds_when_the_ledger_got_shorter(path: str) -> None:
    source = source_of(10)
    with Projection.rebuild(path, source) as proj:
        shorter = ListSource(source.records[:6])
        result = proj.catch_up(shorter)
        assert result.rebuilt
        assert result.applied == 6
        assert result.reason is not None
        assert "seq 9" in result.reason
        assert "6 records" in result.reason
        assert proj.head() == (5, shorter.records[5].leaf_hash)
    assert verify_projection(path, shorter) is None


def test_catch_up_rebuilds_when_the_record_at_the_head_was_replaced(path: str) -> None:
    source = source_of(10)
    replaced = ListSource(chain([("other", b"x", ())], source.records[:9]))
    longer = ListSource(chain(simple(3, 50), replaced.records))
    with Projection.rebuild(path, source) as proj:
        result = proj.catch_up(longer)
        assert result.rebuilt
        assert result.applied == 13
        assert result.reason is not None
        assert "leaf hash at seq 9" in result.reason
        assert proj.count_by_kind()["other"] == 1
    assert verify_projection(path, longer) is None


def test_catch_up_rebuilds_for_another_ledger_and_for_an_empty_one(path: str) -> None:
    with Projection.rebuild(path, source_of(5)) as proj:
        other = ListSource(chain([("x", b"", ())] * 8))
        assert proj.catch_up(other).rebuilt
        assert proj.count_by_kind() == {"x": 8}
        emptied = proj.catch_up(ListSource([]))
        assert emptied.rebuilt
        assert emptied.applied == 0
        assert proj.head() is None
        assert proj.history() == []


def test_catch_up_on_a_fresh_file_is_not_a_rebuild(path: str) -> None:
    with Projection.open(path) as proj:
        assert proj.head() is None
        assert proj.catch_up(ListSource([])) == CatchUp(0, False, None)
        assert proj.catch_up(source_of(3)) == CatchUp(3, False, None)


def test_edited_projection_is_detected_and_fixed_by_rebuild(path: str) -> None:
    source = source_of(10)
    Projection.rebuild(path, source).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE records SET payload = x'00' WHERE seq = 3")
    conn.close()
    assert verify_projection(path, source) == "differs at row 3 of table records (seq 3)"
    Projection.rebuild(path, source).close()
    assert verify_projection(path, source) is None


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("DELETE FROM blob_refs WHERE seq = 8", "table blob_refs lacks rows from row 2"),
        ("INSERT INTO blob_refs VALUES (9, 0, x'00')", "table blob_refs has rows the ledger lacks"),
        ("UPDATE meta SET value = x'00' WHERE key = 'applied_leaf_hash'", "leaf hash at seq 9"),
        ("UPDATE meta SET value = 2 WHERE key = 'schema_version'", "schema_version 2, expected 1"),
        ("DROP TABLE blob_refs", "missing blob_refs, blob_refs_digest"),
        ("CREATE TRIGGER t AFTER INSERT ON records BEGIN SELECT 1; END", "schema differs"),
        ("DELETE FROM records WHERE seq = 9", "records end at seq 8 but meta says applied_seq 9"),
        ("DELETE FROM meta WHERE key = 'applied_seq'", "but meta says applied_seq None"),
        ("UPDATE meta SET value = 'x' WHERE key = 'applied_seq'", "meta says applied_seq None"),
    ],
)
def test_damage_is_named_by_verify_and_healed_by_catch_up(
    path: str, sql: str, expected: str
) -> None:
    source = source_of(10)
    Projection.rebuild(path, source).close()
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    reason = verify_projection(path, source)
    assert reason is not None
    assert expected in reason
    with Projection.open(path) as proj:
        result = proj.catch_up(source)
        # Row-level edits below the head are verify's to find; catch_up only
        # trusts the head and the schema.
        if sql.startswith(("DELETE FROM blob_refs", "INSERT INTO blob_refs")):
            assert result == CatchUp(0, False, None)
            proj.close()
            Projection.rebuild(path, source).close()
        else:
            assert result.rebuilt
            assert result.reason is not None
            assert expected in result.reason
    assert verify_projection(path, source) is None


def test_garbage_file_is_rebuilt_by_catch_up(path: str) -> None:
    Path(path).write_bytes(b"this is not sqlite " * 300)
    source = source_of(4)
    assert verify_projection(path, source) == "not a SQLite database"
    with Projection.open(path) as proj:
        with pytest.raises(ProjectionError, match="not a SQLite database"):
            proj.history()
        assert proj.catch_up(source) == CatchUp(4, True, "not a SQLite database")
        assert len(proj.history()) == 4
    assert verify_projection(path, source) is None


def test_verify_reports_missing_and_behind_without_touching_the_file(path: str) -> None:
    source = source_of(6)
    assert verify_projection(path, source) == "missing"
    assert not os.path.exists(path)
    with Projection.open(path) as proj:
        proj.catch_up(ListSource(source.records[:4]))
    assert verify_projection(path, ListSource([])) is not None
    before = Path(path).read_bytes()
    mtime = os.stat(path).st_mtime_ns
    assert verify_projection(path, source) == "applied_seq 3 behind ledger size 6"
    assert Path(path).read_bytes() == before
    assert os.stat(path).st_mtime_ns == mtime
    assert sorted(os.listdir(os.path.dirname(path))) == ["projection.sqlite3"]
    Path(path).unlink()
    Projection.open(path).close()
    assert verify_projection(path, source) == "empty behind ledger size 6"


def test_history_newest_first_limit_kinds_and_paging(path: str) -> None:
    source = source_of(12)
    with Projection.rebuild(path, source) as proj:
        rows = proj.history()
        assert [r.seq for r in rows] == list(range(11, -1, -1))
        assert rows[0] == HistoryRow(
            seq=11,
            timestamp_ns=source.records[11].timestamp_ns,
            kind="effect",
            payload_size=len(b"payload 11"),
            blob_refs=(),
            leaf_hash=source.records[11].leaf_hash,
        )
        assert rows[-1].blob_refs == (digest32(0),)
        assert [r.seq for r in proj.history(3)] == [11, 10, 9]
        assert proj.history(0) == []
        assert [r.seq for r in proj.history(kinds=["chat.in"])] == [9, 6, 3, 0]
        assert [r.seq for r in proj.history(kinds="chat.in")] == [9, 6, 3, 0]
        assert [r.seq for r in proj.history(kinds=["chat.in", "effect"], before_seq=9)] == [
            8,
            6,
            5,
            3,
            2,
            0,
        ]
        assert proj.history(kinds=[]) == []
        assert proj.history(kinds=["nope"]) == []
        pages: list[int] = []
        before: int | None = None
        while page := proj.history(5, before_seq=before):
            pages.extend(r.seq for r in page)
            before = page[-1].seq
        assert pages == list(range(11, -1, -1))
        assert proj.count_by_kind() == {"chat.in": 4, "chat.out": 4, "effect": 4}
        with pytest.raises(ValueError, match="limit"):
            proj.history(-1)


def test_history_keeps_blob_ref_order_and_repeats(path: str) -> None:
    refs = (digest32(2), digest32(1), digest32(2))
    source = ListSource(chain([("k", b"abc", refs), ("k", b"", ())]))
    with Projection.rebuild(path, source) as proj:
        assert [r.blob_refs for r in proj.history()] == [(), refs]


def test_rebuild_reports_progress_and_creates_an_owner_only_file(path: str) -> None:
    calls: list[tuple[int, int]] = []
    old_umask = os.umask(0)
    try:
        Projection.rebuild(
            path, source_of(2 * BATCH_RECORDS + 1), lambda done, total: calls.append((done, total))
        ).close()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        other = path + ".2"
        Projection.open(other).close()
        assert stat.S_IMODE(os.stat(other).st_mode) == 0o600
    finally:
        os.umask(old_umask)
    total = 2 * BATCH_RECORDS + 1
    assert calls == [(BATCH_RECORDS, total), (2 * BATCH_RECORDS, total), (total, total)]
    empty: list[tuple[int, int]] = []
    Projection.rebuild(path, ListSource([]), lambda d, t: empty.append((d, t))).close()
    assert empty == [(0, 0)]


def test_crash_mid_rebuild_leaves_the_old_file_intact(path: str) -> None:
    old = source_of(7)
    with Projection.rebuild(path, old) as proj:
        old_digest = proj.digest()

    class SimulatedCrashError(Exception):
        pass

    def crash(done: int, total: int) -> None:
        raise SimulatedCrashError(f"{done}/{total}")

    with pytest.raises(SimulatedCrashError):
        Projection.rebuild(path, source_of(BATCH_RECORDS + 10), crash)
    assert not os.path.exists(path + ".tmp")
    assert verify_projection(path, old) is None
    with Projection.open(path) as proj:
        assert proj.digest() == old_digest
        assert len(proj.history(100)) == 7


def _run_killed(code: str) -> None:
    """Run ``code`` in a child Python that SIGKILLs itself: a real crash."""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def test_killed_rebuild_leaves_the_old_file_and_a_temp_the_next_rebuild_clears(
    path: str,
) -> None:
    Projection.rebuild(path, source_of(5)).close()
    _run_killed(
        "import os, signal\n"
        "from tests.unit.test_projection import source_of\n"
        "from naga_core.ledger._projection import BATCH_RECORDS, Projection\n"
        f"Projection.rebuild({path!r}, source_of(BATCH_RECORDS + 1),\n"
        "    lambda d, t: os.kill(os.getpid(), signal.SIGKILL))\n"
    )
    assert os.path.exists(path + ".tmp")
    assert verify_projection(path, source_of(5)) is None
    Projection.rebuild(path, source_of(6)).close()
    assert sorted(os.listdir(os.path.dirname(path))) == ["projection.sqlite3"]


def test_hot_journal_from_a_killed_writer(path: str) -> None:
    source = source_of(2000)
    Projection.rebuild(path, source).close()
    # A tiny page cache makes SQLite spill the open transaction into the file,
    # so the journal left behind is hot: the file is wrong until rolled back.
    kill_mid_write = (
        "import os, sqlite3\n"
        f"c = sqlite3.connect({path!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1')\n"
        "c.execute('BEGIN')\n"
        "c.execute('UPDATE records SET payload = randomblob(300)')\n"
        "os.kill(os.getpid(), 9)\n"
    )
    _run_killed(kill_mid_write)
    assert os.path.exists(path + "-journal")
    reason = verify_projection(path, source)
    assert reason is not None
    assert "hot journal" in reason
    assert os.path.exists(path + "-journal")
    with Projection.open(path) as proj:
        assert proj.catch_up(source) == CatchUp(0, False, None)
    assert verify_projection(path, source) is None
    # A rebuild over a file with a hot journal must not let that journal be
    # replayed into the new file.
    _run_killed(kill_mid_write)
    longer = source_of(2100)
    Projection.rebuild(path, longer).close()
    assert sorted(os.listdir(os.path.dirname(path))) == ["projection.sqlite3"]
    assert verify_projection(path, longer) is None


class FailingSource(ListSource):
    """A ledger whose reader fails after ``fail_after`` records."""

    def __init__(self, records: Sequence[Record], fail_after: int) -> None:
        super().__init__(records)
        self.fail_after = fail_after

    def iter_records(self, from_seq: int = 0) -> Iterator[Record]:
        for rec in self.records[from_seq:]:
            if rec.seq >= self.fail_after:
                raise LedgerFailed("disk went away")
            yield rec


def test_interrupted_catch_up_keeps_whole_batches_only(path: str) -> None:
    records = chain(simple(BATCH_RECORDS + 50))
    with Projection.open(path) as proj:
        with pytest.raises(LedgerFailed, match="disk went away"):
            proj.catch_up(FailingSource(records, BATCH_RECORDS + 20))
        assert proj.head() == (BATCH_RECORDS - 1, records[BATCH_RECORDS - 1].leaf_hash)
        assert sum(proj.count_by_kind().values()) == BATCH_RECORDS
        assert proj.catch_up(ListSource(records)) == CatchUp(50, False, None)
    assert verify_projection(path, ListSource(records)) is None


def test_a_source_that_breaks_its_chain_is_refused(path: str) -> None:
    records = chain(simple(4))
    records[2] = chain([("evil", b"", ())])[0]
    with Projection.open(path) as proj, pytest.raises(ProjectionError, match="seq 0 where seq 2"):
        proj.catch_up(ListSource(records))


def test_closed_projection_refuses_and_errors_are_ledger_errors(path: str) -> None:
    proj = Projection.open(path)
    proj.close()
    proj.close()
    with pytest.raises(LedgerError, match="closed"):
        proj.head()
    with pytest.raises(ProjectionError):
        Projection.open(os.path.join(path, "no", "such", "dir"))


def test_queries_work_from_another_thread(path: str) -> None:
    results: list[int] = []
    with Projection.rebuild(path, source_of(3)) as proj:
        worker = threading.Thread(target=lambda: results.extend(r.seq for r in proj.history()))
        worker.start()
        worker.join()
    assert results == [2, 1, 0]


def test_list_source_is_a_record_source() -> None:
    source: RecordSource = source_of(1)
    assert source.size == 1
