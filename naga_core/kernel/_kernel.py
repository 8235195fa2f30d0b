"""The kernel: every state change is an effect journaled in the ledger.

Write-ahead, for every form: the effect (forward and inverse state ops, the
world actions it runs and those that undo them) is made durable first, then
its world actions run, then a small ``kernel.applied`` marker is appended.
State ops need no marker: the kernel's state is a pure function of the
ledger. On open, an effect without its marker has its world actions run again
(handlers are idempotent) and an acquired resource with no release is
released: a crash leaves every effect either not journaled or fully applied.

A world action that raises aborts its effect: an ABORT effect is journaled
that takes the effect's state ops back and runs its author's undo actions as
compensation (handlers are idempotent, so undoing what never happened is a
no-op), and the caller gets :class:`ActionFailed`. So a failed perform,
activation, acquire or rollback leaves the state as before it, in the live
kernel and in every replay.

Group commit: inside :meth:`Kernel.staged`, effects and markers are staged
in the ledger, not synced; whoever acknowledges them commits first (the
core does it on its RPC threads, so concurrent callers share one
fdatasync). Write-ahead still holds: an effect with world actions, every
rollback and preview, and every read of the ledger commit what is staged
before going on.

Rollback to P undoes every effect after P, last first, as one ROLLBACK effect
whose forward ops are the net change back to the state at P and whose
inverse ops are the net change forward again: replaying the ledger (rollback
records included) gives exactly the state at P, and rolling back the rollback
is an ordinary rollback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Sequence

from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.errors import NagaError, NotFound
from naga_core.kernel._effect import (
    APPLIED_KIND,
    EFFECT_KIND,
    PINNED_FAMILIES,
    ActionFailed,
    Actions,
    Change,
    ImageRejected,
    Keep,
    OwnerRequired,
    PinnedFamily,
    Ratchet,
    RollbackPreview,
    action,
    parse_effect,
    refuse_pinned,
    replay,
)
from naga_core.kernel._in_force import InForceStack
from naga_core.kernel._rollback import plan_rollback
from naga_core.kernel._state import KernelError, Scalar, State, set_op
from naga_core.ledger import Entry, Ledger


class Kernel:
    """Kernel state over one ledger. Build with :meth:`open`."""

    def __init__(
        self,
        ledger: Ledger,
        actions: Actions,
        *,
        ratchets: Sequence[Ratchet] = (),
        keeps: Sequence[Keep] = (),
    ) -> None:
        self._ratchets = tuple(ratchets)
        self._keeps = tuple(keeps)
        self._ledger = ledger
        self._actions = actions
        self.state = State()
        # The effects absorbed and the reversible ones in force after each
        # (what a rollback walks; ADR 0052 for its layout).
        self._in_force = InForceStack()
        self._open_brackets: dict[int, kpb.Effect] = {}
        self._acquires: dict[int, kpb.Effect] = {}  # every ACQUIRE, by seq
        self._releases: dict[int, int] = {}  # RELEASE seq -> the ACQUIRE it closes
        self._staging = 0  # > 0 inside staged(): appends are staged, not synced
        self._versions: dict[str, int] = {}  # family -> state ops absorbed that touched it
        # Effects whose world actions have no kernel.applied marker yet: in
        # a live kernel only one whose compensation failed (the next open
        # retries it); in a replay, what a crash interrupted.
        self._unapplied: dict[int, kpb.Effect] = {}
        self.recovered: list[str] = []

    @classmethod
    def open(
        cls,
        ledger: Ledger,
        actions: Actions,
        *,
        ratchets: Sequence[Ratchet] = (),
        keeps: Sequence[Keep] = (),
        image: snpb.KernelImage | None = None,
        image_seq: int = -1,
    ) -> Kernel:
        """Rebuild state from the ledger and finish what a crash interrupted.

        With ``image`` (:meth:`image` of a kernel after record ``image_seq``),
        only the records after ``image_seq`` are replayed; an image that does
        not hold together raises :class:`ImageRejected` before anything ran.
        """
        kernel = cls(ledger, actions, ratchets=ratchets, keeps=keeps)
        start = 0
        if image is not None:
            kernel._restore(image, image_seq)
            start = image_seq + 1
        for rec in ledger.iter_records(start):
            if rec.kind == EFFECT_KIND:
                kernel._absorb(rec.seq, parse_effect(rec.payload, rec.seq))
            elif rec.kind == APPLIED_KIND:
                kernel._unapplied.pop(int.from_bytes(rec.payload, "big"), None)
        for seq, effect in list(kernel._unapplied.items()):
            try:
                if effect.form == kpb.EFFECT_FORM_ABORT:
                    kernel._compensate(seq, effect)
                else:
                    kernel._run_world(seq, effect)
            except ActionFailed as exc:
                kernel.recovered.append(f"effect {seq} failed again on recovery: {exc}")
            except KernelError as exc:  # its compensation failed too; next open retries
                kernel.recovered.append(f"effect {seq} could not be finished: {exc}")
            else:
                kernel.recovered.append(f"re-ran the world actions of effect {seq}")
        for seq, effect in list(kernel._open_brackets.items()):
            kernel._release(seq, effect, "released on recovery: acquired before a crash")
            kernel.recovered.append(f"released the resource acquired by effect {seq}")
        return kernel

    @property
    def ledger(self) -> Ledger:
        """The ledger this kernel journals to (read it; write through the kernel)."""
        return self._ledger

    # --- start-up images ---------------------------------------------------------

    def image(self) -> snpb.KernelImage:
        """Everything :meth:`open` rebuilds, as of the last absorbed effect;
        taken when nothing is staged (the ledger's head is that record)."""
        img = snpb.KernelImage()
        img.state.extend(set_op(f, k, v) for (f, k), v in self.state.items())
        img.versions.update(self._versions)
        self._in_force.image_into(img)
        img.acquires.extend(sorted(self._acquires))
        for seq in sorted(self._releases):
            img.release_seqs.append(seq)
            img.release_of.append(self._releases[seq])
        img.open_brackets.extend(sorted(self._open_brackets))
        img.unapplied.extend(sorted(self._unapplied))
        return img

    def _restore(self, img: snpb.KernelImage, image_seq: int) -> None:
        """Take ``img`` as this (fresh) kernel's state; every reference in it
        checked, so that a bad image is refused here, not half-used."""

        def bad(why: str) -> ImageRejected:
            return ImageRejected(f"the kernel image at seq {image_seq} is unusable: {why}")

        if image_seq < -1 or image_seq >= self._ledger.size:
            raise bad(f"the ledger has {self._ledger.size} records")
        in_force = InForceStack.restore(img, image_seq, bad)
        effects = in_force.effect_seqs
        refs = [*img.acquires, *img.release_seqs, *img.release_of, *img.unapplied]
        if any(s not in effects for s in [*refs, *img.open_brackets]):
            raise bad("a bracket or unapplied effect is not an effect in it")
        if not set(img.open_brackets) <= set(img.acquires):
            raise bad("a held bracket is not an acquire")
        try:
            for op in img.state:
                if not op.HasField("value"):
                    raise bad(f"state entry {op.family}/{op.key} has no value")
            self.state.apply(img.state)
            acquires = {s: parse_effect(self._ledger.read(s).payload, s) for s in img.acquires}
            unapplied = {s: parse_effect(self._ledger.read(s).payload, s) for s in img.unapplied}
        except (KernelError, NagaError) as exc:
            raise bad(str(exc)) from None
        self._versions = dict(img.versions)
        self._in_force = in_force
        self._acquires = acquires
        self._releases = dict(zip(img.release_seqs, img.release_of, strict=True))
        self._open_brackets = {s: acquires[s] for s in sorted(img.open_brackets)}
        self._unapplied = unapplied

    def version(self, family: str) -> int:
        """An epoch of ``family``: it moves with every journaled op on the
        family (a registration, a perform's ops, a rollback or an abort that
        changes one of its entries), so a reader that saw a value and this
        number knows, by one comparison, whether to look again. Every state
        change passes through here, whoever made it. Not a count of distinct
        values: an op writing the value already there moves it too."""
        return self._versions.get(family, 0)

    def _absorb(self, seq: int, effect: kpb.Effect) -> None:
        self.state.apply(effect.forward)
        versions = self._versions
        for op in effect.forward:
            versions[op.family] = versions.get(op.family, 0) + 1
        top = self._in_force.absorb(seq, effect)
        if effect.do:
            self._unapplied[seq] = effect
        if effect.form == kpb.EFFECT_FORM_ABORT:
            self._unapplied.pop(effect.aborted, None)
        if effect.form == kpb.EFFECT_FORM_ACQUIRE:
            self._acquires[seq] = effect
            self._open_brackets[seq] = effect
        elif effect.form == kpb.EFFECT_FORM_RELEASE:
            self._releases[seq] = effect.bracket
            self._open_brackets.pop(effect.bracket, None)
        elif effect.form in (kpb.EFFECT_FORM_ROLLBACK, kpb.EFFECT_FORM_ABORT):
            self._open_brackets = self._open_at(top)

    def _open_at(self, top: int) -> dict[int, kpb.Effect]:
        """The brackets whose resource is held when ``top`` is in force: a
        rollback into the middle of a bracket acquires it again, and nobody
        holds it then, so the kernel tracks it until it is released (at the
        latest by the next open's recovery)."""
        acquired: list[int] = []
        released: set[int] = set()
        for seq in self._in_force.stack(top):
            if seq in self._acquires:
                acquired.append(seq)
            elif seq in self._releases:
                released.add(self._releases[seq])
        return {a: self._acquires[a] for a in sorted(acquired) if a not in released}

    @property
    def open_brackets(self) -> tuple[int, ...]:
        """Seqs of the ACQUIRE effects whose resource is held now."""
        return tuple(sorted(self._open_brackets))

    @contextlib.contextmanager
    def staged(self) -> Generator[None]:
        """Stage, do not sync, the records of the effects made inside; the
        caller commits the ledger before it acknowledges any of them."""
        self._staging += 1
        try:
            yield
        finally:
            self._staging -= 1

    def _append(self, kind: str, payload: bytes) -> int:
        if self._staging:
            return self._ledger.stage(Entry.of(kind, payload)).seq
        return self._ledger.append(kind, payload).seq

    def _journal(self, effect: kpb.Effect) -> int:
        seq = self._append(EFFECT_KIND, effect.SerializeToString(deterministic=True))
        self._absorb(seq, effect)
        if effect.do:
            self._ledger.commit()  # write-ahead: durable before the world changes
            self._run_world(seq, effect)
        return seq

    def _run_world(self, seq: int, effect: kpb.Effect) -> None:
        """Run the world actions of the journaled effect ``seq``, then its
        marker; if one raises, journal the ABORT and raise ActionFailed."""
        for act in effect.do:
            try:
                self._actions.run(act)
            except Exception as exc:  # any handler error aborts; cancellation is a BaseException
                abort_seq = self._abort(seq, effect, f"{type(exc).__name__}: {exc}")
                raise ActionFailed(seq, abort_seq, act.name, str(exc)) from exc
        self._append(APPLIED_KIND, seq.to_bytes(8, "big"))
        self._unapplied.pop(seq, None)

    def _abort(self, seq: int, effect: kpb.Effect, failure: str) -> int:
        ops = list(effect.inverse)
        abort = kpb.Effect(
            form=kpb.EFFECT_FORM_ABORT,
            description=f"aborted {seq} ({effect.description}): {failure}"[:1000],
            forward=ops,
            inverse=self.state.inverse_of(ops),
            do=list(effect.undo),
            aborted=seq,
            failure=failure[:4000],
        )
        abort_seq = self._append(EFFECT_KIND, abort.SerializeToString(deterministic=True))
        self._absorb(abort_seq, abort)
        self._ledger.commit()
        self._compensate(abort_seq, abort)
        return abort_seq

    def _compensate(self, abort_seq: int, abort: kpb.Effect) -> None:
        """Run an ABORT's undo actions. One that raises leaves the ABORT
        without its marker, so the next open tries again; an abort is never
        itself aborted."""
        for act in abort.do:
            try:
                self._actions.run(act)
            except Exception as exc:  # translated; cancellation is a BaseException
                raise KernelError(
                    f"compensation of effect {abort.aborted} failed ({act.name}): {exc}"
                ) from exc
        if abort.do:
            self._append(APPLIED_KIND, abort_seq.to_bytes(8, "big"))
            self._unapplied.pop(abort_seq, None)

    # --- the three forms -------------------------------------------------------

    def register(
        self, family: str, key: str, value: Scalar | None, *, description: str = ""
    ) -> int:
        """Set (or, with None, remove) one entry; the inverse is derived."""
        forward = [set_op(family, key, value)]
        refuse_pinned(forward)
        return self._journal(
            kpb.Effect(
                form=kpb.EFFECT_FORM_REGISTER,
                description=description or f"set {family}/{key}",
                forward=forward,
                inverse=self.state.inverse_of(forward),
            )
        )

    def perform(
        self,
        do: Sequence[kpb.Action],
        undo: Sequence[kpb.Action] | None,
        *,
        description: str,
        forward: Iterable[kpb.SetOp] = (),
        pinned: bool = False,
    ) -> int:
        """Run world actions with their author's inverse (``undo``); ``None``
        marks the effect irreversible: rollbacks report it, never fake it.
        ``pinned``: the ops may touch PINNED_FAMILIES (the constitution's own
        module only)."""
        ops = list(forward)
        if not pinned:
            refuse_pinned(ops)
        return self._journal(
            kpb.Effect(
                form=kpb.EFFECT_FORM_PERFORM,
                description=description,
                forward=ops,
                inverse=self.state.inverse_of(ops),
                do=list(do),
                undo=list(undo or ()),
                irreversible=undo is None,
            )
        )

    @contextlib.contextmanager
    def bracket(
        self, acquire: kpb.Action, release: kpb.Action, *, description: str
    ) -> Generator[int]:
        """Acquire, use, release; a crash in between is released on open."""
        seq = self._journal(
            kpb.Effect(
                form=kpb.EFFECT_FORM_ACQUIRE,
                description=description,
                do=[acquire],
                undo=[release],
            )
        )
        try:
            yield seq
        finally:
            effect = self._open_brackets.get(seq)
            if effect is not None:
                self._release(seq, effect, f"release: {description}")

    def _release(self, acquire_seq: int, acquired: kpb.Effect, description: str) -> int:
        return self._journal(
            kpb.Effect(
                form=kpb.EFFECT_FORM_RELEASE,
                description=description,
                bracket=acquire_seq,
                do=list(acquired.undo),
                undo=list(acquired.do),
            )
        )

    # --- one effect undone ---------------------------------------------------------

    def effect_at(self, seq: int) -> kpb.Effect | None:
        """The effect journaled as record ``seq``; None if that record is
        not a kernel effect (or the ledger has no such record)."""
        self._ledger.commit()  # what is staged must be readable first
        if not 0 <= seq < self._ledger.size:
            return None
        record = self._ledger.read(seq)
        if record.kind != EFFECT_KIND:
            return None
        return parse_effect(record.payload, seq)

    def revert(self, seq: int, *, description: str) -> int:
        """Undo the one PERFORM effect ``seq`` by its author's inverse: a new
        reversible PERFORM whose world actions are its ``undo`` (and whose
        own undo is its ``do``), journaled like any other. Unlike a rollback
        it leaves every later effect in force, so it is for an effect no
        later one builds on (the start's undo of a tool call a crash
        interrupted). Refused for an effect with state ops (undoing them
        out of order would take back later changes), an irreversible one,
        or one without world actions."""
        effect = self.effect_at(seq)
        if effect is None or effect.form != kpb.EFFECT_FORM_PERFORM:
            raise KernelError(f"ledger entry {seq} is not a perform effect")
        if effect.irreversible or not effect.undo:
            raise KernelError(f"effect {seq} has no inverse: it cannot be undone")
        if effect.forward:
            raise KernelError(f"effect {seq} changed kernel state: only a rollback undoes it")
        return self._journal(
            kpb.Effect(
                form=kpb.EFFECT_FORM_PERFORM,
                description=description,
                do=list(effect.undo),
                undo=list(effect.do),
            )
        )

    # --- rollback ----------------------------------------------------------------

    def _effects_after(self, to_seq: int) -> list[tuple[int, kpb.Effect]]:
        self._ledger.commit()  # what is staged must be readable (and durable) first
        if to_seq >= self._ledger.size:
            raise NotFound(f"no ledger entry {to_seq}: the ledger has {self._ledger.size}")
        if to_seq < -1:
            raise KernelError("rollback target must be a ledger seq (or -1 for the start)")
        return [(seq, self._read_effect(seq)) for seq in self._in_force.after(to_seq)]

    def _read_effect(self, seq: int) -> kpb.Effect:
        return parse_effect(self._ledger.read(seq).payload, seq)

    def _plan(self, to_seq: int) -> tuple[kpb.Effect, RollbackPreview]:
        effects = self._effects_after(to_seq)
        return plan_rollback(
            self.state,
            to_seq=to_seq,
            through=self._ledger.size - 1,
            effects=effects,
            path=self._in_force.path(to_seq),
            read=self._read_effect,
            keeps=self._keeps,
        )

    def preview_rollback(self, to_seq: int) -> RollbackPreview:
        """Dry run: what would change, which actions would run, what cannot be undone."""
        return self._plan(to_seq)[1]

    def rollback(self, to_seq: int, *, by_owner: bool = False) -> tuple[int, RollbackPreview]:
        """Keep entry ``to_seq``, undo every later effect (last first); the
        rollback is itself an effect. Returns its seq and what it did."""
        effect, preview = self._plan(to_seq)
        # INV-6: a rollback can bring back a privilege that was lowered since
        # (a peer's trust, a mode). Privileges never rise without the owner.
        raised = [c for ratchet in self._ratchets for c in ratchet(preview.changes)]
        if raised and not by_owner:
            what = ", ".join(f"{c.family}/{c.key}: {c.before!r} -> {c.after!r}" for c in raised)
            raise OwnerRequired(
                f"rolling back to {to_seq} would raise privileges ({what}); only the owner can"
            )
        return self._journal(effect), preview

    def seq_at_time(self, timestamp_ns: int) -> int:
        """The last ledger seq written at or before ``timestamp_ns`` (-1 if none)."""
        self._ledger.commit()
        lo, hi = 0, self._ledger.size
        while lo < hi:  # timestamps never go backwards in the ledger
            mid = (lo + hi) // 2
            if self._ledger.read(mid).timestamp_ns <= timestamp_ns:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1


__all__ = [
    "APPLIED_KIND",
    "EFFECT_KIND",
    "ActionFailed",
    "Actions",
    "ImageRejected",
    "Keep",
    "PINNED_FAMILIES",
    "PinnedFamily",
    "Change",
    "Kernel",
    "OwnerRequired",
    "Ratchet",
    "RollbackPreview",
    "action",
    "replay",
]
