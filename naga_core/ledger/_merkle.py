"""RFC 9162 Merkle tree hashing, proofs and the compact range.

Everything here is pure and works on *leaf hashes*: callers hash a record once
with :func:`leaf_hash`, keep the 32-byte result, and hand lists of those to
:func:`root`, :func:`inclusion_proof` and :func:`consistency_proof`.

Builders (``root``, ``*_proof``, :class:`CompactRange`) raise ``ValueError``
on bad arguments: that is a caller bug. Verifiers (``verify_*``) raise
:class:`~naga_core.errors.ProofError` on anything wrong, arguments included,
because their inputs usually come from somewhere untrusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final

from naga_core.errors import ProofError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "Subtree",
    "consistency_proof",
    "consistency_proof_of",
    "inclusion_proof",
    "inclusion_proof_of",
    "leaf_hash",
    "node_hash",
    "root",
    "split_point",
    "subtree_root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final = 32
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()

# Tree sizes are serialised as u64 (CompactRange.to_bytes, checkpoints).
_MAX_SIZE: Final = 1 << 64
_SIZE_BYTES: Final = 8

_sha256 = hashlib.sha256


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data): the hash of one log entry."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    _require_hash(left, "left child")
    _require_hash(right, "right child")
    return _sha256(b"\x01" + left + right).digest()


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH over already leaf-hashed entries; ``EMPTY_ROOT`` for none."""
    _require_leaves(leaves, len(leaves))
    if not leaves:
        return EMPTY_ROOT
    return _subtree(leaves, 0, len(leaves))


#: MTH(D[lo:hi]) for 0 <= lo < hi <= size, however the caller gets it (from
#: a list of leaves, or from stored subtree roots and leaves read back a part
#: at a time: the ledger's way, so that a proof never holds every leaf).
Subtree = Callable[[int, int], bytes]


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 2.1.3.1, leaf-to-root order."""
    _require_size(leaves, size)
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    _require_leaves(leaves, size)
    return inclusion_proof_of(lambda lo, hi: _subtree(leaves, lo, hi), index, size)


def inclusion_proof_of(subtree: Subtree, index: int, size: int) -> list[bytes]:
    """:func:`inclusion_proof` with the subtree roots from ``subtree``."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    # Walk down from the root; the sibling at each level is a subtree disjoint
    # from every other one taken, so the whole proof costs O(size) hashes.
    proof: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            proof.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(lo, lo + k))
            lo += k
    proof.reverse()
    return proof


def consistency_proof(leaves: Sequence[bytes], old_size: int, new_size: int) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) of RFC 9162 2.1.4.1.

    Empty when ``old_size`` is 0 or equal to ``new_size``: those are proven by
    the roots alone.
    """
    _require_size(leaves, new_size)
    if not 0 <= old_size <= new_size:
        raise ValueError(f"old size {old_size} is not in [0, {new_size}]")
    _require_leaves(leaves, new_size)
    return consistency_proof_of(lambda lo, hi: _subtree(leaves, lo, hi), old_size, new_size)


def consistency_proof_of(subtree: Subtree, old_size: int, new_size: int) -> list[bytes]:
    """:func:`consistency_proof` with the subtree roots from ``subtree``.

    Every subtree it asks for lies wholly below ``old_size`` (then it is one
    of the perfect subtrees the old tree's compact range holds, or part of
    one) or wholly at or above it, so a log that keeps the compact range of
    the old size needs only the leaves added since.
    """
    if not 0 <= old_size <= new_size:
        raise ValueError(f"old size {old_size} is not in [0, {new_size}]")
    if old_size in (0, new_size):
        return []
    # SUBPROOF(m, D[lo:hi], complete) unrolled: each step appends its MTH
    # *after* the recursive part, so collect top-down and reverse at the end.
    proof: list[bytes] = []
    lo, hi, complete = 0, new_size, True
    while old_size != hi:
        k = _split(hi - lo)
        if old_size - lo <= k:
            proof.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(lo, lo + k))
            lo += k
            complete = False
    if not complete:
        proof.append(subtree(lo, hi))
    proof.reverse()
    return proof


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root_hash: bytes
) -> None:
    """Check that ``leaf`` is entry ``index`` of the tree ``root_hash`` of ``size``.

    RFC 9162 2.1.3.2. Raises :class:`ProofError` naming what is wrong.
    """
    _check_hash(leaf, "leaf hash")
    _check_hash(root_hash, "root hash")
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    # The exact length follows from (index, size); checking it up front gives
    # a precise message and keeps padded or truncated proofs out of the loop.
    inner = (index ^ (size - 1)).bit_length()
    expected = inner + (index >> inner).bit_count()
    if len(proof) != expected:
        raise ProofError(
            f"inclusion proof for leaf {index} of tree size {size} has "
            f"{len(proof)} hashes, expected {expected}"
        )
    _check_proof_hashes(proof)

    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = _sha256(b"\x01" + p + r).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the path to the root")
    if r != root_hash:
        raise ProofError(
            f"inclusion proof for leaf {index} of tree size {size} does not lead to the root hash"
        )


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree ``old_root`` of ``old_size`` is a prefix of ``new_root``.

    RFC 9162 2.1.4.2, plus the cases it leaves out: a size-0 old tree must
    have the empty root, equal sizes must have equal roots, and both take an
    empty proof. Raises :class:`ProofError` naming what is wrong.
    """
    _check_hash(old_root, "old root hash")
    _check_hash(new_root, "new root hash")
    if old_size < 0 or new_size < 0:
        raise ProofError(f"negative tree size in consistency proof {old_size} -> {new_size}")
    if old_size > new_size:
        raise ProofError(f"old tree size {old_size} is larger than new tree size {new_size}")
    if old_size in (0, new_size):
        if proof:
            raise ProofError(
                f"consistency proof {old_size} -> {new_size} must be empty, has {len(proof)} hashes"
            )
        if old_size == 0 and old_root != EMPTY_ROOT:
            raise ProofError("old root hash is not the root of the empty tree")
        if old_size == new_size and old_root != new_root:
            raise ProofError(f"root hashes differ for the same tree size {old_size}")
        return

    # Length from the same decomposition transparency-dev/merkle uses: the
    # inclusion path of leaf old_size-1, minus the levels below the largest
    # perfect subtree ending at old_size, plus that subtree's hash itself
    # unless it is the whole old tree (then old_root stands in for it).
    inner = ((old_size - 1) ^ (new_size - 1)).bit_length()
    border = ((old_size - 1) >> inner).bit_count()
    shift = (old_size & -old_size).bit_length() - 1
    old_is_perfect = old_size == 1 << shift
    expected = inner - shift + border + (0 if old_is_perfect else 1)
    if len(proof) != expected:
        raise ProofError(
            f"consistency proof {old_size} -> {new_size} has {len(proof)} hashes, "
            f"expected {expected}"
        )
    _check_proof_hashes(proof)

    path = [old_root, *proof] if old_is_perfect else list(proof)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            fr = _sha256(b"\x01" + c + fr).digest()
            sr = _sha256(b"\x01" + c + sr).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = _sha256(b"\x01" + sr + c).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than the path to the root")
    if fr != old_root:
        raise ProofError(
            f"consistency proof {old_size} -> {new_size} does not lead to the old root hash"
        )
    if sr != new_root:
        raise ProofError(
            f"consistency proof {old_size} -> {new_size} does not lead to the new root hash"
        )


class CompactRange:
    """The roots of the perfect subtrees covering leaves [0, size).

    That is all a log needs to keep in memory to append in O(log n) and to
    compute its root: one hash per set bit of ``size``, largest subtree
    first.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @classmethod
    def from_parts(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """Rebuild from a stored size and its subtree roots."""
        if not 0 <= size < _MAX_SIZE:
            raise ValueError(f"compact range size {size} does not fit in a u64")
        if len(hashes) != size.bit_count():
            raise ValueError(
                f"compact range of size {size} needs {size.bit_count()} hashes, got {len(hashes)}"
            )
        for i, h in enumerate(hashes):
            _require_hash(h, f"compact range hash {i}")
        cr = cls()
        cr._size = size
        cr._hashes = [bytes(h) for h in hashes]
        return cr

    @property
    def size(self) -> int:
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        return tuple(self._hashes)

    def append(self, leaf_hash: bytes) -> None:
        """Add one leaf hash; merges one subtree per trailing 1 bit of size."""
        _require_hash(leaf_hash, "leaf hash")
        if self._size == _MAX_SIZE - 1:
            raise ValueError("compact range is full (size would overflow a u64)")
        hashes = self._hashes
        h = bytes(leaf_hash)
        s = self._size
        while s & 1:
            h = _sha256(b"\x01" + hashes.pop() + h).digest()
            s >>= 1
        hashes.append(h)
        self._size += 1

    def root(self) -> bytes:
        """MTH of everything appended; ``EMPTY_ROOT`` when empty."""
        hashes = self._hashes
        if not hashes:
            return EMPTY_ROOT
        # The right edge of an RFC 9162 tree is the smaller subtrees folded
        # right to left, so fold from the smallest.
        r = hashes[-1]
        for h in reversed(hashes[:-1]):
            r = _sha256(b"\x01" + h + r).digest()
        return r

    def copy(self) -> CompactRange:
        cr = CompactRange()
        cr._size = self._size
        cr._hashes = list(self._hashes)
        return cr

    def to_bytes(self) -> bytes:
        """u64 big-endian size, then the hashes, largest subtree first."""
        return self._size.to_bytes(_SIZE_BYTES, "big") + b"".join(self._hashes)

    @classmethod
    def from_bytes(cls, data: bytes) -> CompactRange:
        """Inverse of :meth:`to_bytes`; ``ValueError`` on any malformed input."""
        if len(data) < _SIZE_BYTES:
            raise ValueError(f"compact range encoding is {len(data)} bytes, shorter than a u64")
        size = int.from_bytes(data[:_SIZE_BYTES], "big")
        body = data[_SIZE_BYTES:]
        count = size.bit_count()
        if len(body) != count * HASH_SIZE:
            raise ValueError(
                f"compact range of size {size} needs {count * HASH_SIZE} hash bytes, "
                f"got {len(body)}"
            )
        hashes = [bytes(body[i : i + HASH_SIZE]) for i in range(0, len(body), HASH_SIZE)]
        return cls.from_parts(size, hashes)

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, root={self.root().hex()})"


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def split_point(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2): where RFC
    9162 splits a subtree of ``n`` leaves."""
    return _split(n)


def subtree_root(leaves: Sequence[bytes], lo: int, hi: int) -> bytes:
    """MTH(leaves[lo:hi]) for lo < hi."""
    return _subtree(leaves, lo, hi)


def _subtree(leaves: Sequence[bytes], lo: int, hi: int) -> bytes:
    """MTH(leaves[lo:hi]) for lo < hi, bottom up.

    Pairing neighbours level by level and carrying an odd last node up
    unchanged builds exactly the RFC's largest-power-of-two split, without
    recursion.
    """
    level = list(leaves[lo:hi])
    while len(level) > 1:
        paired = [
            _sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)
        ]
        if len(level) & 1:
            paired.append(level[-1])
        level = paired
    return level[0]


def _require_hash(h: bytes, what: str) -> None:
    if len(h) != HASH_SIZE:
        raise ValueError(f"{what} is {len(h)} bytes, not {HASH_SIZE}")


def _require_size(leaves: Sequence[bytes], size: int) -> None:
    if not 0 <= size <= len(leaves):
        raise ValueError(f"tree size {size} is outside [0, {len(leaves)}] (the leaves given)")


def _require_leaves(leaves: Sequence[bytes], size: int) -> None:
    for i in range(size):
        if len(leaves[i]) != HASH_SIZE:
            raise ValueError(f"leaf hash {i} is {len(leaves[i])} bytes, not {HASH_SIZE}")


def _check_hash(h: bytes, what: str) -> None:
    if len(h) != HASH_SIZE:
        raise ProofError(f"{what} is {len(h)} bytes, not {HASH_SIZE}")


def _check_proof_hashes(proof: Sequence[bytes]) -> None:
    for i, p in enumerate(proof):
        if len(p) != HASH_SIZE:
            raise ProofError(f"proof hash {i} is {len(p)} bytes, not {HASH_SIZE}")
