"""Which ledger ranges the rollbacks in force undid: one rule for every
reader that marks entries undone (the console's history, ``naga log``)."""

from __future__ import annotations

from collections.abc import Iterable


def undone_ranges(rollbacks: Iterable[tuple[int, int]], oldest: int) -> list[tuple[int, int]]:
    """The (kept, rollback) seq ranges undone, back to ``oldest``, from the
    ledger's rollbacks as (seq, rollback_to), newest first: the last one
    undid what lies between its target and itself; before its target, the
    rollbacks in force then, and so on (a rolled-back rollback lies inside a
    range, so it is skipped)."""
    dead: list[tuple[int, int]] = []
    cursor: int | None = None  # everything at or before it is as it was then
    for seq, target in rollbacks:
        if cursor is None or seq < cursor:  # in force (not itself undone)
            dead.append((target, seq))
            cursor = target
            if cursor < oldest:
                break
    return dead


__all__ = ["undone_ranges"]
