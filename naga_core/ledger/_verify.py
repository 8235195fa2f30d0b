"""``naga ledger verify``: a read-only check of everything, naming each fault.

Unlike opening, which trusts the seals of sealed segments after a cheap
check, verification rescans every record of every segment, recomputes the
Merkle tree independently of the stored frontiers and indexes, verifies
every checkpoint and consistency proof, rehashes every blob and rebuilds the
projection in memory to compare. It never writes.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from naga_core.errors import BlobError, LedgerCorrupt, NagaError, NotFound
from naga_core.ledger._blobs import BlobStore
from naga_core.ledger._checkpoint import CheckpointVerifier
from naga_core.ledger._fs import FileSystem
from naga_core.ledger._merkle import CompactRange
from naga_core.ledger._projection import fresh_projection, read_head, verify_projection
from naga_core.ledger._record import GENESIS_PREV, Frame, Record, check_frame, decode_body
from naga_core.ledger._recovery import check_seal, seal_signed, segment_groups
from naga_core.ledger._segment import (
    INDEX_SUFFIX,
    SEAL_SUFFIX,
    SEGMENT_SUFFIX,
    Seal,
    decode_seal,
    scan_segment,
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing that does not hold, and where."""

    path: str
    offset: int | None
    what: str

    def __str__(self) -> str:
        where = self.path if self.offset is None else f"{self.path} at offset {self.offset}"
        return f"{where}: {self.what}"


@dataclass(slots=True)
class VerifyReport:
    records: int = 0
    segments: int = 0
    sealed: int = 0
    checkpoints: int = 0
    blobs: int = 0
    root: bytes = b""
    problems: list[Problem] = field(default_factory=lambda: [])
    notes: list[str] = field(default_factory=lambda: [])

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(slots=True)
class LedgerView:
    """The verified records of a ledger, read-only (:func:`read_ledger`): what
    offline readers (``naga doctor``, ``naga audit``) use instead of opening
    the ledger, which takes its lock and may cut a torn tail."""

    fs: FileSystem
    files: list[tuple[int, str, array[int]]] = field(default_factory=lambda: [])
    leaves: bytearray = field(default_factory=bytearray)
    limit: int | None = None

    @property
    def size(self) -> int:
        n = len(self.leaves) // 32
        return n if self.limit is None else min(n, self.limit)

    def leaf_hash(self, seq: int) -> bytes:
        if not 0 <= seq < self.size:
            raise NotFound(f"no record {seq}")
        return bytes(self.leaves[32 * seq : 32 * seq + 32])

    def iter_records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[Record]:
        end = self.size if to_seq is None else min(to_seq, self.size)
        for first, path, offsets in self.files:
            if first + len(offsets) <= from_seq:
                continue
            data = memoryview(self.fs.read(path))
            for i, off in enumerate(offsets):
                if first + i < from_seq:
                    continue
                if first + i >= end:
                    return
                got = check_frame(data, off)
                if not isinstance(got, Frame):  # verified a moment ago
                    raise LedgerCorrupt(path, off, got.reason)
                yield decode_body(bytes(got.body))


def verify_ledger(
    fs: FileSystem,
    directory: str,
    verifier: CheckpointVerifier,
    *,
    blobs: BlobStore | None = None,
    projection_path: str | None = None,
) -> VerifyReport:
    return read_ledger(fs, directory, verifier, blobs=blobs, projection_path=projection_path)[0]


def read_ledger(
    fs: FileSystem,
    directory: str,
    verifier: CheckpointVerifier,
    *,
    blobs: BlobStore | None = None,
    projection_path: str | None = None,
) -> tuple[VerifyReport, LedgerView]:
    """Verify the ledger (as :func:`verify_ledger`, writing nothing) and
    return its records up to the first problem, read-only."""
    source = LedgerView(fs)
    report = _verify(
        fs, directory, verifier, blobs=blobs, projection_path=projection_path, source=source
    )
    return report, source


def _verify(
    fs: FileSystem,
    directory: str,
    verifier: CheckpointVerifier,
    *,
    blobs: BlobStore | None,
    projection_path: str | None,
    source: LedgerView,
) -> VerifyReport:
    report = VerifyReport()
    seg_dir = os.path.join(directory, "segments")
    if not fs.is_dir(seg_dir):
        report.problems.append(Problem(seg_dir, None, "no ledger here"))
        return report
    try:
        groups, debris = segment_groups(fs, seg_dir)
    except LedgerCorrupt as exc:
        report.problems.append(Problem(exc.path, exc.offset, exc.reason))
        return report
    except OSError as exc:
        report.problems.append(_unreadable(exc, seg_dir))
        return report
    if groups and {"log", "idx"} <= groups[last := max(groups)] and "seal" not in groups[last]:
        debris.append(os.path.join(seg_dir, f"{last:020d}{INDEX_SUFFIX}"))  # a seal cut short
    report.notes += [f"crash debris (removed at next open): {p}" for p in debris]
    try:
        refs = _check_segments(
            fs, seg_dir, groups=groups, verifier=verifier, report=report, source=source
        )
    except OSError as exc:  # a segment file that cannot be read (EIO, a directory, ...)
        report.problems.append(_unreadable(exc, seg_dir))
        refs = []
    report.records = source.size
    if blobs is not None:
        try:
            _check_blobs(blobs, refs, report)
        except BlobError as exc:
            report.problems.append(Problem(blobs.root, None, str(exc)))
    if projection_path is not None and report.ok:
        # A projection that lags the log (the writer stopped before catching
        # up) is not damage: compare it with the log up to its own head.
        head = read_head(projection_path)
        applied = -1 if head is None else head[0]
        lagging = applied + 1 < source.size and (
            # empty (a core killed before its first catch-up) or a prefix of the log
            (head is None and fresh_projection(projection_path))
            or (head is not None and source.leaf_hash(head[0]) == head[1])
        )
        if lagging:
            report.notes.append(
                f"projection is {source.size - applied - 1} records behind the log "
                "(the next start catches it up; so does `naga ledger recover`)"
            )
            source.limit = applied + 1
        try:
            # A missing one (a kill before the first start made it) is built
            # by the next start: nothing to compare yet.
            missing = lagging and not os.path.lexists(projection_path)
            reason = None if missing else verify_projection(projection_path, source)
        except NagaError as exc:
            reason = str(exc)
        finally:
            source.limit = None  # the view is of the whole log again
        if reason is not None:
            report.problems.append(
                Problem(projection_path, None, f"projection: {reason} (naga ledger rebuild)")
            )
    return report


def _check_segments(
    fs: FileSystem,
    seg_dir: str,
    *,
    groups: dict[int, set[str]],
    verifier: CheckpointVerifier,
    report: VerifyReport,
    source: LedgerView,
) -> list[bytes]:
    tree = CompactRange()
    prev_leaf = GENESIS_PREV
    prev_seal: Seal | None = None
    refs: list[bytes] = []
    firsts = sorted(groups)
    for k, first in enumerate(firsts):
        log_path = os.path.join(seg_dir, f"{first:020d}{SEGMENT_SUFFIX}")
        report.segments += 1
        if "log" not in groups[first]:
            report.problems.append(Problem(log_path, None, "segment file is missing"))
            return refs
        if first != tree.size:
            report.problems.append(
                Problem(
                    log_path,
                    None,
                    f"segment starts at seq {first}, expected {tree.size}: "
                    "a segment is missing or out of order",
                )
            )
            return refs
        data = fs.read(log_path)
        sealed_bytes = None
        if "seal" in groups[first]:
            # Its length is used before the seal is checked: only a signed one.
            sealed = _sealed_bytes(fs, seg_dir, first, verifier)
            if isinstance(sealed, Problem):
                report.problems.append(sealed)
                return refs
            sealed_bytes = sealed
        if sealed_bytes is not None and len(data) > sealed_bytes:
            data = data[:sealed_bytes]  # check_seal names what lies past it
        scan = scan_segment(data, first, prev_leaf, collect_refs=True)
        if scan.damage is not None:
            report.problems.append(Problem(log_path, scan.damage.offset, scan.damage.reason))
            return refs
        if scan.torn is not None:
            # Only the last, unsealed segment can end in a torn write; the
            # same fault anywhere else is damage that recovery refuses.
            torn_tail = k == len(firsts) - 1 and "seal" not in groups[first]
            report.problems.append(
                Problem(
                    log_path,
                    scan.torn.offset,
                    f"torn tail ({scan.torn.reason}); `naga ledger recover` cuts it"
                    if torn_tail
                    else f"{scan.torn.reason} in the last write of a "
                    + ("sealed segment" if "seal" in groups[first] else "non-final segment")
                    + ": damage, not a torn tail",
                )
            )
            # What a recovery keeps stays readable (a cut-short batch aside:
            # recovery cuts all of it, and the view then ends before the segment).
            if torn_tail and not scan.open_batch:
                source.files.append((first, log_path, scan.offsets))
                source.leaves += scan.leaves
            return refs
        for i in range(scan.count):
            tree.append(bytes(scan.leaves[32 * i : 32 * i + 32]))
        refs += scan.blob_refs
        source.files.append((first, log_path, scan.offsets))
        source.leaves += scan.leaves
        if "seal" in groups[first]:
            try:
                seal, offsets, leaves = check_seal(
                    fs, seg_dir, first=first, verifier=verifier, prev=prev_seal, prev_leaf=prev_leaf
                )
            except LedgerCorrupt as exc:
                report.problems.append(Problem(exc.path, exc.offset, exc.reason))
                return refs
            if offsets != scan.offsets or leaves != bytes(scan.leaves):
                report.problems.append(Problem(log_path, None, "index does not match the records"))
                return refs
            if tree.root() != seal.root or tree.size != seal.tree_size:
                report.problems.append(
                    Problem(log_path, None, "records do not give the sealed Merkle root")
                )
                return refs
            report.sealed += 1
            report.checkpoints += 1
            prev_seal = seal
        elif k != len(firsts) - 1:
            report.problems.append(
                Problem(log_path, None, "segment is not sealed but later segments exist")
            )
            return refs
        prev_leaf = scan.last_leaf
    report.root = tree.root()
    return refs


def _unreadable(exc: OSError, fallback: str) -> Problem:
    path = exc.filename if isinstance(exc.filename, str) else fallback
    return Problem(path, None, f"cannot read: {exc.strerror or exc}")


def _sealed_bytes(
    fs: FileSystem, seg_dir: str, first: int, verifier: CheckpointVerifier
) -> int | Problem | None:
    """The byte length a segment's seal covers; the problem if the seal
    does not verify (a damaged seal must be named, not the segment it would
    mis-measure); None if unreadable (the seal check then says why)."""
    path = os.path.join(seg_dir, f"{first:020d}{SEAL_SUFFIX}")
    try:
        seal, body, signature = decode_seal(fs.read(path))
    except (ValueError, OSError):
        return None
    if not seal_signed(verifier, body, signature):
        return Problem(path, None, "seal signature does not verify")
    return seal.bytes


def _check_blobs(blobs: BlobStore, refs: list[bytes], report: VerifyReport) -> None:
    for problem in blobs.verify_all():
        if problem.kind == "leftover":
            report.notes.append(f"crash leftover (removed at next open): {problem.path}")
        else:
            report.problems.append(Problem(problem.path, None, problem.reason))
    count = 0
    for digest in dict.fromkeys(refs):
        count += 1
        if not blobs.exists(digest):
            report.problems.append(
                Problem(blobs.path_of(digest), None, "referenced blob is missing")
            )
    report.blobs = count
