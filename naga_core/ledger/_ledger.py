"""The ledger: append-only, hash-chained, Merkle-sealed, group-committed.

One :class:`Ledger` object is the single writer of one ledger directory (it
holds the directory's lock for its lifetime). Writing is two steps so that
many appenders can share one sync:

* :meth:`Ledger.stage` assigns the next seq, chains and encodes the record
  (cheap, any thread, never blocks on I/O);
* :meth:`Ledger.commit` writes everything staged in as few writes as the
  limits allow and fdatasyncs; only then are those records durable,
  readable and acknowledged.

:class:`~naga_core.ledger.GroupCommitter` drives this from trio. Any OSError
while writing, syncing or sealing poisons the object (:class:`LedgerFailed`):
the page cache may have dropped what it could not write, so the only safe
continuation is to reopen, which recovers from what is really on disk.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from naga.constants import (
    GROUP_COMMIT_MAX_BYTES,
    GROUP_COMMIT_MAX_RECORDS,
    RECORD_HEADER_BYTES,
    SEGMENT_MAX_BYTES,
)
from naga_core.errors import (
    LedgerClosed,
    LedgerCorrupt,
    LedgerError,
    LedgerFailed,
    NotFound,
)
from naga_core.ledger._blobs import BlobStore
from naga_core.ledger._checkpoint import Checkpoint, CheckpointSigner
from naga_core.ledger._fs import FileHandle, FileSystem, OsFileSystem, sha256_file, write_atomic
from naga_core.ledger._merkle import (
    EMPTY_ROOT,
    CompactRange,
    Subtree,
    consistency_proof_of,
    inclusion_proof_of,
    node_hash,
    split_point,
    subtree_root,
)
from naga_core.ledger._record import (
    GENESIS_PREV,
    Entry,
    Frame,
    Record,
    check_frame,
    decode_body,
    encode_body,
    frame,
    leaf_hash_of,
)
from naga_core.ledger._recovery import RecoveryReport, SegmentState, recover
from naga_core.ledger._segment import (
    INDEX_SUFFIX,
    SEAL_SUFFIX,
    SEGMENT_SUFFIX,
    Seal,
    decode_index,
    encode_index,
    encode_seal,
    segment_stem,
)


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where an appended record sits: durable once its commit returned."""

    seq: int
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class Head:
    """The durable end of the ledger."""

    size: int
    last_leaf_hash: bytes
    root: bytes
    sealed_segments: int


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """Everything an offline RFC 9162 verifier needs, nothing else."""

    seq: int
    leaf_hash: bytes
    record_body: bytes
    tree_size: int
    root: bytes
    path: tuple[bytes, ...]
    checkpoint: str
    public_key: bytes
    key_name: str


@dataclass(slots=True)
class _Staged:
    seq: int
    body: bytes
    crc: int
    leaf: bytes


@dataclass(slots=True)
class _Active:
    first_seq: int
    path: str
    handle: FileHandle | None
    bytes: int
    offsets: array[int] = field(default_factory=lambda: array("Q"))


class Ledger:
    """A ledger directory opened for writing. Build with :meth:`open`."""

    def __init__(
        self,
        *,
        fs: FileSystem,
        directory: str,
        signer: CheckpointSigner,
        state: SegmentState,
        clock: Callable[[], int],
        segment_max_bytes: int,
        exit_stack: contextlib.ExitStack,
        report: RecoveryReport,
    ) -> None:
        self._fs = fs
        self._dir = directory
        self._seg_dir = os.path.join(directory, "segments")
        self._signer = signer
        self._seal_key = Ed25519PrivateKey.from_private_bytes(signer.private_bytes)
        self._clock = clock
        self._segment_max = segment_max_bytes
        self._exit = exit_stack
        self.report = report
        self._sealed: list[Seal] = list(state.seals)
        # Leaf hashes in memory for the unsealed tail only, from seq _base: a
        # sealed segment's offsets and leaves are read back from its index
        # (checked against its signed seal) when asked, a few kept, so the
        # memory held does not grow with the ledger.
        self._leaves = state.leaves
        self._base = self._sealed[-1].tree_size if self._sealed else 0
        self._firsts = [seal.first_seq for seal in self._sealed]
        self._indexes: OrderedDict[int, tuple[array[int], bytes]] = OrderedDict()
        self._index_lock = threading.Lock()
        self._frontier = state.frontier
        self._durable = state.size
        self._last_ts = state.last_timestamp_ns
        self._active: _Active | None = None
        if state.active_path is not None:
            self._active = _Active(
                first_seq=state.active_first_seq,
                path=state.active_path,
                handle=state.active_handle,
                bytes=state.active_bytes,
                offsets=state.active_offsets,
            )
        self._next_seq = state.size
        self._staged_prev = state.last_leaf
        self._pending: list[_Staged] = []
        # What the next commit waits for before it writes (commit_after).
        self._barriers: list[Future[Any]] = []
        # The frames of the last records committed, for the readers that
        # follow the head (Subscribe streams read each new record).
        self._recent: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()  # guards staging and the durable view
        self._commit_lock = threading.Lock()  # one committer at a time
        self._failed: LedgerFailed | None = None
        self._closed = False

    # --- opening --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        signer: CheckpointSigner,
        *,
        fs: FileSystem | None = None,
        blobs: BlobStore | None = None,
        clock: Callable[[], int] = time.time_ns,
        segment_max_bytes: int = SEGMENT_MAX_BYTES,
    ) -> Ledger:
        """Open (creating if new), recovering a torn tail and refusing damage.

        Raises :class:`LedgerCorrupt` naming the file, offset and problem
        for anything but a torn tail; ``ledger.report`` says what was cut.
        An I/O error while recovering raises :class:`LedgerFailed` (never a
        raw OSError); opening again redoes the recovery.
        """
        fs = fs if fs is not None else OsFileSystem()
        if segment_max_bytes < 4096:
            raise ValueError("segment_max_bytes must be at least 4096")
        stack = contextlib.ExitStack()
        try:
            state, report = recover(fs, directory, signer.verifier(), blobs, stack)
        except OSError as exc:
            stack.close()
            # Foreign errors are translated where they enter the core
            # (naga_core.errors): callers catch NagaError, and a raw OSError
            # would escape them (the CLI would print a traceback). Failing
            # half-way through recovery loses nothing: every step it takes
            # (debris removal, cutting a torn tail, syncs) is redone by the
            # next open.
            raise LedgerFailed(
                f"opening the ledger at {directory} failed: {exc}; open it again "
                "once the disk is healthy (recovery starts over)"
            ) from exc
        except BaseException:
            stack.close()
            raise
        return cls(
            fs=fs,
            directory=directory,
            signer=signer,
            state=state,
            clock=clock,
            segment_max_bytes=segment_max_bytes,
            exit_stack=stack,
            report=report,
        )

    def close(self) -> None:
        """Release the file handle and the directory lock. Staged, uncommitted
        records are dropped (they were never acknowledged)."""
        with self._commit_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            self._pending.clear()
            if self._active is not None and self._active.handle is not None:
                with contextlib.suppress(OSError):
                    self._active.handle.close()
            self._exit.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------

    def stage(self, entry: Entry) -> Receipt:
        """Give ``entry`` the next seq and chain it; durable after :meth:`commit`."""
        with self._lock:
            self._check_usable()
            seq = self._next_seq
            ts = max(self._clock(), self._last_ts)
            self._last_ts = ts
            body = encode_body(entry, seq, ts, self._staged_prev)
            leaf = leaf_hash_of(body)
            self._pending.append(_Staged(seq, body, zlib.crc32(body), leaf))
            self._next_seq = seq + 1
            self._staged_prev = leaf
            return Receipt(seq, leaf)

    def commit(self) -> int:
        """Make everything staged so far durable; returns the durable size."""
        with self._commit_lock:
            with self._lock:
                self._check_usable()
                batch, self._pending = self._pending, []
                barriers, self._barriers = self._barriers, []
            for done in barriers:
                # Registered before the records that depend on it were
                # staged, so taken with their batch (or an earlier one).
                exc = done.exception()
                if exc is not None:
                    raise self._fail_before(exc)
            if batch:
                try:
                    self._write(batch)
                except OSError as exc:
                    raise self._fail(exc) from exc
            return self._durable

    def commit_after(self, done: Future[Any]) -> None:
        """The next commit writes nothing until ``done`` has finished: call
        it before staging a record that needs ``done``'s work on disk first
        (a blob it references, stored by :meth:`BlobStore.put_soon`). If
        ``done`` failed, that commit fails the ledger instead (LedgerFailed:
        the records that depend on it are staged and cannot be taken back)."""
        with self._lock:
            self._check_usable()
            self._barriers.append(done)

    def writer_free_within(self, timeout_s: float) -> bool:
        """Whether the writer can start a commit within ``timeout_s``: False
        while one is stuck (a write or fdatasync that does not return), what
        the core's watchdog asks before each ping. Blocks up to the timeout:
        call it off the loop."""
        if not self._commit_lock.acquire(timeout=max(timeout_s, 0.0)):
            return False
        self._commit_lock.release()
        return True

    def append(self, kind: str, payload: bytes, blob_refs: Sequence[bytes] = ()) -> Receipt:
        """Stage and commit one record (one fdatasync)."""
        receipt = self.stage(Entry.of(kind, payload, blob_refs))
        self.commit()
        return receipt

    def append_many(self, entries: Sequence[Entry]) -> list[Receipt]:
        """Stage and commit several records with as few syncs as the limits allow."""
        receipts = [self.stage(e) for e in entries]
        self.commit()
        return receipts

    def _check_usable(self) -> None:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        if self._failed is not None:
            raise self._failed

    def _fail_before(self, exc: BaseException) -> LedgerFailed:
        with self._lock:
            failed = self._failed = LedgerFailed(
                f"a write the ledger's next records depend on failed ({exc}); nothing more is "
                "accepted until it is reopened"
            )
            self._pending.clear()
            self._barriers.clear()
            return failed

    def _fail(self, exc: OSError) -> LedgerFailed:
        with self._lock:
            failed = self._failed = LedgerFailed(
                f"ledger write failed ({exc}); nothing more is accepted until it is reopened "
                "(a failed sync is never retried: the data may already be gone)"
            )
            self._pending.clear()
            active = self._active
            if active is not None and active.handle is not None:
                # Cut the segment back to the acknowledged end, best effort.
                # After a failed fdatasync Linux keeps the unwritten pages in
                # the page cache, marked clean: a reopen in the same boot
                # would read this failed write's records although the disk
                # does not hold them, and acknowledge new records after
                # them; after a crash the log then shows damage followed by
                # valid records, which recovery must refuse. Truncating (and
                # syncing the truncation) makes cache and disk agree again.
                # This retries no write: it only drops unacknowledged bytes.
                with contextlib.suppress(OSError):
                    active.handle.truncate(active.bytes)
                    active.handle.sync()
                with contextlib.suppress(OSError):
                    active.handle.close()
                active.handle = None
            return failed

    def _write(self, batch: list[_Staged]) -> None:
        i = 0
        while i < len(batch):
            first_len = RECORD_HEADER_BYTES + len(batch[i].body)
            active = self._active
            if (
                active is not None
                and active.offsets
                and active.bytes + first_len > self._segment_max
            ):
                self._seal(active)
                active = None
            if active is None:
                active = self._start_segment(batch[i].seq)
            # Take as many records as fit this segment and one group's limits.
            j = i
            nbytes = 0
            while j < len(batch) and j - i < GROUP_COMMIT_MAX_RECORDS:
                size = RECORD_HEADER_BYTES + len(batch[j].body)
                if j > i and (
                    nbytes + size > GROUP_COMMIT_MAX_BYTES
                    or active.bytes + nbytes + size > self._segment_max
                ):
                    break
                nbytes += size
                j += 1
            chunk = batch[i:j]
            n = len(chunk)
            frames = [frame(s.body, s.crc, k, n) for k, s in enumerate(chunk)]
            assert active.handle is not None
            active.handle.write(b"".join(frames))
            active.handle.sync()
            self._publish(active, chunk, frames)
            i = j

    def _publish(self, active: _Active, chunk: list[_Staged], frames: list[bytes]) -> None:
        with self._lock:
            off = active.bytes
            for s, f in zip(chunk, frames, strict=True):
                active.offsets.append(off)
                off += RECORD_HEADER_BYTES + len(s.body)
                self._leaves += s.leaf
                if len(f) <= _RECENT_MAX_BYTES:
                    self._recent[s.seq] = f
            while len(self._recent) > _RECENT_KEPT:
                self._recent.popitem(last=False)
            active.bytes = off
            self._durable = chunk[-1].seq + 1

    def _start_segment(self, first_seq: int) -> _Active:
        path = os.path.join(self._seg_dir, segment_stem(first_seq) + SEGMENT_SUFFIX)
        handle = self._fs.open(path, "create_new")
        try:
            self._fs.sync_dir(self._seg_dir)
        except OSError:
            handle.close()
            raise
        active = _Active(first_seq=first_seq, path=path, handle=handle, bytes=0)
        with self._lock:
            self._active = active
        return active

    def _seal(self, active: _Active) -> None:
        stem = os.path.join(self._seg_dir, segment_stem(active.first_seq))
        count = len(active.offsets)
        tree_size = active.first_seq + count
        base = self._base
        leaves = bytes(self._leaves[32 * (active.first_seq - base) : 32 * (tree_size - base)])
        index = encode_index(active.offsets, leaves)
        write_atomic(self._fs, stem + INDEX_SUFFIX, index)
        prev = self._sealed[-1] if self._sealed else None
        prev_size = prev.tree_size if prev is not None else 0
        tree_root = self._tree().root()
        # The previous seal's compact range and this segment's leaves are
        # all the proof needs (never every leaf since seq 0).
        proof = consistency_proof_of(self._subtrees(raw=True), prev_size, tree_size)
        seal = Seal(
            segment=os.path.basename(active.path),
            first_seq=active.first_seq,
            count=count,
            bytes=active.bytes,
            segment_sha256=sha256_file(self._fs, active.path),
            index_sha256=_sha256(index),
            last_leaf_hash=leaves[-32:],
            tree_size=tree_size,
            frontier=self._tree().to_bytes(),
            root=tree_root,
            checkpoint=self._signer.sign(Checkpoint(self._signer.key_name, tree_size, tree_root)),
            prev_tree_size=prev_size,
            consistency=tuple(proof),
        )
        write_atomic(
            self._fs, stem + SEAL_SUFFIX, encode_seal(seal, self._seal_key.sign(seal.body()))
        )
        if active.handle is not None:
            active.handle.close()
        with self._lock:
            self._sealed.append(seal)
            self._firsts.append(seal.first_seq)
            self._tree()  # the frontier covers every sealed leaf before they go
            del self._leaves[: 32 * (tree_size - base)]
            self._base = tree_size
            self._active = None

    # --- reading -----------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of durable records; their seqs are 0 .. size-1."""
        return self._durable

    @property
    def next_seq(self) -> int:
        """The seq the next staged record will get."""
        with self._lock:
            return self._next_seq

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def signer(self) -> CheckpointSigner:
        return self._signer

    def head(self) -> Head:
        with self._lock:
            n = self._durable
            last = self._leaf(n - 1) if n else GENESIS_PREV
            return Head(n, last, self._tree().root(), len(self._sealed))

    def leaf_hash(self, seq: int) -> bytes:
        with self._lock:
            if not 0 <= seq < self._durable:
                raise NotFound(f"no record {seq}: the ledger has {self._durable} records")
            return self._leaf(seq)

    def _leaf(self, seq: int) -> bytes:
        """Under ``_lock``; ``seq`` durable."""
        if seq >= self._base:
            i = 32 * (seq - self._base)
            return bytes(self._leaves[i : i + 32])
        k = self._seal_of(seq)
        _offsets, leaves = self._index(k)
        i = 32 * (seq - self._sealed[k].first_seq)
        return leaves[i : i + 32]

    def _seal_of(self, seq: int) -> int:
        return bisect.bisect_right(self._firsts, seq) - 1

    def _index(self, k: int, *, raw: bool = False) -> tuple[array[int], bytes]:
        """Sealed segment ``k``'s offsets and leaves, read back from its index
        and checked against its seal (under ``_lock``, or the committer's;
        ``raw``: an I/O error raised as is, for the commit to fail on)."""
        with self._index_lock:  # the committer reads them without _lock (sealing)
            got = self._indexes.get(k)
            if got is not None:
                self._indexes.move_to_end(k)
                return got
        seal = self._sealed[k]
        path = os.path.join(self._seg_dir, segment_stem(seal.first_seq) + INDEX_SUFFIX)
        try:
            data = self._fs.read(path)
        except OSError as exc:
            if raw:
                raise
            raise LedgerError(f"reading the index {path}: {exc}") from exc
        if _sha256(data) != seal.index_sha256:
            raise LedgerCorrupt(path, None, "index does not match its seal (changed since open)")
        try:
            got = decode_index(data)
        except ValueError as exc:
            raise LedgerCorrupt(path, None, str(exc)) from None
        with self._index_lock:
            self._indexes[k] = got
            if len(self._indexes) > _INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return got

    def _locate(self, seq: int) -> tuple[str, int]:
        with self._lock:
            if not 0 <= seq < self._durable:
                raise NotFound(f"no record {seq}: the ledger has {self._durable} records")
            k = self._seal_of(seq)
            if k >= 0 and seq < self._sealed[k].tree_size:
                seal = self._sealed[k]
                path = os.path.join(self._seg_dir, seal.segment)
                return path, self._index(k)[0][seq - seal.first_seq]
            active = self._active
            assert active is not None
            return active.path, active.offsets[seq - active.first_seq]

    def read(self, seq: int) -> Record:
        """The durable record ``seq``, checked against its frame and leaf hash."""
        path, offset = self._locate(seq)
        with self._lock:
            recent = self._recent.get(seq)
        if recent is not None:
            # Just written: the frame as it went to disk, read back by every
            # stream that follows the head (no two opens of the segment each).
            return self._decode_checked(path, offset, memoryview(recent), 0, seq)
        try:
            head = self._fs.read(path, offset, RECORD_HEADER_BYTES)
            n = int.from_bytes(head[8:12], "big") if len(head) == RECORD_HEADER_BYTES else 0
            data = head + self._fs.read(path, offset + RECORD_HEADER_BYTES, n)
        except OSError as exc:
            raise LedgerError(f"reading record {seq} from {path}: {exc}") from exc
        return self._decode_checked(path, offset, memoryview(data), 0, seq)

    def iter_records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[Record]:
        """Durable records ``from_seq`` .. ``to_seq - 1`` (default: the end
        as of this call), read segment by segment and checked."""
        end = self._durable if to_seq is None else min(to_seq, self._durable)
        seq = max(from_seq, 0)
        while seq < end:
            path, _ = self._locate(seq)
            try:
                data = memoryview(self._fs.read(path))
            except OSError as exc:
                raise LedgerError(f"reading records from {path}: {exc}") from exc
            while seq < end:
                p, offset = self._locate(seq)
                if p != path:
                    break
                yield self._decode_checked(path, offset, data, offset, seq)
                seq += 1

    def _decode_checked(
        self, path: str, offset: int, data: memoryview, at: int, seq: int
    ) -> Record:
        got = check_frame(data, at)
        if not isinstance(got, Frame):
            raise LedgerCorrupt(path, offset, f"record {seq} unreadable: {got.reason}")
        body = bytes(got.body)
        leaf = leaf_hash_of(body)
        if got.seq != seq or leaf != self.leaf_hash(seq):
            raise LedgerCorrupt(path, offset, f"record {seq} changed since it was written")
        return decode_body(body, leaf)

    # --- proofs ---------------------------------------------------------------

    def _tree(self) -> CompactRange:
        """The Merkle frontier of the durable records, brought up to date.

        Kept off the acknowledgement path: leaves are hashed into the
        frontier only when a root is needed (sealing, checkpoints, proofs).
        Callers hold ``_lock`` or are the committer.
        """
        frontier = self._frontier
        buf = self._leaves
        base = 32 * self._base  # the frontier never lags behind the last seal
        for i in range(32 * frontier.size, 32 * self._durable, 32):
            frontier.append(bytes(buf[i - base : i - base + 32]))
        return frontier

    def _subtrees(self, *, raw: bool = False) -> Subtree:
        """MTH(D[lo:hi]) of durable records, for the proofs: a perfect subtree
        that a seal's compact range (or the current one) holds is taken from
        it, a range inside one segment is hashed from its leaves (a sealed
        one's read back from its index), anything else is split by the RFC's
        rule. So a proof of any size holds one segment's leaves at a time,
        never the whole ledger's (under ``_lock``, or the committer's)."""
        sealed, current = self._sealed, self._tree()

        def known(lo: int, hi: int) -> bytes | None:
            """MTH(D[lo:hi]) if a seal or the head stores it, else None."""
            k = bisect.bisect_left(sealed, hi, key=lambda seal: seal.tree_size)
            if lo == 0 and k < len(sealed) and sealed[k].tree_size == hi:
                return sealed[k].root
            w = hi - lo
            if w & (w - 1) or lo % (2 * w):
                return None  # no compact range holds it
            # A compact range of size T holds [lo, lo + w) (w a power of two)
            # iff T's bits above w's are lo's and w's is set: lo is a multiple
            # of 2w and hi <= T < hi + w.
            for size, frontier in (
                *((s.tree_size, s.frontier) for s in sealed[k : k + 1]),
                (current.size, None),
            ):
                if hi <= size < hi + w:
                    hashes = (
                        current.hashes
                        if frontier is None
                        else CompactRange.from_bytes(frontier).hashes
                    )
                    return hashes[(size >> w.bit_length()).bit_count()]
            return None

        def leaves(lo: int, hi: int) -> list[bytes] | None:
            """The leaves [lo, hi) if they lie in one segment, else None."""
            if lo >= self._base:
                buf, at = self._leaves, 32 * (lo - self._base)
                return [bytes(buf[i : i + 32]) for i in range(at, at + 32 * (hi - lo), 32)]
            k = self._seal_of(lo)
            seal = self._sealed[k]
            if hi > seal.tree_size:
                return None
            got, at = self._index(k, raw=raw)[1], 32 * (lo - seal.first_seq)
            return [got[i : i + 32] for i in range(at, at + 32 * (hi - lo), 32)]

        def mth(lo: int, hi: int) -> bytes:
            got = known(lo, hi)
            if got is not None:
                return got
            part = leaves(lo, hi)
            if part is not None:
                return subtree_root(part, 0, hi - lo)
            k = split_point(hi - lo)
            return node_hash(mth(lo, lo + k), mth(lo + k, hi))

        return mth

    def root_at(self, size: int) -> bytes:
        with self._lock:
            if not 0 <= size <= self._durable:
                raise NotFound(f"tree size {size} is beyond the ledger's {self._durable} records")
            if size == self._durable:
                return self._tree().root()
            return self._subtrees()(0, size) if size else EMPTY_ROOT

    def checkpoint(self, size: int | None = None) -> str:
        """A signed checkpoint (C2SP signed note) of the tree at ``size``."""
        n = self._durable if size is None else size
        return self._signer.sign(Checkpoint(self._signer.key_name, n, self.root_at(n)))

    def prove_inclusion(self, seq: int, tree_size: int | None = None) -> InclusionProof:
        n = self._durable if tree_size is None else tree_size
        if not 0 <= seq < n <= self._durable:
            raise NotFound(f"no inclusion proof for record {seq} in a tree of {n} records")
        record = self.read(seq)
        tree_root = self.root_at(n)
        with self._lock:
            path = inclusion_proof_of(self._subtrees(), seq, n)
        return InclusionProof(
            seq=seq,
            leaf_hash=record.leaf_hash,
            record_body=record.body,
            tree_size=n,
            root=tree_root,
            path=tuple(path),
            checkpoint=self._signer.sign(Checkpoint(self._signer.key_name, n, tree_root)),
            public_key=self._signer.public_key,
            key_name=self._signer.key_name,
        )

    def prove_consistency(self, old_size: int, new_size: int) -> list[bytes]:
        if not 0 <= old_size <= new_size <= self._durable:
            raise NotFound(
                f"no consistency proof from {old_size} to {new_size} "
                f"(the ledger has {self._durable} records)"
            )
        with self._lock:
            return consistency_proof_of(self._subtrees(), old_size, new_size)

    def seals(self) -> list[Seal]:
        with self._lock:
            return list(self._sealed)


#: Sealed segments' indexes kept read back (about 1.8 MB each at 8 MB segments).
_INDEXES_KEPT = 2
#: Frames of the latest records kept in memory for Ledger.read, and the
#: largest one kept.
_RECENT_KEPT = 128
_RECENT_MAX_BYTES = 16 * 1024


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


__all__ = ["Head", "InclusionProof", "Ledger", "LedgerError", "Receipt"]
