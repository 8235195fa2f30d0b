"""Every valid Merkle proof up to 256 leaves verifies, and its mutants do not.

For every (index, size) and every (old, new) with sizes up to 256, the proof
the builder returns must verify, and every mutant (other index, other size,
flipped bits, dropped/added/swapped hashes, wrong or swapped roots) must be
rejected with ProofError.

One class of mutant cannot always be rejected, by design of RFC 9162: a root
does not commit to the tree size, so a size mutant whose verification walks
exactly the same hash computation as the original reproduces the original
root. Leaf 0 of trees of size 5, 6, 7 and 8 all have a proof of three right
siblings, for example. Such a mutant only fails if the verifier is given the
root *for the mutated size*, which these tests also do. When a size mutant
with the original root is accepted, an independent transcription of the RFC
(below) must accept it too, or the test fails. This is why checkpoints sign
the size together with the root.

Bits flipped: every bit of every proof hash for trees up to 64 leaves; above
that, one proof hash per proof (its position rotates) with one bit in each of
its 32 bytes (the bit rotates), plus a few bits of the leaf and the roots.
``NAGA_MERKLE_EXHAUSTIVE=1`` flips every bit of every hash, leaf and root for
all sizes (minutes). ``NAGA_TEST_SEED`` fixes the random choices; the seed is
in every failure message.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Final, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.errors import ProofError
from naga_core.ledger._merkle import (
    EMPTY_ROOT,
    CompactRange,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from tests.seeds import pick_seed

T = TypeVar("T")

MAX_SIZE: Final = 256
ALL_BITS_UP_TO: Final = 64
EXHAUSTIVE: Final = os.environ.get("NAGA_MERKLE_EXHAUSTIVE") == "1"


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# --- an independent transcription of RFC 9162 section 2.1 -------------------
# Deliberately naive: recursion exactly as the RFC writes it, generic over
# what a "subtree hash" is, so the same code yields concrete proofs and the
# (lo, hi) ranges each proof element stands for.


def _ref_k(n: int) -> int:
    """The largest power of two smaller than n (n > 1): k < n <= 2k."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_path(m: int, lo: int, hi: int, mth: Callable[[int, int], T]) -> list[T]:
    """PATH(m, D[lo:hi]), RFC 9162 2.1.3.1; ``m`` relative to ``lo``."""
    n = hi - lo
    if n == 1:
        return []
    k = _ref_k(n)
    if m < k:
        return [*ref_path(m, lo, lo + k, mth), mth(lo + k, hi)]
    return [*ref_path(m - k, lo + k, hi, mth), mth(lo, lo + k)]


def ref_subproof(m: int, lo: int, hi: int, b: bool, mth: Callable[[int, int], T]) -> list[T]:
    """SUBPROOF(m, D[lo:hi], b), RFC 9162 2.1.4.1; ``m`` relative to ``lo``."""
    n = hi - lo
    if m == n:
        return [] if b else [mth(lo, hi)]
    k = _ref_k(n)
    if m <= k:
        return [*ref_subproof(m, lo, lo + k, b, mth), mth(lo + k, hi)]
    return [*ref_subproof(m - k, lo + k, hi, False, mth), mth(lo, lo + k)]


def ref_proof(m: int, n: int, mth: Callable[[int, int], T]) -> list[T]:
    """PROOF(m, D[n]); the RFC defines it for 0 < m < n only."""
    return ref_subproof(m, 0, n, True, mth) if 0 < m < n else []


def _span(lo: int, hi: int) -> tuple[int, int]:
    return (lo, hi)


class RefTree:
    """MTH over a fixed list of leaf hashes, RFC 9162 2.1.1, memoised."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        self._leaves = leaf_hashes
        self._memo: dict[tuple[int, int], bytes] = {}

    def mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n == 0:
            return _sha256(b"")
        if n == 1:
            return self._leaves[lo]
        got = self._memo.get((lo, hi))
        if got is None:
            k = _ref_k(n)
            got = _sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi))
            self._memo[(lo, hi)] = got
        return got


def _ref_rebuild(lo: int, hi: int, known: dict[tuple[int, int], bytes]) -> bytes | None:
    """MTH(D[lo:hi]) from the subtree hashes in ``known``, if they suffice."""
    if (lo, hi) in known:
        return known[(lo, hi)]
    if hi - lo < 2:
        return None
    k = _ref_k(hi - lo)
    left, right = _ref_rebuild(lo, lo + k, known), _ref_rebuild(lo + k, hi, known)
    if left is None or right is None:
        return None
    return _sha256(b"\x01" + left + right)


def ref_accepts_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root_hash: bytes
) -> bool:
    """Would a proof in the RFC's PATH shape for (index, size) rebuild root_hash?"""
    if not 0 <= index < size:
        return False
    spans = ref_path(index, 0, size, _span)
    if len(spans) != len(proof):
        return False
    known = dict(zip(spans, proof, strict=True))
    known[(index, index + 1)] = leaf
    return _ref_rebuild(0, size, known) == root_hash


def ref_accepts_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Would a proof in the RFC's PROOF shape for (old, new) rebuild both roots?"""
    if not 0 <= old <= new:
        return False
    if old == 0:
        return not proof and old_root == EMPTY_ROOT and (new > 0 or new_root == EMPTY_ROOT)
    if old == new:
        return not proof and old_root == new_root
    spans = ref_proof(old, new, _span)
    if len(spans) != len(proof):
        return False
    known = dict(zip(spans, proof, strict=True))
    # When [0, old) is itself a node of the new tree the RFC leaves it out of
    # the proof: the verifier already has it, as old_root.
    rebuilt_old = old_root if old & (old - 1) == 0 else _ref_rebuild(0, old, known)
    return (
        rebuilt_old == old_root and _ref_rebuild(0, new, {**known, (0, old): old_root}) == new_root
    )


# --- the tree every sweep works on ------------------------------------------
# Leaf hashes computed with hashlib, not leaf_hash(), so a broken leaf_hash
# cannot make both sides agree; roots from the reference, not from root().
LEAVES: Final = tuple(_sha256(b"\x00" + b"leaf %d" % i) for i in range(MAX_SIZE + 2))


def _reference_roots() -> tuple[bytes, ...]:
    ref = RefTree(LEAVES)
    return tuple(ref.mth(0, n) for n in range(MAX_SIZE + 2))


ROOTS: Final = _reference_roots()


def _flip(h: bytes, bit: int) -> bytes:
    return (int.from_bytes(h, "big") ^ (1 << bit)).to_bytes(len(h), "big")


def _spread_bits(rotation: int, count: int) -> list[int]:
    """``count`` bits in distinct bytes, spread over 32 bytes, rotating."""
    step = 32 // count
    return [8 * ((rotation + j * step) % 32) + (rotation + j) % 8 for j in range(count)]


def _proof_bit_plan(size: int, length: int, rotation: int) -> Iterable[tuple[int, Iterable[int]]]:
    """Which (proof position, bits) to flip for one proof."""
    if EXHAUSTIVE or size <= ALL_BITS_UP_TO:
        return [(pos, range(256)) for pos in range(length)]
    if length == 0:
        return []
    return [(rotation % length, _spread_bits(rotation, 32))]


def _edge_bits(size: int, rotation: int) -> Iterable[int]:
    """Which bits of the leaf / roots to flip for one proof."""
    if EXHAUSTIVE:
        return range(256)
    return _spread_bits(rotation, 32 if size <= ALL_BITS_UP_TO else 4)


def _random_hash(rng: random.Random) -> bytes:
    return rng.randbytes(32)


def _mutants(proof: list[bytes], rng: random.Random) -> Iterable[tuple[str, list[bytes]]]:
    """Structural proof mutants shared by both proof kinds."""
    for i in range(len(proof)):
        yield f"dropped proof[{i}]", proof[:i] + proof[i + 1 :]
        yield f"truncated proof[{i}] to 31 bytes", [*proof[:i], proof[i][:31], *proof[i + 1 :]]
        yield f"extended proof[{i}] to 33 bytes", [*proof[:i], proof[i] + b"\0", *proof[i + 1 :]]
    for i in range(len(proof) + 1):
        yield f"random hash inserted at {i}", [*proof[:i], _random_hash(rng), *proof[i:]]
    if proof:
        yield "proof[0] repeated at the front", [proof[0], *proof]
        yield "proof[-1] repeated at the end", [*proof, proof[-1]]
    for i in range(len(proof) - 1):
        swapped = list(proof)
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        yield f"swapped proof[{i}] and proof[{i + 1}]", swapped
    if len(proof) > 2:
        yield "reversed", proof[::-1]


def _inclusion_ok(leaf: bytes, index: int, size: int, proof: Sequence[bytes], r: bytes) -> bool:
    try:
        verify_inclusion(leaf, index, size, proof, r)
    except ProofError:
        return False
    return True


def _consistency_ok(old: int, new: int, r1: bytes, r2: bytes, proof: Sequence[bytes]) -> bool:
    try:
        verify_consistency(old, new, r1, r2, proof)
    except ProofError:
        return False
    return True


InclusionArgs = tuple[bytes, int, int, Sequence[bytes], bytes]
ConsistencyArgs = tuple[int, int, bytes, bytes, Sequence[bytes]]


def _inclusion_mutants(
    index: int, size: int, proof: list[bytes], rng: random.Random
) -> Iterator[tuple[str, InclusionArgs]]:
    """Mutants that must fail, apart from size changes and proof bit flips."""
    leaf, r = LEAVES[index], ROOTS[size]
    others = {index - 1, index + 1, index ^ 2} - {index}
    if size > 1:
        others.add(rng.choice([i for i in range(size) if i != index]))
    for i in sorted(others):
        yield f"index {i}", (leaf, i, size, proof, r)
        if 0 <= i < size:
            yield f"index {i} with its own leaf", (LEAVES[i], i, size, proof, r)
    for desc, bad_root in (
        ("empty root", EMPTY_ROOT),
        ("random root", _random_hash(rng)),
        ("root of size - 1", ROOTS[size - 1]),
        ("root of size + 1", ROOTS[size + 1]),
        ("leaf as root", leaf),
    ):
        if bad_root != r:
            yield desc, (leaf, index, size, proof, bad_root)
    yield "other leaf", (LEAVES[(index + 1) % len(LEAVES)], index, size, proof, r)
    for desc, p in _mutants(proof, rng):
        yield desc, (leaf, index, size, p, r)
    for bit in _edge_bits(size, index * 7 + size):
        yield f"leaf bit {bit}", (_flip(leaf, bit), index, size, proof, r)
        yield f"root bit {bit}", (leaf, index, size, proof, _flip(r, bit))


def _consistency_mutants(
    old: int, new: int, proof: list[bytes], rng: random.Random
) -> Iterator[tuple[str, ConsistencyArgs]]:
    """Mutants that must fail, apart from size changes and proof bit flips."""
    r1, r2 = ROOTS[old], ROOTS[new]
    for desc, a, b in (
        ("random old root", _random_hash(rng), r2),
        ("random new root", r1, _random_hash(rng)),
        ("old root of old - 1", ROOTS[old - 1], r2),
        ("old root of old + 1", ROOTS[old + 1], r2),
        ("new root of new - 1", r1, ROOTS[new - 1]),
        ("new root of new + 1", r1, ROOTS[new + 1]),
        ("empty old root", EMPTY_ROOT, r2),
        ("swapped roots", r2, r1),
        ("new root twice", r2, r2),
    ):
        if (a, b) != (r1, r2):
            yield desc, (old, new, a, b, proof)
    for desc, p in _mutants(proof, rng):
        yield desc, (old, new, r1, r2, p)
    if old != new:
        yield "empty proof", (old, new, r1, r2, [])
    for bit in _edge_bits(new, old * 7 + new):
        yield f"old root bit {bit}", (old, new, _flip(r1, bit), r2, proof)
        yield f"new root bit {bit}", (old, new, r1, _flip(r2, bit), proof)


def sweep_inclusion(size: int, seed: int) -> tuple[int, int, list[str]]:
    """Every leaf of a tree of ``size``: (mutants tried, inherent accepts, failures)."""
    rng = random.Random(f"{seed}/inclusion/{size}")
    ref = RefTree(LEAVES)
    tried = inherent = 0
    failures: list[str] = []
    r = ROOTS[size]

    for index in range(size):
        where = f"inclusion(index={index}, size={size})"
        leaf = LEAVES[index]
        proof = inclusion_proof(LEAVES, index, size)
        if not _inclusion_ok(leaf, index, size, proof, r):
            failures.append(f"{where}: the valid proof was rejected")
            continue

        for desc, args in _inclusion_mutants(index, size, proof, rng):
            tried += 1
            if _inclusion_ok(*args):
                failures.append(f"{where}: mutant accepted: {desc}")

        for n in sorted({size - 1, size + 1, size * 2, size // 2}):
            # With the mutated size's own root: wrong unless these very hashes
            # also prove the leaf in that tree (they never do here).
            if n <= MAX_SIZE + 1:
                tried += 1
                if _inclusion_ok(leaf, index, n, proof, ROOTS[n]) and not (
                    index < n and ref_path(index, 0, n, ref.mth) == proof
                ):
                    failures.append(f"{where}: mutant accepted: size {n} with its root")
            # With the original root: wrong unless the walk is identical.
            tried += 1
            if _inclusion_ok(leaf, index, n, proof, r):
                if ref_accepts_inclusion(leaf, index, n, proof, r):
                    inherent += 1
                else:
                    failures.append(f"{where}: size {n} accepted, reference rejects")

        # The bulk: flipped bits, kept inline because it is most of the run.
        for pos, bits in _proof_bit_plan(size, len(proof), index * 7 + size):
            mutant = list(proof)
            for bit in bits:
                mutant[pos] = _flip(proof[pos], bit)
                tried += 1
                if _inclusion_ok(leaf, index, size, mutant, r):
                    failures.append(f"{where}: mutant accepted: proof[{pos}] bit {bit}")
    return tried, inherent, failures


def sweep_consistency(new: int, seed: int) -> tuple[int, int, list[str]]:
    """Every old size 1..new: (mutants tried, inherent accepts, failures)."""
    rng = random.Random(f"{seed}/consistency/{new}")
    ref = RefTree(LEAVES)
    tried = inherent = 0
    failures: list[str] = []
    r2 = ROOTS[new]

    for old in range(1, new + 1):
        where = f"consistency(old={old}, new={new})"
        r1 = ROOTS[old]
        proof = consistency_proof(LEAVES, old, new)
        if not _consistency_ok(old, new, r1, r2, proof):
            failures.append(f"{where}: the valid proof was rejected")
            continue

        for desc, args in _consistency_mutants(old, new, proof, rng):
            tried += 1
            if _consistency_ok(*args):
                failures.append(f"{where}: mutant accepted: {desc}")

        sizes = {(m, new) for m in (old - 1, old + 1, old ^ 2, rng.randrange(1, new + 1))}
        sizes |= {(old, n) for n in (new - 1, new + 1, new * 2, new // 2)}
        for m, n in sorted(sizes - {(old, new)}):
            # With the mutated sizes' own roots: wrong unless the proof also
            # proves that pair, as [] proves both 0 -> n and n -> n.
            if 0 <= m <= MAX_SIZE + 1 and n <= MAX_SIZE + 1:
                tried += 1
                if _consistency_ok(m, n, ROOTS[m], ROOTS[n], proof) and not (
                    m <= n and ref_proof(m, n, ref.mth) == proof
                ):
                    failures.append(f"{where}: mutant accepted: sizes {m} -> {n} with their roots")
            # With the original roots: wrong unless the walk is identical.
            tried += 1
            if _consistency_ok(m, n, r1, r2, proof):
                if ref_accepts_consistency(m, n, r1, r2, proof):
                    inherent += 1
                else:
                    failures.append(f"{where}: sizes {m} -> {n} accepted, reference rejects")

        for pos, bits in _proof_bit_plan(new, len(proof), old * 7 + new):
            mutant = list(proof)
            for bit in bits:
                mutant[pos] = _flip(proof[pos], bit)
                tried += 1
                if _consistency_ok(old, new, r1, r2, mutant):
                    failures.append(f"{where}: mutant accepted: proof[{pos}] bit {bit}")
    return tried, inherent, failures


@pytest.fixture(scope="module")
def seed() -> int:
    return pick_seed()


def _run_sweep(
    sweep: Callable[[int, int], tuple[int, int, list[str]]], seed: int
) -> tuple[int, int, list[str]]:
    # Largest trees first so the two workers finish together. Each size
    # seeds its own Random, so the result does not depend on which worker ran
    # what. "spawn", not "fork": earlier tests in the session may have left
    # threads (gRPC, trio) whose locks a forked child would inherit held.
    sizes = range(MAX_SIZE, 0, -1)
    workers = min(2, len(os.sched_getaffinity(0)))
    if workers < 2:
        results = [sweep(n, seed) for n in sizes]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            results = list(pool.map(sweep, sizes, itertools.repeat(seed), chunksize=4))
    tried = sum(t for t, _, _ in results)
    inherent = sum(i for _, i, _ in results)
    failures = [f for _, _, fs in results for f in fs]
    return tried, inherent, failures


def _report(failures: list[str], seed: int) -> str:
    shown = "\n  ".join(failures[:30])
    return f"NAGA_TEST_SEED={seed}: {len(failures)} failures, first 30:\n  {shown}"


# The exhaustive mode takes minutes per test, longer on a loaded machine.
_sweep_timeout = pytest.mark.timeout(3600 if EXHAUSTIVE else 600)


@pytest.mark.slow
@_sweep_timeout
def test_every_inclusion_proof_and_its_mutants(seed: int) -> None:
    tried, inherent, failures = _run_sweep(sweep_inclusion, seed)
    assert not failures, _report(failures, seed)
    # Guard against a sweep that silently checks nothing.
    assert tried > 2_000_000, f"NAGA_TEST_SEED={seed}: only {tried} mutants tried"
    # Size mutants that walk the same hashes exist (leaf 0 of 5..8 leaves).
    assert inherent > 0, f"NAGA_TEST_SEED={seed}: no identical-walk size mutant seen"


@pytest.mark.slow
@_sweep_timeout
def test_every_consistency_proof_and_its_mutants(seed: int) -> None:
    tried, inherent, failures = _run_sweep(sweep_consistency, seed)
    assert not failures, _report(failures, seed)
    assert tried > 2_000_000, f"NAGA_TEST_SEED={seed}: only {tried} mutants tried"
    assert inherent > 0, f"NAGA_TEST_SEED={seed}: no identical-walk size mutant seen"


def test_identical_walk_size_mutants_are_the_rfc_behaviour() -> None:
    # The documented limitation, pinned: the same three siblings prove leaf 0
    # in trees of 5 to 8 leaves, so only the signed size tells them apart.
    proof = inclusion_proof(LEAVES, 0, 5)
    for size in (5, 6, 7, 8):
        verify_inclusion(LEAVES[0], 0, size, proof, ROOTS[5])
        assert ref_accepts_inclusion(LEAVES[0], 0, size, proof, ROOTS[5])
    for size in (6, 7, 8):
        with pytest.raises(ProofError, match="does not lead to the root"):
            verify_inclusion(LEAVES[0], 0, size, proof, ROOTS[size])
    # Likewise 4 -> 5 and 4 -> 6 consistency both take one hash after a
    # perfect old tree.
    proof = consistency_proof(LEAVES, 4, 5)
    verify_consistency(4, 6, ROOTS[4], ROOTS[5], proof)
    with pytest.raises(ProofError, match="new root"):
        verify_consistency(4, 6, ROOTS[4], ROOTS[6], proof)


# --- cross-check against the reference on a shuffled 1,000-leaf log ----------


def test_shuffled_log_matches_reference(seed: int) -> None:
    rng = random.Random(seed)
    entries = [b"entry %d" % i for i in range(1000)]
    rng.shuffle(entries)
    ref_leaves = [_sha256(b"\x00" + e) for e in entries]
    ref = RefTree(ref_leaves)
    leaves = [leaf_hash(e) for e in entries]
    ctx = f"NAGA_TEST_SEED={seed}"
    assert leaves == ref_leaves, ctx

    cr = CompactRange()
    for n, h in enumerate(leaves, 1):
        cr.append(h)
        want = ref.mth(0, n)
        assert cr.root() == want, f"{ctx}: CompactRange root differs at size {n}"
        assert root(leaves[:n]) == want, f"{ctx}: root() differs at size {n}"
        if n % 97 == 0:
            back = CompactRange.from_bytes(cr.to_bytes())
            assert (back.size, back.root()) == (n, want), f"{ctx}: round trip at {n}"

    sizes = [1, 2, 3, 512, 513, 999, 1000, *(rng.randrange(1, 1001) for _ in range(150))]
    for size in sizes:
        for index in {0, size - 1, size // 2, rng.randrange(size)}:
            got = inclusion_proof(leaves, index, size)
            want_path = ref_path(index, 0, size, ref.mth)
            assert got == want_path, f"{ctx}: inclusion proof ({index}, {size}) differs"
            verify_inclusion(leaves[index], index, size, got, ref.mth(0, size))
        for old in {1, size - 1, size // 2, rng.randrange(1, size + 1)} - {0}:
            got = consistency_proof(leaves, old, size)
            want_proof = ref_proof(old, size, ref.mth)
            assert got == want_proof, f"{ctx}: consistency proof ({old}, {size}) differs"
            verify_consistency(old, size, ref.mth(0, old), ref.mth(0, size), got)


# --- hypothesis: CompactRange against root() and its own encoding ------------

_hashes = st.binary(min_size=32, max_size=32)
_fast = settings(max_examples=150, derandomize=True, database=None, deadline=None)


def _subtree_widths(size: int) -> list[int]:
    return [1 << b for b in range(size.bit_length() - 1, -1, -1) if size >> b & 1]


@_fast
@given(st.lists(_hashes, max_size=300))
def test_compact_range_root_is_the_tree_root(leaves: list[bytes]) -> None:
    cr = CompactRange()
    for h in leaves:
        cr.append(h)
    assert cr.size == len(leaves)
    assert cr.root() == root(leaves) == RefTree(leaves).mth(0, len(leaves))
    lo = 0
    for h, width in zip(cr.hashes, _subtree_widths(len(leaves)), strict=True):
        assert h == root(leaves[lo : lo + width])
        lo += width


@_fast
@given(st.lists(_hashes, max_size=300), st.lists(_hashes, max_size=20))
def test_compact_range_round_trip(leaves: list[bytes], more: list[bytes]) -> None:
    cr = CompactRange()
    for h in leaves:
        cr.append(h)
    data = cr.to_bytes()
    back = CompactRange.from_bytes(data)
    assert (back.size, back.hashes, back.to_bytes()) == (cr.size, cr.hashes, data)
    parts = CompactRange.from_parts(cr.size, cr.hashes)
    assert parts.to_bytes() == data
    for h in more:
        cr.append(h)
        back.append(h)
        assert back.root() == cr.root()


@_fast
@given(st.binary(max_size=600))
def test_compact_range_from_bytes_garbage(data: bytes) -> None:
    try:
        cr = CompactRange.from_bytes(data)
    except ValueError:
        return
    # Whatever parses must be the one canonical encoding of what it parsed.
    assert cr.to_bytes() == data


@_fast
@given(st.lists(_hashes, min_size=1, max_size=300), st.data())
def test_compact_range_from_bytes_rejects_damage(leaves: list[bytes], data: st.DataObject) -> None:
    cr = CompactRange()
    for h in leaves:
        cr.append(h)
    good = cr.to_bytes()
    cut = data.draw(st.integers(1, len(good)), label="bytes cut")
    extra = data.draw(st.binary(min_size=1, max_size=64), label="bytes added")
    other_size = data.draw(st.integers(0, (1 << 64) - 1), label="size field")
    for bad in (good[:-cut], good + extra):
        with pytest.raises(ValueError):
            CompactRange.from_bytes(bad)
    relabelled = other_size.to_bytes(8, "big") + good[8:]
    if other_size.bit_count() != cr.size.bit_count():
        with pytest.raises(ValueError):
            CompactRange.from_bytes(relabelled)
    else:
        assert CompactRange.from_bytes(relabelled).size == other_size
