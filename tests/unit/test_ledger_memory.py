"""The ledger's memory does not grow with its sealed records (issue 19): what
it holds, and what a seal or a proof of any size builds on the way, is
bounded by a segment, not by the ledger. Bytes counted with tracemalloc, not
time."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

from naga_core.ledger import (
    Entry,
    Ledger,
    consistency_proof,
    inclusion_proof,
    root,
    verify_consistency,
    verify_inclusion,
)
from tests.ledger_helpers import fixed_signer

SEGMENT = 16 * 1024  # about 130 records of 100 bytes a segment


def _grow(ledger: Ledger, to: int) -> None:
    while ledger.size < to:
        n = min(1000, to - ledger.size)
        ledger.append_many([Entry.of("t.x", bytes(100)) for _ in range(n)])


def _peak(fn: Callable[[], object]) -> int:
    """Bytes allocated at the peak of ``fn`` beyond what was held before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _costs(directory: str, size: int) -> dict[str, int]:
    with Ledger.open(directory, fixed_signer(), segment_max_bytes=SEGMENT) as ledger:
        _grow(ledger, size)
        n = ledger.size
        seals = len(ledger.seals())
        proof: list[bytes] = []
        path: list[bytes] = []
        costs = {
            # a batch that crosses seals: each builds its consistency proof
            "seal": _peak(lambda: _grow(ledger, n + 400)),
            "consistency": _peak(lambda: proof.extend(ledger.prove_consistency(1, n))),
            "root": _peak(lambda: ledger.root_at(n - 1)),
            "inclusion": _peak(lambda: path.extend(ledger.prove_inclusion(0, n).path)),
            "held": _peak(lambda: None),
        }
        assert len(ledger.seals()) > seals  # the batch did seal
        # The proofs still verify (the unit and property tests check them in full).
        verify_consistency(1, n, ledger.root_at(1), ledger.root_at(n), proof)
        verify_inclusion(ledger.leaf_hash(0), 0, n, path, ledger.root_at(n))
        return costs


def test_seals_and_proofs_do_not_grow_with_sealed_records(tmp_path: Path) -> None:
    small = _costs(str(tmp_path / "small"), 3_000)
    big = _costs(str(tmp_path / "big"), 12_000)  # 4x the records, 4x the seals
    for what in ("seal", "consistency", "root", "inclusion"):
        # A list of every leaf (what they built before) is about 65 bytes a
        # record: 0.6 MB more at the big size. Bounded: a segment's leaves.
        assert big[what] < 1.2 * small[what] + 16 * 1024, (what, small[what], big[what])


def test_held_structures_are_bounded_by_a_segment(tmp_path: Path) -> None:
    """The leaf hashes kept are the unsealed tail's; indexes read back, two."""
    with Ledger.open(str(tmp_path / "l"), fixed_signer(), segment_max_bytes=SEGMENT) as ledger:
        _grow(ledger, 6_000)
        ledger.prove_consistency(1, ledger.size)
        for seq in range(0, ledger.size, 97):
            ledger.read(seq)
        per_segment = max(seal.count for seal in ledger.seals())
        assert len(ledger._leaves) <= 32 * per_segment  # pyright: ignore[reportPrivateUsage]
        assert len(ledger._indexes) <= 2  # pyright: ignore[reportPrivateUsage]


def test_proofs_from_the_seals_equal_those_from_every_leaf(tmp_path: Path) -> None:
    """Every subtree taken from a seal's compact range or one segment's
    leaves is the one the whole leaf list gives: roots, inclusion and
    consistency proofs of sizes on, around and between seal boundaries."""
    with Ledger.open(str(tmp_path / "l"), fixed_signer(), segment_max_bytes=4096) as ledger:
        _grow(ledger, 700)
        leaves = [ledger.leaf_hash(s) for s in range(ledger.size)]
        ends = [seal.tree_size for seal in ledger.seals()]
        assert len(ends) >= 10
        sizes = sorted(
            {1, 2, 3, 255, 256, 257, 511, 512, ledger.size}
            | {e + d for e in ends for d in (-1, 0, 1)}
        )
        for new in sizes:
            assert ledger.root_at(new) == root(leaves[:new])
            for old in [s for s in sizes if s <= new][::5]:
                assert ledger.prove_consistency(old, new) == consistency_proof(leaves, old, new)
            for seq in {0, new // 2, new - 1}:
                path = list(ledger.prove_inclusion(seq, new).path)
                assert path == inclusion_proof(leaves, seq, new)
