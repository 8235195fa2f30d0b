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

The class is cut by concern so that no module grows past a few hundred
lines: its fields in ``_ledger_state``, the read path and index cache in
``_ledger_read``, the Merkle frontier and proofs in ``_ledger_proofs``, the
write path and sealing in ``_ledger_write``, each layer a base of the next;
this module opens and closes it and says where its durable end is.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from naga.constants import SEGMENT_MAX_BYTES
from naga_core.errors import LedgerError, LedgerFailed
from naga_core.ledger._blobs import BlobStore
from naga_core.ledger._checkpoint import CheckpointSigner
from naga_core.ledger._fs import FileSystem, OsFileSystem
from naga_core.ledger._ledger_state import Head, InclusionProof, Receipt
from naga_core.ledger._ledger_write import LedgerWriter
from naga_core.ledger._record import GENESIS_PREV
from naga_core.ledger._recovery import recover
from naga_core.ledger._segment import Seal


class Ledger(LedgerWriter):
    """A ledger directory opened for writing. Build with :meth:`open`."""

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
        check_contents: bool = True,
    ) -> Ledger:
        """Open (creating if new), recovering a torn tail and refusing damage.

        ``check_contents=False`` (the core's start, ADR 0057): sealed
        segments and their indexes are not hashed at the open (their signed
        seals, sizes, last index entries and links are checked); a record
        read later is still checked against its leaf hash and its index
        against the seal, and :meth:`check_sealed` rehashes them all.

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
            state, report = recover(
                fs, directory, signer.verifier(), blobs, stack, contents=check_contents
            )
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

    def seals(self) -> list[Seal]:
        with self._lock:
            return list(self._sealed)


__all__ = ["Head", "InclusionProof", "Ledger", "LedgerError", "Receipt"]
