"""The ledger's read path: records and leaf hashes by seq.

The unsealed tail's leaves are in memory; a sealed segment's offsets and
leaves are read back from its index, checked against its signed seal, and a
few kept (the index cache), so reading does not hold the whole ledger.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Callable, Iterator

from naga.constants import RECORD_HEADER_BYTES
from naga_core.errors import LedgerCorrupt, LedgerError, NotFound
from naga_core.ledger._fs import sha256_file
from naga_core.ledger._ledger_state import LedgerState, sha256_digest
from naga_core.ledger._record import Frame, Record, check_frame, decode_body, leaf_hash_of
from naga_core.ledger._segment import INDEX_SUFFIX, Seal, decode_index, segment_stem

#: Read by the core's rehash while it serves: a chunk glibc keeps in a
#: thread's arena once freed, so a small one (4 MB ones raised the core's
#: RSS by about 5 MB at 1M records, ADR 0057).
_REHASH_CHUNK = 256 << 10


class LedgerReader(LedgerState):
    """Reading durable records, checked against their frames and leaf hashes."""

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
        if sha256_digest(data) != seal.index_sha256:
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

    def check_sealed(self) -> list[LedgerCorrupt]:
        """Every sealed segment and index rehashed against its seal (what an
        open with ``check_contents=False`` left out): the damage found, one
        error a file (:meth:`check_seal` of each)."""
        with self._lock:
            sealed = list(self._sealed)
        return [bad for seal in sealed for bad in self.check_seal(seal)]

    def check_seal(
        self, seal: Seal, *, chunk: int = _REHASH_CHUNK, pace: Callable[[int], None] | None = None
    ) -> list[LedgerCorrupt]:
        """One sealed segment and its index (``seal``, one of the ledger's
        seals) rehashed against the seal: the damage found, one error a
        file. Reads in ``chunk``-byte parts without the ledger's lock (a
        sealed segment never changes), calling ``pace(n)`` before each part
        of ``n`` bytes (the core's rehash waits, yields or stops there); an
        I/O error is raised as LedgerError."""
        stem = os.path.join(self._seg_dir, segment_stem(seal.first_seq))
        log_path, idx_path = os.path.join(self._seg_dir, seal.segment), stem + INDEX_SUFFIX
        try:
            log_sha = sha256_file(self._fs, log_path, chunk, length=seal.bytes, pace=pace)
            idx_sha = sha256_file(self._fs, idx_path, chunk, pace=pace)
        except OSError as exc:
            raise LedgerError(f"rehashing the sealed segment {log_path}: {exc}") from exc
        found: list[LedgerCorrupt] = []
        if log_sha != seal.segment_sha256:
            found.append(
                LedgerCorrupt(log_path, None, "sealed segment content does not match its seal")
            )
        if idx_sha != seal.index_sha256:
            found.append(LedgerCorrupt(idx_path, None, "index does not match its seal"))
        return found

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


#: Sealed segments' indexes kept read back (about 1.8 MB each at 8 MB segments).
_INDEXES_KEPT = 2
