"""The ledger's Merkle frontier and proofs (RFC 9162).

The frontier of the durable records is brought up to date only when a root
is needed; proofs of any size are built from the seals' compact ranges and
one segment's leaves at a time, never the whole ledger's.
"""

from __future__ import annotations

import bisect

from naga_core.errors import NotFound
from naga_core.ledger._checkpoint import Checkpoint
from naga_core.ledger._ledger_read import LedgerReader
from naga_core.ledger._ledger_state import InclusionProof
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


class LedgerProver(LedgerReader):
    """Roots, checkpoints and inclusion and consistency proofs."""

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
