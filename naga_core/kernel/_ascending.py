"""Strictly ascending ints (the seqs of the kernel's effects), delta-encoded
(ADR 0057): 2 bytes an item instead of the 8 of an ``array("q")``.

Items are kept in blocks of at most :data:`BLOCK`: the first item of each
block in full (``_firsts``, with its index in ``_starts``), every item as
its difference to the one before (``_deltas``, an ``array("H")``; 0 for a
block's first). A difference past 65535 starts a new block. A read decodes
one block (``itertools.accumulate``, in C) and bisects it; the kernel reads
them on a rollback or an abort, never on the turn path.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from array import array
from collections.abc import Iterable, Iterator

#: Items a block holds at most: a read decodes one block.
BLOCK = 64
_MAX_DELTA = 0xFFFF


class Ascending:
    """A sequence of strictly ascending ints, 2 bytes an item and 16 a block."""

    __slots__ = ("_deltas", "_firsts", "_last", "_starts")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self._firsts = array("q")
        self._starts = array("q")
        self._deltas = array("H")
        self._last = 0
        self.extend(items)

    def __len__(self) -> int:
        return len(self._deltas)

    def append(self, value: int) -> None:
        """Add ``value``, greater than every item (ValueError if not)."""
        n = len(self._deltas)
        if n and value <= self._last:
            raise ValueError(f"{value} does not follow {self._last}")
        delta = value - self._last
        if not n or delta > _MAX_DELTA or n - self._starts[-1] >= BLOCK:
            self._firsts.append(value)
            self._starts.append(n)
            self._deltas.append(0)
        else:
            self._deltas.append(delta)
        self._last = value

    def extend(self, items: Iterable[int]) -> None:
        """Append each of ``items``; into an empty sequence whose gaps all
        fit, the blocks are cut in C (a start's image holds every effect)."""
        values = array("q", items)
        if not values:
            return
        if not self._deltas:
            gaps = array("q", map(operator.sub, itertools.islice(values, 1, None), values))
            if not gaps or (min(gaps) > 0 and max(gaps) <= _MAX_DELTA):
                deltas = array("H", itertools.chain((0,), gaps))
                deltas[::BLOCK] = array("H", bytes(2 * len(range(0, len(values), BLOCK))))
                self._deltas = deltas
                self._firsts = values[::BLOCK]
                self._starts = array("q", range(0, len(values), BLOCK))
                self._last = values[-1]
                return
        for value in values:
            self.append(value)

    def _block(self, b: int) -> list[int]:
        start = self._starts[b]
        end = self._starts[b + 1] if b + 1 < len(self._starts) else len(self._deltas)
        deltas = itertools.islice(self._deltas, start + 1, end)
        return list(itertools.accumulate(deltas, initial=self._firsts[b]))

    def __getitem__(self, i: int) -> int:
        if i < 0:
            i += len(self._deltas)
        if not 0 <= i < len(self._deltas):
            raise IndexError(f"index {i} out of {len(self._deltas)}")
        b = bisect.bisect_right(self._starts, i) - 1
        return self._block(b)[i - self._starts[b]]

    def bisect_right(self, value: int) -> int:
        """How many items are at most ``value``."""
        b = bisect.bisect_right(self._firsts, value) - 1
        if b < 0:
            return 0
        return self._starts[b] + bisect.bisect_right(self._block(b), value)

    def bisect_left(self, value: int) -> int:
        """How many items are below ``value``."""
        b = bisect.bisect_left(self._firsts, value) - 1
        if b < 0:
            return 0
        return self._starts[b] + bisect.bisect_left(self._block(b), value)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = self.bisect_left(value)
        return i < len(self._deltas) and self[i] == value

    def __iter__(self) -> Iterator[int]:
        for b in range(len(self._starts)):
            yield from self._block(b)

    def after(self, value: int) -> array[int]:
        """The items above ``value``, ascending."""
        i = self.bisect_right(value)
        out = array("q")
        if i == len(self._deltas):
            return out
        b = bisect.bisect_right(self._starts, i) - 1
        out.extend(self._block(b)[i - self._starts[b] :])
        for k in range(b + 1, len(self._starts)):
            out.extend(self._block(k))
        return out

    def nbytes(self) -> int:
        """The bytes its arrays hold (their buffers, not over-allocation)."""
        return sum(a.itemsize * len(a) for a in (self._firsts, self._starts, self._deltas))


__all__ = ["BLOCK", "Ascending"]
