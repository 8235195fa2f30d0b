"""A sequence kept as its change points: the indexes where its value
changes and the value from each on (ADR 0052).

The kernel keeps one value per effect (the node on top of the stack of
reversible effects in force after it) and most effects leave that value as
it was (a registration, a budget debit, an irreversible note): a plain list
costs 8 bytes an effect forever, this costs 16 bytes a change. Integers
only, both kept in arrays: a list of ints would hold an int object (32
bytes) a change besides.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterable, Iterator


class Runs:
    """``len(self)`` ints; run ``r`` holds ``values[r]`` from index
    ``starts[r]`` up to the next run's start. Always canonical: the first
    run starts at 0 and neighbouring runs hold different values."""

    __slots__ = ("_len", "_starts", "_values")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self._starts = array("q")
        self._values = array("q")
        self._len = 0
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> int:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"index {i} out of {self._len}")
        if i == self._len - 1:  # the kernel's usual read: what is in force now
            return self._values[-1]
        return self._values[bisect.bisect_right(self._starts, i) - 1]

    def __iter__(self) -> Iterator[int]:
        """Every value, one per index (the plain list's form)."""
        if not self._values:
            return
        ends = itertools.chain(itertools.islice(self._starts, 1, None), (self._len,))
        for start, end, value in zip(self._starts, ends, self._values, strict=True):
            yield from itertools.repeat(value, end - start)

    def append(self, value: int) -> None:
        if not self._values or self._values[-1] != value:
            self._starts.append(self._len)
            self._values.append(value)
        self._len += 1

    def set(self, i: int, value: int) -> None:
        """Index ``i`` (0 <= i < len) holds ``value``; the others keep theirs:
        the run holding ``i`` is split around it and the result merged with
        neighbours holding the same value."""
        if not 0 <= i < self._len:
            raise IndexError(f"index {i} out of {self._len}")
        starts, values = self._starts, self._values
        r = bisect.bisect_right(starts, i) - 1
        old = values[r]
        if old == value:
            return
        end = starts[r + 1] if r + 1 < len(starts) else self._len
        if i + 1 < end:  # the rest of run r keeps its value
            starts.insert(r + 1, i + 1)
            values.insert(r + 1, old)
        if starts[r] == i:
            values[r] = value
            k = r
        else:
            starts.insert(r + 1, i)
            values.insert(r + 1, value)
            k = r + 1
        if k + 1 < len(starts) and values[k + 1] == value:
            del starts[k + 1]
            del values[k + 1]
        if k > 0 and values[k - 1] == value:
            del starts[k]
            del values[k]

    def runs(self) -> Iterator[tuple[int, int]]:
        """(start, value) of every run, ascending."""
        return zip(self._starts, self._values, strict=True)


__all__ = ["Runs"]
