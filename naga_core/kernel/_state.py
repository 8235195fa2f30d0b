"""Kernel state: typed entries in families, and the pure ops that change it.

State is a mapping ``(family, key) -> scalar``. It changes only through
:class:`~naga.v1.kernel_pb2.SetOp` lists carried by ledger effects, so the
state at any ledger position is a pure function of the ledger (replay), and
the inverse of a registration is derived by reading the entry before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from naga import values
from naga.v1 import kernel_pb2 as pb
from naga.values import Scalar
from naga_core.errors import NagaError

Key = tuple[str, str]


class KernelError(NagaError):
    """A kernel operation was refused."""


class Registrar(Protocol):
    """What settings and trust tables write through: a Kernel or a Branch."""

    @property
    def state(self) -> Mapping[Key, Scalar]: ...

    def register(
        self, family: str, key: str, value: Scalar | None, *, description: str = ""
    ) -> int | None: ...


def to_value(value: Scalar) -> pb.Value:
    try:
        return values.to_value(value)
    except values.InvalidValue as exc:
        raise KernelError(str(exc)) from None


def from_value(value: pb.Value) -> Scalar:
    try:
        return values.from_value(value)
    except values.InvalidValue as exc:
        raise KernelError(str(exc)) from None


def same_value(a: Scalar | None, b: Scalar | None) -> bool:
    """Equal as journaled values. Not ``==``: Python has ``1 == True == 1.0``
    and ``0.0 == -0.0`` (different values once journaled), and NaN != NaN."""
    if a is None or b is None:
        return a is b
    return to_value(a).SerializeToString(deterministic=True) == to_value(b).SerializeToString(
        deterministic=True
    )


def set_op(family: str, key: str, value: Scalar | None) -> pb.SetOp:
    if not family or not key:
        raise KernelError("family and key must not be empty")
    if value is None:
        return pb.SetOp(family=family, key=key)
    return pb.SetOp(family=family, key=key, value=to_value(value))


class State(Mapping[Key, Scalar]):
    """Mutable kernel state; read-only to everything but the kernel.

    ``fork()`` gives a copy-on-write child (shadow branches): reads fall
    through to the parent until a key is written in the child.
    """

    __slots__ = ("_data", "_deleted", "_parent")

    def __init__(self, parent: State | None = None) -> None:
        self._data: dict[Key, Scalar] = {}
        self._deleted: set[Key] = set()
        self._parent = parent

    def fork(self) -> State:
        return State(self)

    def __getitem__(self, key: Key) -> Scalar:
        if key in self._data:
            return self._data[key]
        if key in self._deleted or self._parent is None:
            raise KeyError(key)
        return self._parent[key]

    def __iter__(self) -> Iterator[Key]:
        seen = set(self._data)
        yield from sorted(self._data)
        if self._parent is not None:
            for k in self._parent:
                if k not in seen and k not in self._deleted:
                    yield k

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def apply(self, ops: Iterable[pb.SetOp]) -> None:
        for op in ops:
            key = (op.family, op.key)
            if op.HasField("value"):
                self._data[key] = from_value(op.value)
                self._deleted.discard(key)
            else:
                self._data.pop(key, None)
                if self._parent is not None:
                    self._deleted.add(key)

    def inverse_of(self, ops: Iterable[pb.SetOp]) -> list[pb.SetOp]:
        """The ops that undo ``ops`` from this state (read before applying)."""
        shadow = self.fork()
        undo: list[pb.SetOp] = []
        for op in ops:
            key = (op.family, op.key)
            old = shadow.get(key)
            undo.append(set_op(op.family, op.key, old))
            shadow.apply([op])
        undo.reverse()
        return undo

    def touched(self) -> set[Key]:
        """Keys written or removed in this layer (not the parent's)."""
        return set(self._data) | self._deleted

    def snapshot(self) -> dict[Key, Scalar]:
        return {k: self[k] for k in self}

    def family(self, family: str) -> dict[str, Scalar]:
        return {k[1]: v for k, v in self.snapshot().items() if k[0] == family}
