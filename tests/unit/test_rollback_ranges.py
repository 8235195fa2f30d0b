"""The undone ranges both history readers mark (naga.rollbacks): a rollback
in force undoes what lies between its target and itself; a rollback that a
later one undid is inside that range and counts for nothing."""

from __future__ import annotations

from naga.rollbacks import undone_ranges


def test_each_rollback_in_force_is_a_range_and_undone_ones_are_skipped() -> None:
    # Newest first: 30 kept 20 (undoing 21..30, the rollback at 25 among
    # them); before 20, the rollback at 12 kept 5.
    rollbacks = [(30, 20), (25, 8), (12, 5), (4, 1)]
    assert undone_ranges(rollbacks, 0) == [(20, 30), (5, 12), (1, 4)]
    # Back to `oldest` only: a range reaching before it ends the walk.
    assert undone_ranges(rollbacks, 10) == [(20, 30), (5, 12)]
    assert undone_ranges([], 0) == []
    # A rollback to before the first entry (-1) undoes everything before it.
    assert undone_ranges([(9, -1), (3, 1)], 0) == [(-1, 9)]
