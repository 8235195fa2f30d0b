"""Shadow branches: a copy-on-write view of kernel state at a ledger position.

A branch is opened at a ledger seq (the live head by default). Components,
settings and trust tables run against it exactly as against the kernel (both
are a :class:`Registrar`), but every write lands in the branch's own layer:
live state and the ledger are untouched until a merge, and discarding a
branch leaves no trace.

The view is a snapshot, not a window: reads of keys the branch did not write
give their value at the branch's seq even after live state moves on. It costs
O(1) to open at the head. The branch layer sits on a fork of live state, and
when the ledger has grown since the branch last looked, the keys live state
changed since the branch's seq are pinned back to their values at that seq
(from ``Kernel.preview_rollback``, which reads only the effects after it).
Opening at a past seq is the same operation with something to pin at once.

World actions never run in a branch: ``perform`` with ``do`` or ``undo``
actions is refused (:class:`BranchError`), so a merge is a pure state diff
whose rollback is exact. (Running a skill's world actions in shadow needs a
simulated world; that belongs to the sandbox, not the kernel.)

``merge(gate, description=...)`` checks, in order: every key the branch
wrote still has its base value in live state (else :class:`MergeConflict`);
a merge that raises a trust level was asked for by the owner (else
:class:`~naga_core.kernel._trust.TrustRaiseRefused`, INV-6); the gate accepts
the diff (else :class:`MergeRefused`). It then journals ONE ``perform`` effect
with no world actions whose forward ops are the branch's net diff; the kernel
derives the inverse, so the merge is rolled back like any other effect. A
refused or conflicting merge leaves the branch open, to be discarded.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType

from naga.v1 import kernel_pb2 as pb
from naga_core.kernel._kernel import Change, Kernel
from naga_core.kernel._state import (
    KernelError,
    Key,
    Registrar,
    Scalar,
    State,
    same_value,
    set_op,
)
from naga_core.kernel._trust import TrustRaiseRefused, trust_raises
from naga_core.ledger import Ledger

Gate = Callable[[list[Change]], bool]


class BranchError(KernelError):
    """A branch operation was refused."""


class BranchClosed(BranchError):
    """The branch was already merged or discarded."""


class MergeConflict(BranchError):
    """Live state changed, since the branch's seq, a key the branch wrote."""

    def __init__(self, conflicts: Sequence[tuple[Key, Scalar | None, Scalar | None]]) -> None:
        self.keys: tuple[Key, ...] = tuple(k for k, _, _ in conflicts)
        detail = "; ".join(
            f"{f}/{k}: was {base!r} at the branch's seq, is {live!r} live"
            for (f, k), base, live in conflicts
        )
        super().__init__(f"merge conflict on {len(conflicts)} key(s) the branch wrote: {detail}")


class MergeRefused(BranchError):
    """The merge gate said no."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.changes = tuple(changes)
        super().__init__(f"the merge gate refused the branch's {len(changes)} change(s)")


class BranchStatus(enum.Enum):
    OPEN = "open"
    MERGED = "merged"
    DISCARDED = "discarded"


same = same_value


def open_branch(kernel: Kernel, at_seq: int | None = None) -> Branch:
    """A branch of ``kernel``'s state after ledger entry ``at_seq`` (default:
    the head; ``-1``: before the first entry). Raises ``NotFound`` past the end."""
    ledger = kernel.ledger
    # A past seq is checked by the first pin (preview_rollback raises).
    return Branch(kernel, ledger, ledger.size - 1 if at_seq is None else at_seq)


class Branch:
    """A shadow branch; build with :func:`open_branch`. Usable as a context
    manager that discards the branch on exit unless it was merged."""

    def __init__(self, kernel: Kernel, ledger: Ledger, base_seq: int) -> None:
        self._kernel = kernel
        self._ledger = ledger
        self.base_seq = base_seq
        self.status = BranchStatus.OPEN
        self.merged_seq: int | None = None
        self._writes: dict[Key, Scalar | None] = {}  # net writes, last one wins
        self._seen_size = ledger.size
        self._live_changed: dict[Key, Scalar | None] = {}  # key -> its base value
        self._base: State
        self._layer: State
        self._pin()

    # --- the view ----------------------------------------------------------------

    def _pin(self) -> None:
        """Rebuild base and layer: a fork of live state with the keys live
        changed since ``base_seq`` pinned back to their values at it."""
        if self.base_seq == self._ledger.size - 1:
            changed: tuple[Change, ...] = ()
        else:
            changed = self._kernel.preview_rollback(self.base_seq).changes
        self._live_changed = {(c.family, c.key): c.after for c in changed}
        base = self._kernel.state.fork()
        base.apply(set_op(f, k, v) for (f, k), v in self._live_changed.items())
        layer = base.fork()
        layer.apply(set_op(f, k, v) for (f, k), v in self._writes.items())
        self._base, self._layer = base, layer
        self._seen_size = self._ledger.size

    def _fresh(self) -> State:
        if self._ledger.size != self._seen_size:
            self._pin()
        return self._layer

    @property
    def state(self) -> Mapping[Key, Scalar]:
        """The branch's state: base at ``base_seq`` plus the branch's writes.
        A live view; it stays a snapshot however live state moves."""
        return _View(self._fresh)

    def base(self) -> Mapping[Key, Scalar]:
        """The state at ``base_seq`` (a copy)."""
        self._fresh()
        return self._base.snapshot()

    def touched(self) -> set[Key]:
        """Keys the branch wrote (even if written back to their base value)."""
        return set(self._writes)

    # --- writing -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.status is not BranchStatus.OPEN:
            raise BranchClosed(f"the branch at seq {self.base_seq} is {self.status.value}")

    def _write(self, ops: Iterable[pb.SetOp]) -> None:
        self._check_open()
        ops = list(ops)  # set_op validated family and key; a bad value raised there
        layer = self._fresh()
        layer.apply(ops)
        for op in ops:
            self._writes[(op.family, op.key)] = layer.get((op.family, op.key))

    def register(
        self, family: str, key: str, value: Scalar | None, *, description: str = ""
    ) -> None:
        """Set (or, with None, remove) one entry in the branch only. Nothing
        is journaled, so there is no seq: returns None."""
        del description  # accepted for Registrar compatibility; a branch has no history
        self._write([set_op(family, key, value)])

    def perform(
        self,
        do: Sequence[pb.Action],
        undo: Sequence[pb.Action] | None,
        *,
        description: str,
        forward: Iterable[pb.SetOp] = (),
    ) -> None:
        """Apply ``forward`` to the branch; world actions are refused."""
        self._check_open()
        if do or undo:
            names = ", ".join(a.name for a in [*do, *(undo or ())])
            raise BranchError(
                f"{description!r}: world actions ({names}) cannot run in a shadow branch"
            )
        self._write(forward)

    # --- ending ----------------------------------------------------------------------

    def diff(self) -> list[Change]:
        """Net changes against the base, by key: ``before`` at ``base_seq``,
        ``after`` in the branch."""
        self._fresh()
        return [
            Change(f, k, self._base.get((f, k)), after)
            for (f, k), after in sorted(self._writes.items())
            if not same(self._base.get((f, k)), after)
        ]

    def discard(self) -> None:
        """Drop the branch. Discarding twice is harmless; after a merge it is refused."""
        if self.status is BranchStatus.MERGED:
            raise BranchClosed(f"the branch was merged as effect {self.merged_seq}")
        self.status = BranchStatus.DISCARDED
        self._writes.clear()
        self._live_changed.clear()

    def merge(self, gate: Gate, *, description: str, by_owner: bool = False) -> int | None:
        """Journal the branch's net diff as one effect; returns its seq (None
        when the diff is empty: nothing to journal, the gate is not asked)."""
        self._check_open()
        if not description:
            raise BranchError("a merge needs a description")
        live = self._kernel.state
        self._fresh()
        conflicts = [
            (key, self._live_changed[key], live.get(key))
            for key in sorted(self._writes)
            if key in self._live_changed
        ]
        if conflicts:
            raise MergeConflict(conflicts)
        changes = self.diff()
        if not changes:
            self.status = BranchStatus.MERGED
            return None
        raised = trust_raises(changes)
        if raised and not by_owner:
            raise TrustRaiseRefused(
                "merging this branch raises trust ("
                + ", ".join(f"{c.key}: {c.before!r} -> {c.after!r}" for c in raised)
                + "); raising trust needs the owner"
            )
        if not gate(list(changes)):
            raise MergeRefused(changes)
        seq = self._kernel.perform(
            [],
            [],
            description=description,
            forward=[set_op(c.family, c.key, c.after) for c in changes],
        )
        self.status = BranchStatus.MERGED
        self.merged_seq = seq
        return seq

    def __enter__(self) -> Branch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.status is BranchStatus.OPEN:
            self.discard()


class _View(Mapping[Key, Scalar]):
    """Read-only access to a branch's current state."""

    __slots__ = ("_current",)

    def __init__(self, current: Callable[[], State]) -> None:
        self._current = current

    def __getitem__(self, key: Key) -> Scalar:
        return self._current()[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


__all__ = [
    "Branch",
    "BranchClosed",
    "BranchError",
    "BranchStatus",
    "Gate",
    "MergeConflict",
    "MergeRefused",
    "Registrar",
    "open_branch",
    "same",
]
