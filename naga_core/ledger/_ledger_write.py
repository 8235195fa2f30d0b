"""The ledger's write path: staging, group commit, failure and sealing.

:meth:`stage` is cheap and never blocks on I/O; :meth:`commit` writes what is
staged in as few writes as the limits allow and fdatasyncs, and a full
segment is sealed on the way (its index, consistency proof and signed seal).
Any OSError here poisons the ledger (:class:`LedgerFailed`).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from naga.constants import (
    GROUP_COMMIT_MAX_BYTES,
    GROUP_COMMIT_MAX_RECORDS,
    RECORD_HEADER_BYTES,
)
from naga_core.errors import LedgerClosed, LedgerFailed
from naga_core.ledger._checkpoint import Checkpoint
from naga_core.ledger._fs import sha256_file, write_atomic
from naga_core.ledger._ledger_proofs import LedgerProver
from naga_core.ledger._ledger_state import Active, Receipt, Staged, sha256_digest
from naga_core.ledger._merkle import consistency_proof_of
from naga_core.ledger._record import Entry, encode_body, frame, leaf_hash_of
from naga_core.ledger._segment import (
    INDEX_SUFFIX,
    SEAL_SUFFIX,
    SEGMENT_SUFFIX,
    Seal,
    encode_index,
    encode_seal,
    segment_stem,
)


class LedgerWriter(LedgerProver):
    """Appending: stage, commit (group commit), fail closed, seal."""

    def stage(self, entry: Entry) -> Receipt:
        """Give ``entry`` the next seq and chain it; durable after :meth:`commit`."""
        with self._lock:
            self._check_usable()
            seq = self._next_seq
            ts = max(self._clock(), self._last_ts)
            self._last_ts = ts
            body = encode_body(entry, seq, ts, self._staged_prev)
            leaf = leaf_hash_of(body)
            self._pending.append(Staged(seq, body, zlib.crc32(body), leaf))
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

    def _write(self, batch: list[Staged]) -> None:
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

    def _publish(self, active: Active, chunk: list[Staged], frames: list[bytes]) -> None:
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

    def _start_segment(self, first_seq: int) -> Active:
        path = os.path.join(self._seg_dir, segment_stem(first_seq) + SEGMENT_SUFFIX)
        handle = self._fs.open(path, "create_new")
        try:
            self._fs.sync_dir(self._seg_dir)
        except OSError:
            handle.close()
            raise
        active = Active(first_seq=first_seq, path=path, handle=handle, bytes=0)
        with self._lock:
            self._active = active
        return active

    def _seal(self, active: Active) -> None:
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
            index_sha256=sha256_digest(index),
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


#: Frames of the latest records kept in memory for Ledger.read, and the
#: largest one kept.
_RECENT_KEPT = 128
_RECENT_MAX_BYTES = 16 * 1024
