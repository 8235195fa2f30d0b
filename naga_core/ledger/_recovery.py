"""Opening a ledger directory: what is there, is it whole, what to cut.

The rules (docs/design/ledger.md, "Recovery"):

* leftover ``*.tmp`` files are crash debris of atomic writes: removed;
* every segment but the last must be sealed; a seal is checked against its
  signature, the segment's and index's SHA-256, the previous seal (sizes and
  consistency proof) and the chain into the segment;
* the last, unsealed segment is scanned record by record; a torn tail (the
  never-acknowledged last write, cut short or partly missing) is truncated
  and reported; anything else refuses to open, naming file, offset and cause;
* blobs referenced from the unsealed tail must be present and intact;
* temp files of interrupted blob puts (``blobs/tmp``) are removed: no put
  is in flight while the ledger lock is being taken, and a temp file is
  never referenced (a record names a blob only once it is renamed in).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from array import array
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from naga.constants import RECORD_HEADER_BYTES
from naga_core.errors import BlobError, LedgerCorrupt, NotFound, ProofError
from naga_core.ledger._blobs import BlobStore
from naga_core.ledger._checkpoint import CheckpointVerifier
from naga_core.ledger._fs import FileHandle, FileSystem, makedirs, sha256_file
from naga_core.ledger._merkle import CompactRange, verify_consistency
from naga_core.ledger._record import GENESIS_PREV, Frame, check_frame
from naga_core.ledger._segment import (
    INDEX_ENTRY_BYTES,
    INDEX_HEADER_BYTES,
    INDEX_SUFFIX,
    SEAL_SUFFIX,
    SEGMENT_SUFFIX,
    Seal,
    decode_index,
    decode_seal,
    index_summary,
    parse_name,
    scan_segment,
)

_TS = struct.Struct(">Qq")


@dataclass(frozen=True, slots=True)
class TornTailCut:
    path: str
    offset: int
    bytes_cut: int
    reason: str


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening found and did."""

    size: int
    sealed_segments: int
    tail_records: int
    cut: tuple[TornTailCut, ...] = ()
    removed: tuple[str, ...] = ()
    #: temp files of interrupted blob puts, removed
    blobs_cleaned: tuple[str, ...] = ()

    @property
    def cleaned(self) -> bool:
        """Whether the open found anything a crash leaves (and fixed it)."""
        return bool(self.cut or self.removed or self.blobs_cleaned)

    def lines(self) -> list[str]:
        out = [f"{self.size} records, {self.sealed_segments} sealed segments"]
        out += [
            f"torn tail cut: {c.path} at offset {c.offset}, {c.bytes_cut} bytes ({c.reason})"
            for c in self.cut
        ]
        out += [f"removed crash debris: {p}" for p in self.removed]
        out += [f"removed an interrupted blob put's temp file: {p}" for p in self.blobs_cleaned]
        return out


@dataclass(slots=True)
class SegmentState:
    """Everything the writer needs to continue where the disk left off."""

    seals: list[Seal] = field(default_factory=lambda: [])
    #: The leaf hashes of the unsealed tail only (a sealed segment's are in
    #: its index file, checked here against its seal and read back on demand).
    leaves: bytearray = field(default_factory=bytearray)
    frontier: CompactRange = field(default_factory=CompactRange)
    size: int = 0
    last_leaf: bytes = GENESIS_PREV
    last_timestamp_ns: int = 0
    active_path: str | None = None
    active_first_seq: int = 0
    active_handle: FileHandle | None = None
    active_bytes: int = 0
    active_offsets: array[int] = field(default_factory=lambda: array("Q"))


def segment_groups(fs: FileSystem, seg_dir: str) -> tuple[dict[int, set[str]], list[str]]:
    """Segment files by first seq, and the stray ``.tmp`` files."""
    groups: dict[int, set[str]] = {}
    debris: list[str] = []
    for name in fs.listdir(seg_dir):
        if name.endswith(".tmp"):
            debris.append(os.path.join(seg_dir, name))
            continue
        parsed = parse_name(name)
        if parsed is None:
            raise LedgerCorrupt(
                os.path.join(seg_dir, name), None, "unexpected file in the segments directory"
            )
        groups.setdefault(parsed[0], set()).add(parsed[1])
    return groups, debris


def seal_signed(verifier: CheckpointVerifier, body: bytes, signature: bytes) -> bool:
    """Whether a seal's body carries the ledger key's signature."""
    try:
        Ed25519PublicKey.from_public_bytes(verifier.public_key).verify(signature, body)
    except (InvalidSignature, ValueError):
        return False
    return True


def check_seal(
    fs: FileSystem,
    seg_dir: str,
    *,
    first: int,
    verifier: CheckpointVerifier,
    prev: Seal | None,
    prev_leaf: bytes,
    excess_ok: bool = False,
    entries: bool = True,
    contents: bool = True,
) -> tuple[Seal, array[int], bytes]:
    """Validate one sealed segment cheaply (hashes, signatures, links).

    Returns the seal, the record offsets and the concatenated leaf hashes
    from its index; with ``entries=False`` (a start, which reads a sealed
    segment's index only when asked: the ledger checks it against the seal
    again then) the index is checked as a whole (its hash, its count, its
    last leaf) without decoding every entry, and the offsets hold only the
    last record's. With ``contents=False`` (the core's start, ADR 0057)
    neither the segment nor its index is hashed: the signed seal, its
    checkpoint and consistency proof, the files' sizes, the index's last
    entry and the first record's link are checked, and every later read of a
    record checks it against its leaf hash and the index against the seal's
    hash (:meth:`Ledger.check_sealed` rehashes them all, in the background).
    Raises LedgerCorrupt naming the file.
    """
    stem = os.path.join(seg_dir, f"{first:020d}")
    seal_path, idx_path, log_path = stem + SEAL_SUFFIX, stem + INDEX_SUFFIX, stem + SEGMENT_SUFFIX
    try:
        seal, body, signature = decode_seal(fs.read(seal_path))
    except ValueError as exc:
        raise LedgerCorrupt(seal_path, None, str(exc)) from None
    if not seal_signed(verifier, body, signature):
        raise LedgerCorrupt(seal_path, None, "seal signature does not verify")
    if seal.segment != os.path.basename(log_path) or seal.first_seq != first:
        raise LedgerCorrupt(seal_path, None, "seal names another segment")
    if seal.tree_size != first + seal.count or seal.count == 0:
        raise LedgerCorrupt(seal_path, None, "seal sizes are inconsistent")
    try:
        cp = verifier.verify(seal.checkpoint)
    except ProofError as exc:
        raise LedgerCorrupt(seal_path, None, f"checkpoint: {exc}") from None
    if cp.size != seal.tree_size or cp.root != seal.root:
        raise LedgerCorrupt(seal_path, None, "checkpoint does not match the seal's root")
    try:
        frontier = CompactRange.from_bytes(seal.frontier)
    except ValueError as exc:
        raise LedgerCorrupt(seal_path, None, f"frontier: {exc}") from None
    if frontier.size != seal.tree_size or frontier.root() != seal.root:
        raise LedgerCorrupt(seal_path, None, "Merkle frontier does not give the sealed root")
    prev_size = prev.tree_size if prev is not None else 0
    if seal.prev_tree_size != prev_size:
        raise LedgerCorrupt(seal_path, None, "seal does not follow the previous seal")
    if prev is not None:
        try:
            verify_consistency(
                prev.tree_size, seal.tree_size, prev.root, seal.root, seal.consistency
            )
        except ProofError as exc:
            raise LedgerCorrupt(
                seal_path, None, f"not consistent with the previous checkpoint: {exc}"
            ) from None
    if not fs.exists(log_path):
        raise LedgerCorrupt(log_path, None, "sealed segment is missing")
    size = fs.size(log_path)
    if size < seal.bytes:
        raise LedgerCorrupt(
            log_path, None, f"sealed segment is {size} bytes, its seal says {seal.bytes}"
        )
    if contents and sha256_file(fs, log_path, length=seal.bytes) != seal.segment_sha256:
        raise LedgerCorrupt(log_path, None, "sealed segment content does not match its seal")
    if size > seal.bytes and not excess_ok:
        # Bytes past what the signed seal covers cannot be records of the
        # tree (the next segment holds those seqs): debris of a write whose
        # sync and cut-back both failed, still in the page cache when the
        # writer went on and sealed. Open cuts them; verify reports them.
        raise LedgerCorrupt(
            log_path,
            seal.bytes,
            f"{size - seal.bytes} bytes past the end its seal covers "
            "(debris of a failed write; `naga ledger recover` cuts it)",
        )
    if not fs.exists(idx_path):
        raise LedgerCorrupt(idx_path, None, "index of a sealed segment is missing")
    if not contents:
        count, last_offset, last_leaf = _index_tail(fs, idx_path)
        offsets, leaves = array("Q", [last_offset]), last_leaf
        if count != seal.count or last_leaf != seal.last_leaf_hash:
            raise LedgerCorrupt(idx_path, None, "index does not match its seal")
        _check_first_link(fs, log_path, seal, prev_leaf)
        return seal, offsets, leaves
    idx = fs.read(idx_path)
    if hashlib.sha256(idx).digest() != seal.index_sha256:
        raise LedgerCorrupt(idx_path, None, "index does not match its seal")
    try:
        if entries:
            offsets, leaves = decode_index(idx)
            count, last_leaf = len(offsets), leaves[-32:]
        else:
            count, last_offset, last_leaf = index_summary(idx)
            offsets, leaves = array("Q", [last_offset]), last_leaf
    except ValueError as exc:
        raise LedgerCorrupt(idx_path, None, str(exc)) from None
    if count != seal.count or last_leaf != seal.last_leaf_hash:
        raise LedgerCorrupt(idx_path, None, "index does not match its seal")
    _check_first_link(fs, log_path, seal, prev_leaf)
    return seal, offsets, leaves


def _check_first_link(fs: FileSystem, log_path: str, seal: Seal, prev_leaf: bytes) -> None:
    """The segment's first record links to the previous segment's last
    (its frame read alone, not the first 2 MB of the file)."""
    head = fs.read(log_path, 0, min(seal.bytes, RECORD_HEADER_BYTES))
    n = int.from_bytes(head[8:12], "big") if len(head) == RECORD_HEADER_BYTES else 0
    rest = (
        fs.read(log_path, RECORD_HEADER_BYTES, min(n, seal.bytes - RECORD_HEADER_BYTES))
        if n
        else b""
    )
    first_frame = check_frame(memoryview(head + rest), 0)
    if not isinstance(first_frame, Frame) or first_frame.prev_hash != prev_leaf:
        raise LedgerCorrupt(
            log_path, 0, "broken chain: first record does not link to the previous segment"
        )


def _index_tail(fs: FileSystem, idx_path: str) -> tuple[int, int, bytes]:
    """:func:`index_summary` of an index from its size, header and last
    entry (two small reads, not the file)."""
    size = fs.size(idx_path)
    head = fs.read(idx_path, 0, INDEX_HEADER_BYTES)
    last = (
        fs.read(idx_path, size - INDEX_ENTRY_BYTES, INDEX_ENTRY_BYTES)
        if size > INDEX_HEADER_BYTES
        else b""
    )
    try:
        return index_summary(head + last, size=size)
    except ValueError as exc:
        raise LedgerCorrupt(idx_path, None, str(exc)) from None


def recover(
    fs: FileSystem,
    directory: str,
    verifier: CheckpointVerifier,
    blobs: BlobStore | None,
    stack: contextlib.ExitStack,
    *,
    contents: bool = True,
) -> tuple[SegmentState, RecoveryReport]:
    """Lock ``directory``, check it and bring it to a state the writer can
    continue (``contents``: see :func:`check_seal`)."""
    seg_dir = os.path.join(directory, "segments")
    makedirs(fs, seg_dir)
    stack.enter_context(fs.lock(os.path.join(directory, "LOCK")))
    # What follows trusts every entry it sees, so make them durable first:
    # an earlier open or writer may have failed between creating a file or
    # directory and syncing its parent (the entry then lives in the cache
    # only), and records acknowledged from now on must not sit under a name
    # a crash can still drop. Syncing a directory with nothing pending is
    # cheap. The ledger's parent (the home) holds the ledger's own entry.
    for path in (os.path.dirname(os.path.normpath(directory)) or ".", directory, seg_dir):
        fs.sync_dir(path)
    groups, debris = segment_groups(fs, seg_dir)
    for path in debris:
        fs.remove(path)
    if debris:
        fs.sync_dir(seg_dir)
    removed = list(debris)
    blobs_cleaned: tuple[str, ...] = ()
    if blobs is not None:
        try:
            blobs_cleaned = tuple(blobs.clean_tmp())
        except BlobError as exc:
            raise LedgerCorrupt(blobs.root, None, str(exc)) from None
    state = SegmentState()
    firsts = sorted(groups)
    cut: list[TornTailCut] = []
    tail_records = 0
    for k, first in enumerate(firsts):
        kinds = groups[first]
        stem = os.path.join(seg_dir, f"{first:020d}")
        log_path = stem + SEGMENT_SUFFIX
        if "log" not in kinds:
            raise LedgerCorrupt(
                log_path, None, "segment file is missing (its index or seal exists)"
            )
        if first != state.size:
            raise LedgerCorrupt(
                log_path,
                None,
                f"segment starts at seq {first}, expected {state.size}: "
                "a segment is missing or out of order",
            )
        last = k == len(firsts) - 1
        if "seal" in kinds:
            prev = state.seals[-1] if state.seals else None
            # Its leaves are checked here and read back from the index when asked.
            seal, offsets, _leaves = check_seal(
                fs,
                seg_dir,
                first=first,
                verifier=verifier,
                prev=prev,
                prev_leaf=state.last_leaf,
                excess_ok=True,
                entries=False,
                contents=contents,
            )
            excess = fs.size(log_path) - seal.bytes
            if excess > 0:
                handle = fs.open(log_path, "read_write")
                try:
                    handle.truncate(seal.bytes)
                    handle.sync()
                finally:
                    handle.close()
                cut.append(
                    TornTailCut(log_path, seal.bytes, excess, "bytes past the end its seal covers")
                )
            state.seals.append(seal)
            state.leaves = bytearray()
            state.frontier = CompactRange.from_bytes(seal.frontier)
            state.size = seal.tree_size
            state.last_leaf = seal.last_leaf_hash
            if last:
                state.last_timestamp_ns = _timestamp_at(fs, log_path, offsets[-1])
            continue
        if not last:
            raise LedgerCorrupt(log_path, None, "segment is not sealed but later segments exist")
        if "idx" in kinds:  # an interrupted seal: the index is rebuilt at sealing
            fs.remove(stem + INDEX_SUFFIX)
            fs.sync_dir(seg_dir)
            removed.append(stem + INDEX_SUFFIX)
        data = fs.read(log_path)
        scan = scan_segment(data, first, state.last_leaf, collect_refs=True)
        if scan.damage is not None:
            raise LedgerCorrupt(log_path, scan.damage.offset, scan.damage.reason)
        handle = fs.open(log_path, "read_write")
        stack.callback(_close_quietly, handle)
        if scan.torn is not None:
            handle.truncate(scan.torn.offset)
            handle.sync()
            cut.append(
                TornTailCut(log_path, scan.torn.offset, scan.torn.bytes_cut, scan.torn.reason)
            )
        for i in range(scan.count):
            state.frontier.append(bytes(scan.leaves[32 * i : 32 * i + 32]))
        state.leaves += scan.leaves
        state.size = first + scan.count
        state.last_leaf = scan.last_leaf
        state.active_path = log_path
        state.active_first_seq = first
        state.active_handle = handle
        state.active_bytes = scan.end
        state.active_offsets = scan.offsets
        tail_records = scan.count
        if scan.count:
            state.last_timestamp_ns = _timestamp_at(fs, log_path, scan.offsets[-1])
        if blobs is not None:
            _check_blobs(blobs, scan.blob_refs)
    report = RecoveryReport(
        size=state.size,
        sealed_segments=len(state.seals),
        tail_records=tail_records,
        cut=tuple(cut),
        removed=tuple(removed),
        blobs_cleaned=blobs_cleaned,
    )
    return state, report


def _timestamp_at(fs: FileSystem, path: str, offset: int) -> int:
    raw = fs.read(path, offset + 24, _TS.size)
    return _TS.unpack(raw)[1] if len(raw) == _TS.size else 0


def _check_blobs(blobs: BlobStore, refs: list[bytes]) -> None:
    for ref in dict.fromkeys(refs):
        try:
            blobs.get(ref)
        except NotFound:
            raise LedgerCorrupt(blobs.path_of(ref), None, "referenced blob is missing") from None
        except BlobError as exc:
            raise LedgerCorrupt(blobs.path_of(ref), None, str(exc)) from None


def _close_quietly(handle: FileHandle) -> None:
    with contextlib.suppress(OSError):
        handle.close()
