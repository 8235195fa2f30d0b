"""The kernel's vocabulary: the record kinds, the errors its effects raise,
the world-action registry, and reading an effect back from the ledger.

Apart from :class:`~naga_core.kernel._kernel.Kernel` so that the rollback
planner and the in-force stack can name these without importing the kernel
(which imports them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from naga.constants import KERNEL_EFFECT_KIND
from naga.v1 import kernel_pb2 as kpb
from naga_core.kernel._state import KernelError, Scalar, State, from_value, to_value
from naga_core.ledger import Ledger

EFFECT_KIND = KERNEL_EFFECT_KIND
APPLIED_KIND = "kernel.applied"
#: Families no register, ordinary perform or rollback changes: only
#: ``perform(..., pinned=True)``, which nothing behind an RPC calls (the
#: constitution's anchor, INV-5; docs/design/constitution.md).
PINNED_FAMILIES = frozenset({"constitution"})

ActionHandler = Callable[[Mapping[str, Scalar]], None]


class OwnerRequired(KernelError):
    """The operation would raise a privilege, which only the owner may do (INV-6)."""


class PinnedFamily(KernelError):
    """An effect would change a pinned family (PINNED_FAMILIES) outside the
    one path allowed to."""


class ImageRejected(KernelError):
    """A start-up image does not describe a kernel state (it is ignored and
    the ledger replayed in full)."""


class ActionFailed(KernelError):
    """A world action raised, so its effect was aborted (and compensated)."""

    def __init__(self, effect_seq: int, abort_seq: int, action: str, reason: str) -> None:
        super().__init__(f"effect {effect_seq} aborted: action {action!r} failed: {reason}")
        self.effect_seq = effect_seq
        self.abort_seq = abort_seq
        self.action = action
        self.reason = reason


class Actions:
    """Named world-action handlers. Each must be idempotent."""

    def __init__(self) -> None:
        self._handlers: dict[str, ActionHandler] = {}

    def register(self, name: str, handler: ActionHandler) -> None:
        if name in self._handlers:
            raise KernelError(f"action {name!r} is already registered")
        self._handlers[name] = handler

    def run(self, action: kpb.Action) -> None:
        handler = self._handlers.get(action.name)
        if handler is None:
            raise KernelError(f"no handler for action {action.name!r}")
        handler({k: from_value(v) for k, v in sorted(action.args.items())})


def action(name: str, **args: Scalar) -> kpb.Action:
    """Build an :class:`Action` message from keyword arguments."""
    msg = kpb.Action(name=name)
    for k, v in args.items():
        msg.args[k].CopyFrom(to_value(v))
    return msg


@dataclass(frozen=True, slots=True)
class Change:
    family: str
    key: str
    before: Scalar | None
    after: Scalar | None


#: Finds the changes that raise a privilege (e.g. trust_raises in _trust).
Ratchet = Callable[[Sequence[Change]], Sequence[Change]]
#: Holds for a change a rollback leaves out: what a later effect did to that
#: key stays, like a pinned family (e.g. naga_core.authz.keeps_revocations).
Keep = Callable[[Change], bool]


@dataclass(frozen=True, slots=True)
class RollbackPreview:
    """What ``rollback(to_seq)`` would do, without doing it."""

    to_seq: int
    through_seq: int
    effects: int
    changes: tuple[Change, ...]
    world_actions: tuple[kpb.Action, ...]
    irreversible: tuple[int, ...]
    #: Later effects a keep leaves as they are (a token revocation).
    kept: tuple[int, ...] = ()


def refuse_pinned(ops: Iterable[kpb.SetOp]) -> None:
    for op in ops:
        if op.family in PINNED_FAMILIES:
            raise PinnedFamily(
                f"kernel family {op.family!r} is pinned: no ordinary effect changes it"
            )


def parse_effect(payload: bytes, seq: int) -> kpb.Effect:
    """The effect in ledger record ``seq``; KernelError if it is none."""
    effect = kpb.Effect()
    try:
        effect.ParseFromString(payload)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError (a bare Exception subclass)
        raise KernelError(f"ledger entry {seq} is not a kernel effect: {exc}") from None
    if effect.form == kpb.EFFECT_FORM_UNSPECIFIED:
        raise KernelError(f"ledger entry {seq} has no effect form")
    return effect


def replay(ledger: Ledger, upto: int | None = None) -> State:
    """The kernel state from the ledger alone, through entry ``upto``."""
    state = State()
    end = ledger.size if upto is None else upto + 1
    for rec in ledger.iter_records(0, end):
        if rec.kind == EFFECT_KIND:
            state.apply(parse_effect(rec.payload, rec.seq).forward)
    return state


__all__ = [
    "APPLIED_KIND",
    "EFFECT_KIND",
    "PINNED_FAMILIES",
    "ActionFailed",
    "ActionHandler",
    "Actions",
    "Change",
    "ImageRejected",
    "Keep",
    "OwnerRequired",
    "PinnedFamily",
    "Ratchet",
    "RollbackPreview",
    "action",
    "parse_effect",
    "refuse_pinned",
    "replay",
]
