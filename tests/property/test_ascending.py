"""The kernel's delta-encoded effect seqs (naga_core/kernel/_ascending.py,
ADR 0057) read as the plain ascending array they replace: items, bisects,
membership, the items after a value, built by appends or in one extend
(gaps past 2 bytes included), and a sequence that does not ascend refused."""

from __future__ import annotations

import bisect
import itertools
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.kernel._ascending import BLOCK, Ascending

_gaps = st.lists(
    st.one_of(st.integers(1, 40), st.integers(1, 200_000), st.just(65_535), st.just(65_536)),
    max_size=3 * BLOCK + 5,
)


def _values(first: int, gaps: list[int]) -> list[int]:
    return list(itertools.accumulate(gaps, initial=first))


@settings(max_examples=300, deadline=None)
@given(first=st.integers(0, 1 << 40), gaps=_gaps, probes=st.lists(st.integers(-5, 1 << 41)))
def test_it_reads_as_the_plain_array(first: int, gaps: list[int], probes: list[int]) -> None:
    values = _values(first, gaps)
    appended = Ascending()
    for v in values:
        appended.append(v)
    for seqs in (appended, Ascending(values)):
        assert len(seqs) == len(values)
        assert list(seqs) == values
        assert [seqs[i] for i in range(len(values))] == values
        if values:
            assert seqs[-1] == values[-1]
        for p in [*probes, *values, *(v + 1 for v in values), *(v - 1 for v in values)]:
            assert seqs.bisect_right(p) == bisect.bisect_right(values, p)
            assert seqs.bisect_left(p) == bisect.bisect_left(values, p)
            assert (p in seqs) == (p in values)
            assert seqs.after(p) == array("q", values[bisect.bisect_right(values, p) :])


@given(values=st.lists(st.integers(0, 1000), min_size=2))
def test_a_sequence_that_does_not_ascend_is_refused(values: list[int]) -> None:
    if all(b > a for a, b in itertools.pairwise(values)):
        return
    with pytest.raises(ValueError, match="does not follow"):
        Ascending(values)
    bad = next(i for i, (a, b) in enumerate(itertools.pairwise(values)) if b <= a) + 1
    seqs = Ascending(values[:bad])
    with pytest.raises(ValueError, match="does not follow"):
        seqs.append(values[bad])


def test_two_bytes_an_item_where_the_array_held_eight() -> None:
    """What ADR 0057 removed: the effect-seq array cost 8 bytes an effect;
    at gaps a ledger's effects have (a few records apart) this costs 2 and
    16 a block of 64."""
    values = list(range(7, 5 * 100_000, 5))
    seqs = Ascending(values)
    assert array("q", values).itemsize * len(values) / len(values) == 8
    assert seqs.nbytes() / len(values) <= 2 + 16 / BLOCK + 0.01
