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

import bisect
import contextlib
import itertools
from array import array
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass

from naga.constants import KERNEL_EFFECT_KIND
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.errors import NagaError, NotFound
from naga_core.kernel._runs import Runs
from naga_core.kernel._state import (
    KernelError,
    Scalar,
    State,
    from_value,
    same_value,
    set_op,
    to_value,
)
from naga_core.ledger import Entry, Ledger

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
        self._effect_seqs = array("q")  # seqs of kernel.effect records, ascending
        # The reversible effects whose world part is in force: a persistent
        # stack, so the stacks after every effect share their common parts.
        # Node n is effect _node_seq[n] on top of node _node_below[n] (-1:
        # none), _node_depth[n] deep; arrays, not objects (ADR 0052: an
        # object a node cost about 120 bytes, these 24).
        self._node_seq = array("q")
        self._node_below = array("q")
        self._node_depth = array("q")
        # The node on top after each effect (-1: nothing in force), as change
        # points (ADR 0052): most effects bring nothing into force, and a
        # list cost 8 bytes each.
        self._in_force = Runs()
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
                kernel._absorb(rec.seq, _parse(rec.payload, rec.seq))
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
        img.effect_seqs.extend(self._effect_seqs)
        node_seq, node_below = self._node_seq, self._node_below
        img.in_force_tops.extend(node_seq[n] if n >= 0 else -1 for n in self._in_force)
        nodes: dict[int, int] = {}  # the nodes a top stands on (not an aborted one's)
        for _, top in self._in_force.runs():  # the tops, in order
            node = top
            while node >= 0 and node_seq[node] not in nodes:
                below = node_below[node]
                nodes[node_seq[node]] = node_seq[below] if below >= 0 else -1
                node = below
        for seq in sorted(nodes):
            img.node_seqs.append(seq)
            img.node_below.append(nodes[seq])
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
        seqs = array("q", img.effect_seqs)
        if len(img.in_force_tops) != len(seqs) or len(img.node_seqs) != len(img.node_below):
            raise bad("its lists disagree in length")
        if any(b <= a for a, b in itertools.pairwise(seqs)) or (
            seqs and not 0 <= seqs[0] <= seqs[-1] <= image_seq
        ):
            raise bad("the effect seqs are not ascending within the ledger")
        nodes: dict[int, int] = {}  # node seq -> node
        node_seq, node_below, node_depth = array("q"), array("q"), array("q")
        for seq, below in sorted(zip(img.node_seqs, img.node_below, strict=True)):
            under = nodes.get(below, -1) if below >= 0 else -1
            if below >= 0 and (under < 0 or below >= seq):
                raise bad(f"in-force node {seq} stands on unknown node {below}")
            nodes[seq] = len(node_seq)
            node_seq.append(seq)
            node_below.append(under)
            node_depth.append(node_depth[under] + 1 if under >= 0 else 1)
        # The image keeps one top an effect, the proto before ADR 0052: the
        # images older cores wrote load, and older cores load these.
        in_force = Runs()
        for top in img.in_force_tops:
            node = nodes.get(top, -1) if top >= 0 else -1
            if top >= 0 and node < 0:
                raise bad(f"in-force top {top} is not a node")
            in_force.append(node)
        effects = set(seqs)
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
            acquires = {s: _parse(self._ledger.read(s).payload, s) for s in img.acquires}
            unapplied = {s: _parse(self._ledger.read(s).payload, s) for s in img.unapplied}
        except (KernelError, NagaError) as exc:
            raise bad(str(exc)) from None
        self._versions = dict(img.versions)
        self._effect_seqs = seqs
        self._node_seq, self._node_below, self._node_depth = node_seq, node_below, node_depth
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

    def _in_force_at(self, seq: int) -> int:
        """The node on top after record ``seq`` (-1: nothing in force)."""
        i = bisect.bisect_right(self._effect_seqs, seq) - 1
        return self._in_force[i] if i >= 0 else -1

    def _push(self, seq: int, below: int) -> int:
        """A new node: effect ``seq`` in force on top of node ``below``."""
        self._node_seq.append(seq)
        self._node_below.append(below)
        self._node_depth.append(self._node_depth[below] + 1 if below >= 0 else 1)
        return len(self._node_seq) - 1

    def _absorb(self, seq: int, effect: kpb.Effect) -> None:
        self.state.apply(effect.forward)
        versions = self._versions
        for op in effect.forward:
            versions[op.family] = versions.get(op.family, 0) + 1
        top = self._in_force[-1] if self._in_force else -1
        if effect.form == kpb.EFFECT_FORM_ROLLBACK:
            top = self._in_force_at(effect.rollback_to)
        elif effect.form == kpb.EFFECT_FORM_ABORT:
            # The world part of the aborted effect never came into force, not
            # even at its own seq (a rollback to it must not run it again):
            # what is in force there and now is what was just before it.
            i = bisect.bisect_left(self._effect_seqs, effect.aborted)
            top = self._in_force[i - 1] if i > 0 else -1
            if i < len(self._in_force):
                self._in_force.set(i, top)
        elif not effect.irreversible and (effect.do or effect.undo):
            top = self._push(seq, top)
        self._effect_seqs.append(seq)
        self._in_force.append(top)
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
        while top >= 0:
            seq = self._node_seq[top]
            if seq in self._acquires:
                acquired.append(seq)
            elif seq in self._releases:
                released.add(self._releases[seq])
            top = self._node_below[top]
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
        _refuse_pinned(forward)
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
            _refuse_pinned(ops)
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
        return _parse(record.payload, seq)

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
        start = bisect.bisect_right(self._effect_seqs, to_seq)
        return [
            (seq, _parse(self._ledger.read(seq).payload, seq)) for seq in self._effect_seqs[start:]
        ]

    def _plan(self, to_seq: int) -> tuple[kpb.Effect, RollbackPreview]:
        effects = self._effects_after(to_seq)
        target = self.state.fork()
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
        now, then = (self._in_force[-1] if self._in_force else -1), self._in_force_at(to_seq)
        node_seq, node_below, depth = self._node_seq, self._node_below, self._node_depth
        leave: list[int] = []  # last first
        enter: list[int] = []  # last first
        while now != then:
            if now >= 0 and (then < 0 or depth[now] >= depth[then]):
                leave.append(node_seq[now])
                now = node_below[now]
            else:  # then >= 0: the two differ and now is the shallower
                enter.append(node_seq[then])
                then = node_below[then]
        known = dict(effects)

        def eff(seq: int) -> kpb.Effect:
            found = known.get(seq)
            return found if found is not None else _parse(self._ledger.read(seq).payload, seq)

        undo_world = [a for s in leave for a in eff(s).undo]
        undo_world += [a for s in reversed(enter) for a in eff(s).do]
        redo_world = [a for s in enter for a in eff(s).undo]
        redo_world += [a for s in reversed(leave) for a in eff(s).do]
        # A pinned family is outside rollback: what a later effect did to it
        # stays (and replays the same: the rollback's ops never name it).
        moved = [
            k
            for k in target.touched()
            if k[0] not in PINNED_FAMILIES and not same_value(self.state.get(k), target.get(k))
        ]
        held = {
            k
            for k in moved
            if any(keep(Change(*k, self.state.get(k), target.get(k))) for keep in self._keeps)
        }
        changed = sorted(k for k in moved if k not in held)
        # An effect whose every op a keep holds, with no world part: it stays.
        kept = tuple(
            seq
            for seq, e in effects
            if e.forward and not e.undo and all((op.family, op.key) in held for op in e.forward)
        )
        forward = [set_op(f, k, target.get((f, k))) for f, k in changed]
        inverse = [set_op(f, k, self.state.get((f, k))) for f, k in changed]
        through = self._ledger.size - 1
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
            changes=tuple(
                Change(f, k, self.state.get((f, k)), target.get((f, k))) for f, k in changed
            ),
            world_actions=tuple(undo_world),
            irreversible=tuple(irreversible),
            kept=kept,
        )
        return effect, preview

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


def _refuse_pinned(ops: Iterable[kpb.SetOp]) -> None:
    for op in ops:
        if op.family in PINNED_FAMILIES:
            raise PinnedFamily(
                f"kernel family {op.family!r} is pinned: no ordinary effect changes it"
            )


def _parse(payload: bytes, seq: int) -> kpb.Effect:
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
            state.apply(_parse(rec.payload, rec.seq).forward)
    return state


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
    "Ratchet",
    "RollbackPreview",
    "action",
    "replay",
]
