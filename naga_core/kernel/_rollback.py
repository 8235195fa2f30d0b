"""Planning a rollback: the one ROLLBACK effect that takes the kernel back
to the state at a ledger seq, and the preview of what it would do.

Pure over what the kernel hands it (its state, the effects after the target,
the in-force path between now and then, a reader for the effects on that
path), so that a preview and the rollback itself are the same plan: the
kernel journals the effect, a preview only reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from naga.v1 import kernel_pb2 as kpb
from naga_core.kernel._effect import PINNED_FAMILIES, Change, Keep, RollbackPreview
from naga_core.kernel._state import State, same_value, set_op


def plan_rollback(
    state: State,
    *,
    to_seq: int,
    through: int,
    effects: Sequence[tuple[int, kpb.Effect]],
    path: tuple[list[int], list[int]],
    read: Callable[[int], kpb.Effect],
    keeps: Sequence[Keep],
) -> tuple[kpb.Effect, RollbackPreview]:
    """The rollback to ``to_seq`` of a kernel whose ledger ends at
    ``through``: ``effects`` are those after ``to_seq`` (seq, effect),
    ``path`` the in-force seqs to leave and to enter (each last first, from
    :meth:`InForceStack.path`), ``read`` parses the effect at a seq."""
    target = state.fork()
    irreversible: list[int] = []
    for seq, effect in reversed(effects):  # last first
        target.apply(effect.inverse)
        if effect.irreversible:
            irreversible.append(seq)
    # World part: from the reversible effects in force now to those in
    # force at to_seq, through their last common one: undo the ones to
    # leave (last first), redo the ones to enter (first first). It used to
    # be every later effect's undo, earlier rollbacks included, whose own
    # lists held those of the rollbacks before them twice over (undo and
    # redo): the lists doubled with each rollback into a range holding
    # earlier ones (stepping forward through history, or rolling back to
    # the same point again) until the record passed the ledger's size
    # limit (after about 16) and rollback refused.
    leave, enter = path
    known = dict(effects)

    def eff(seq: int) -> kpb.Effect:
        found = known.get(seq)
        return found if found is not None else read(seq)

    undo_world = [a for s in leave for a in eff(s).undo]
    undo_world += [a for s in reversed(enter) for a in eff(s).do]
    redo_world = [a for s in enter for a in eff(s).undo]
    redo_world += [a for s in reversed(leave) for a in eff(s).do]
    # A pinned family is outside rollback: what a later effect did to it
    # stays (and replays the same: the rollback's ops never name it).
    moved = [
        k
        for k in target.touched()
        if k[0] not in PINNED_FAMILIES and not same_value(state.get(k), target.get(k))
    ]
    held = {
        k for k in moved if any(keep(Change(*k, state.get(k), target.get(k))) for keep in keeps)
    }
    changed = sorted(k for k in moved if k not in held)
    # An effect whose every op a keep holds, with no world part: it stays.
    kept = tuple(
        seq
        for seq, e in effects
        if e.forward and not e.undo and all((op.family, op.key) in held for op in e.forward)
    )
    forward = [set_op(f, k, target.get((f, k))) for f, k in changed]
    inverse = [set_op(f, k, state.get((f, k))) for f, k in changed]
    effect = kpb.Effect(
        form=kpb.EFFECT_FORM_ROLLBACK,
        description=f"rollback to {to_seq}",
        forward=forward,
        inverse=inverse,
        do=undo_world,
        undo=redo_world,
        rollback_to=to_seq,
        rollback_through=through,
        irreversible_seqs=irreversible,
    )
    preview = RollbackPreview(
        to_seq=to_seq,
        through_seq=through,
        effects=len(effects) - len(kept),  # those a keep leaves are not undone
        changes=tuple(Change(f, k, state.get((f, k)), target.get((f, k))) for f, k in changed),
        world_actions=tuple(undo_world),
        irreversible=tuple(irreversible),
        kept=kept,
    )
    return effect, preview


__all__ = ["plan_rollback"]
