"""The SQLite projection: a queryable view of the ledger, derived from the log alone.

The log is the truth and this file a cache of it. Whatever is wrong with the
file (missing, not SQLite, another schema, edited, from another ledger, ahead
of a ledger that recovery truncated) is answered by rebuilding, never trusted.
The same log always gives the same rows in the same order, so two rebuilds
give byte-identical ``dump()`` text and equal ``digest()`` on any machine.

Rollback journal (DELETE) with ``synchronous=FULL``, not WAL: rebuilds replace
the file by rename, and a WAL file's ``-wal``/``-shm`` companions cannot move
with it (a stale ``-wal`` next to a new main file is replayed into it). Idle,
a rollback-journal database is one file, and read-only verification needs no
``-shm``. WAL's gain, readers not blocking the one writer, is small for a
projection committed a batch at a time. Each batch sets ``applied_seq`` in the
same transaction as its rows, so a crash keeps whole batches only.

One process writes the projection (the holder of the ledger lock): a rename
over a database that another process is writing would pair its journal with
the new file.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from naga_core.errors import NotFound, ProjectionError
from naga_core.ledger._record import GENESIS_PREV, Record

SCHEMA_VERSION = 1
#: Records per transaction: bounds the journal and the memory of one batch.
BATCH_RECORDS = 10_000

Progress = Callable[[int, int], None]
Head = tuple[int, bytes]

_SCHEMA = (
    "CREATE TABLE records (seq INTEGER PRIMARY KEY, timestamp_ns INTEGER NOT NULL, "
    "kind TEXT NOT NULL, payload BLOB NOT NULL, leaf_hash BLOB NOT NULL, "
    "prev_hash BLOB NOT NULL)",
    "CREATE TABLE blob_refs (seq INTEGER NOT NULL, position INTEGER NOT NULL, "
    "digest BLOB NOT NULL, PRIMARY KEY (seq, position))",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    # Indexes before the rows: measured faster than building them after a bulk load.
    "CREATE INDEX blob_refs_digest ON blob_refs (digest)",
    "CREATE INDEX records_kind_seq ON records (kind, seq)",
)
_MASTER = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
# An upsert keeps the row's rowid; INSERT OR REPLACE would renumber it, and the
# dump order of meta would then depend on how many batches were applied.
_SET_META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
_COMPANIONS = ("-journal", "-wal", "-shm")


class RecordSource(Protocol):
    """What the projection reads from the ledger."""

    @property
    def size(self) -> int: ...

    def iter_records(self, from_seq: int = 0) -> Iterator[Record]: ...

    def leaf_hash(self, seq: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class CatchUp:
    """Records written by one ``catch_up``; ``reason`` says why it rebuilt."""

    applied: int
    rebuilt: bool
    reason: str | None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    seq: int
    timestamp_ns: int
    kind: str
    payload_size: int
    blob_refs: tuple[bytes, ...]
    leaf_hash: bytes


def _damage(exc: sqlite3.Error) -> str | None:
    """Why to rebuild, if ``exc`` is about the file's content. Locks, I/O and
    permissions are not cured by a rebuild, so they give None."""
    name: str = getattr(exc, "sqlite_errorname", "")
    if name == "SQLITE_NOTADB":
        return "not a SQLite database"
    if name == "SQLITE_READONLY_ROLLBACK":  # only a read-write open can roll it back
        return "a crashed write left a hot journal; opening the projection recovers it"
    return f"corrupt ({exc})" if name.startswith("SQLITE_CORRUPT") else None


def _connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False)
    # The file is data, not code: never run SQL functions its schema names.
    conn.execute("PRAGMA trusted_schema=OFF")
    return conn


def _open_private(path: str) -> sqlite3.Connection:
    # Owner-only before SQLite sees it (its journal inherits the mode).
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return _connect(path)


def _create_schema(conn: sqlite3.Connection) -> None:
    for ddl in _SCHEMA:
        conn.execute(ddl)
    conn.execute(_SET_META, ("schema_version", SCHEMA_VERSION))


def _read_head(conn: sqlite3.Connection) -> Head | None:
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key LIKE 'applied_%'"))
    seq, leaf = meta.get("applied_seq"), meta.get("applied_leaf_hash")
    return (seq, leaf) if isinstance(seq, int) and isinstance(leaf, bytes) else None


def _inspect(conn: sqlite3.Connection) -> str | None:
    """Why this database is not a usable projection, or None. Only reads."""
    try:
        master = conn.execute(_MASTER).fetchall()
        with contextlib.closing(_connect(":memory:")) as mem:
            _create_schema(mem)
            expected: list[Any] = mem.execute(_MASTER).fetchall()
        if master != expected:
            missing = sorted({r[1] for r in expected} - {r[1] for r in master})
            # Extra objects (a planted trigger or view) are "schema differs".
            return f"missing {', '.join(missing)}" if missing else "schema differs"
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or version[0] != SCHEMA_VERSION:
            return f"schema_version {version and version[0]!r}, expected {SCHEMA_VERSION}"
        # A malformed head reads as None, which no non-empty records table matches.
        head = _read_head(conn)
        last = conn.execute("SELECT max(seq) FROM records").fetchone()[0]
        if last != (head and head[0]):
            return f"records end at seq {last} but meta says applied_seq {head and head[0]}"
    except sqlite3.DatabaseError as exc:
        if (reason := _damage(exc)) is None:
            raise
        return reason
    return None


def _divergence(head: Head | None, size: int, source: RecordSource) -> str | None:
    """Why the projection is not a prefix of the ledger, or None."""
    if head is None:
        return None
    seq, leaf = head
    try:
        actual = source.leaf_hash(seq) if seq < size else None
    except NotFound:
        actual = None
    if actual is None:
        return f"projection is at seq {seq} but the ledger holds {size} records (recovered?)"
    if actual != leaf:
        # Leaf hashes chain, so a match at the head vouches for every earlier record.
        return f"leaf hash at seq {seq} differs from the ledger's (another or rewritten ledger)"
    return None


def _apply(
    conn: sqlite3.Connection,
    source: RecordSource,
    head: Head | None,
    size: int,
    progress: Progress | None = None,
) -> int:
    """Append the records after ``head`` up to ``size``, one transaction per batch."""
    seq, prev = (0, GENESIS_PREV) if head is None else (head[0] + 1, head[1])
    records = source.iter_records(seq)
    applied = 0
    while seq < size:
        batch = list(itertools.islice(records, min(BATCH_RECORDS, size - seq)))
        if not batch:
            raise ProjectionError(f"ledger size is {size} but its records stop at seq {seq}")
        rows: list[tuple[int, int, str, bytes, bytes, bytes]] = []
        refs: list[tuple[int, int, bytes]] = []
        for rec in batch:
            if rec.seq != seq or rec.prev_hash != prev:
                raise ProjectionError(
                    f"ledger gave seq {rec.seq} where seq {seq} chaining on was due"
                )
            rows.append((seq, rec.timestamp_ns, rec.kind, rec.payload, rec.leaf_hash, prev))
            refs.extend((seq, pos, digest) for pos, digest in enumerate(rec.blob_refs))
            seq, prev = seq + 1, rec.leaf_hash
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.executemany("INSERT INTO blob_refs VALUES (?, ?, ?)", refs)
            conn.executemany(_SET_META, (("applied_seq", seq - 1), ("applied_leaf_hash", prev)))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied += len(batch)
        if progress is not None:
            progress(applied, size)
    return applied


def _fsync(path: str, flags: int = 0) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(*paths: str) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _build_file(path: str, source: RecordSource, progress: Progress | None) -> int:
    """Write a whole projection to ``path + ".tmp"`` and rename it over ``path``."""
    path = os.path.abspath(path)
    directory, tmp = os.path.dirname(path), path + ".tmp"
    _remove(tmp, *(tmp + c for c in _COMPANIONS))
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    try:
        with contextlib.closing(_connect(tmp)) as conn:
            # Nobody sees the temp file before the rename and a failed build is
            # thrown away, so it needs no journal on disk and no syncs of its own.
            conn.execute("PRAGMA journal_mode=MEMORY")
            conn.execute("PRAGMA synchronous=OFF")
            _create_schema(conn)
            size = source.size
            applied = _apply(conn, source, None, size, progress)
            if size == 0 and progress is not None:
                progress(0, 0)
        _fsync(tmp)
        if any(os.path.lexists(path + c) for c in _COMPANIONS):
            # The old file's journal would be replayed into the new file. Drop the
            # old file first: a crash here leaves no projection, never a bad pair.
            _remove(path, *(path + c for c in _COMPANIONS))
            _fsync(directory, os.O_DIRECTORY)
        os.rename(tmp, path)
        _fsync(directory, os.O_DIRECTORY)
    except BaseException:
        _remove(tmp)
        raise
    return applied


def _compare_dumps(expected: Iterable[str], actual: Iterable[str]) -> str | None:
    """The first difference between two iterdumps, named by table and row."""
    rows: dict[str | None, int] = {}
    for want, got in itertools.zip_longest(expected, actual):
        want_table, got_table = _table_of(want), _table_of(got)
        if want == got:
            rows[want_table] = rows.get(want_table, 0) + 1
        elif got_table is not None and got_table != want_table:
            return f"table {got_table} has rows the ledger lacks, from row {rows.get(got_table, 0)}"
        elif want_table is not None and got_table != want_table:
            return f"table {want_table} lacks rows from row {rows.get(want_table, 0)}"
        elif want_table is not None:
            row = rows.get(want_table, 0)
            seq = f" (seq {row})" if want_table == "records" else ""
            return f"differs at row {row} of table {want_table}{seq}"
        else:
            return f"dump differs: expected {want!r:.100}, found {got!r:.100}"
    return None


def _table_of(line: str | None) -> str | None:
    prefix = 'INSERT INTO "'
    if line is None or not line.startswith(prefix):
        return None
    return line[len(prefix) : line.index('"', len(prefix))]


class Projection:
    """An open projection file; one lock makes it safe to share between threads."""

    def __init__(self, path: str, conn: sqlite3.Connection) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()
        self._fault: str | None = None

    @classmethod
    def open(cls, path: str) -> Projection:
        """Open or create ``path``. A file that is no usable projection still
        opens: queries then raise, and ``catch_up`` rebuilds it."""
        try:
            self = cls(path, _open_private(path))
            self._fault = self._prepare()
        except (OSError, sqlite3.Error) as exc:
            raise ProjectionError(f"projection {path}: {exc}") from exc
        return self

    @classmethod
    def rebuild(
        cls, path: str, source: RecordSource, progress: Progress | None = None
    ) -> Projection:
        """Build from the whole ledger beside ``path`` and rename it into place.
        If this fails or the process dies, the previous file is untouched (unless
        a crashed writer's hot journal made it unsafe to keep: then it is gone)."""
        try:
            _build_file(path, source, progress)
        except (OSError, sqlite3.Error) as exc:
            raise ProjectionError(f"rebuilding projection {path}: {exc}") from exc
        return cls.open(path)

    def _prepare(self) -> str | None:
        conn = self._require()
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("PRAGMA synchronous=FULL")
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                conn.execute("BEGIN IMMEDIATE")
                _create_schema(conn)
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if (reason := _damage(exc)) is None:
                raise
            return reason
        return _inspect(conn)

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ProjectionError(f"projection {self._path} is closed")
        return self._conn

    def _usable(self) -> sqlite3.Connection:
        conn = self._require()
        if self._fault is not None:
            raise ProjectionError(
                f"projection {self._path} is unusable ({self._fault}); catch_up rebuilds it"
            )
        return conn

    def catch_up(self, source: RecordSource) -> CatchUp:
        """Apply what the projection lacks; rebuild it if its head is not a
        prefix of ``source`` or the file is no usable projection."""
        with self._lock:
            conn = self._require()
            try:
                size = source.size
                reason = (
                    self._fault or _inspect(conn) or _divergence(_read_head(conn), size, source)
                )
                if reason is None:
                    try:
                        return CatchUp(_apply(conn, source, _read_head(conn), size), False, None)
                    except sqlite3.DatabaseError as exc:
                        if (reason := _damage(exc)) is None:
                            raise
                return CatchUp(self._rebuild_here(source), True, reason)
            except (OSError, sqlite3.Error) as exc:
                raise ProjectionError(f"projection {self._path}: {exc}") from exc

    def _rebuild_here(self, source: RecordSource) -> int:
        self._require().close()
        self._conn = None
        try:
            return _build_file(self._path, source, None)
        finally:
            # After a failed build this reopens the old file, which is still there.
            self._conn = _open_private(self._path)
            self._fault = self._prepare()

    @contextlib.contextmanager
    def _reading(self) -> Generator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._usable()
            except sqlite3.Error as exc:
                raise ProjectionError(f"projection {self._path}: {exc}") from exc

    def _dump_lines(self, conn: sqlite3.Connection) -> Iterator[str]:
        conn.execute("BEGIN")  # one read transaction: the dump is one snapshot
        try:
            for line in conn.iterdump():
                yield line + "\n"
        finally:
            conn.execute("COMMIT")

    def dump(self) -> str:
        """Canonical SQL text of the whole projection (``iterdump``)."""
        with self._reading() as conn:
            return "".join(self._dump_lines(conn))

    def digest(self) -> bytes:
        """SHA-256 of ``dump()``, without holding the dump in memory."""
        h = hashlib.sha256()
        with self._reading() as conn:
            for line in self._dump_lines(conn):
                h.update(line.encode())
        return h.digest()

    def head(self) -> Head | None:
        """``(applied_seq, applied_leaf_hash)``, or None if nothing is applied."""
        with self._reading() as conn:
            return _read_head(conn)

    def history(
        self, limit: int = 20, *, kinds: Sequence[str] | None = None, before_seq: int | None = None
    ) -> list[HistoryRow]:
        """Newest first; ``kinds`` filters, ``before_seq`` pages back."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        where: list[str] = []
        params: list[object] = []
        if kinds is not None:
            wanted = sorted({kinds} if isinstance(kinds, str) else set(kinds))
            if not wanted:
                return []
            where.append(f"kind IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        if before_seq is not None:
            where.append("seq < ?")
            params.append(before_seq)
        sql = (
            "WITH page AS (SELECT seq, timestamp_ns, kind, length(payload), leaf_hash FROM records"
            f"{' WHERE ' if where else ''}{' AND '.join(where)} ORDER BY seq DESC LIMIT ?) "
            "SELECT page.*, b.digest FROM page LEFT JOIN blob_refs AS b ON b.seq = page.seq "
            "ORDER BY page.seq DESC, b.position"
        )
        with self._reading() as conn:
            found = conn.execute(sql, (*params, limit)).fetchall()
        return [
            HistoryRow(seq, ts, kind, size, tuple(r[5] for r in group if r[5] is not None), leaf)
            for (seq, ts, kind, size, leaf), group in itertools.groupby(found, lambda r: r[:5])
        ]

    def count_by_kind(self) -> dict[str, int]:
        with self._reading() as conn:
            return dict(conn.execute("SELECT kind, count(*) FROM records GROUP BY kind"))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Projection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_head(path: str) -> Head | None:
    """The projection's ``(applied_seq, applied_leaf_hash)``, read-only;
    None when missing, empty or unreadable (verify_projection says why)."""
    if not os.path.isfile(path):
        return None
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        with contextlib.closing(_connect(uri, uri=True)) as ro:
            return _read_head(ro)
    except sqlite3.Error:
        return None


def fresh_projection(path: str) -> bool:
    """Whether ``path`` is missing or a whole projection with nothing applied
    yet: what a core killed before its first catch-up leaves (the next start
    builds it), as opposed to a damaged file."""
    if not os.path.lexists(path):
        return True
    if not os.path.isfile(path):
        return False
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        with contextlib.closing(_connect(uri, uri=True)) as ro:
            if ro.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                return True  # created, schema not yet committed
            return _inspect(ro) is None and _read_head(ro) is None
    except sqlite3.Error:
        return False


def verify_projection(path: str, source: RecordSource) -> str | None:
    """None if the file at ``path`` is exactly what the ledger rebuilds, else why
    not. The file is opened read-only; the reference is built in memory."""
    if not os.path.lexists(path):
        return "missing"
    if not os.path.isfile(path):
        return "not a regular file"
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        with (
            contextlib.closing(_connect(uri, uri=True)) as ro,
            contextlib.closing(_connect(":memory:")) as fresh,
        ):
            head, size = None, source.size
            reason = _inspect(ro) or _divergence(head := _read_head(ro), size, source)
            if reason is None and (-1 if head is None else head[0]) + 1 < size:
                at = "empty" if head is None else f"applied_seq {head[0]}"
                reason = f"{at} behind ledger size {size}"
            if reason is not None:
                return reason
            _create_schema(fresh)
            _apply(fresh, source, None, size)
            ro.execute("BEGIN")
            return _compare_dumps(fresh.iterdump(), ro.iterdump())
    except sqlite3.Error as exc:
        if (reason := _damage(exc)) is None:
            raise ProjectionError(f"verifying projection {path}: {exc}") from exc
        return reason
