"""What the agent's start needs from the ledger, as one fold over its
records that can be imaged at any position and continued from the image
(docs/adr/0022-hands-startup-snapshot.md).

The fold is a pure function of the records it was shown (their timestamps,
never the clock): every session's summary and the records a reload of its
detail reads, the turns with a message and no end, and the expiry of every
executor token minted with one. At start it is continued from a snapshot's
image over the records after it (or from nothing over the whole ledger);
the running core keeps it following the ledger so that the next snapshot
can image it at the same record as the kernel."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from google.protobuf.message import DecodeError

from naga.constants import IDEMPOTENCY_KEYS_KEPT
from naga.v1 import authz_pb2 as zpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.agent import _recover
from naga_core.agent import _sessions as rec
from naga_core.agent._config import EXECUTOR_ROLE
from naga_core.agent._distill_due import DueFold
from naga_core.agent._distill_idle import IdleFold
from naga_core.agent._errors import AgentError
from naga_core.authz import MINTED_KIND, SPENT_FAMILY
from naga_core.kernel import EFFECT_KIND
from naga_core.ledger import Ledger, Record
from naga_core.memory import MemoryFold
from naga_core.skills import Usage


class FoldImageRejected(AgentError):
    """An agent image does not hold together (the start replays in full)."""


class Follower(Protocol):
    """A part of the start-up state kept by a layer above the agent (the
    scheduler's fire log): shown every record the fold folds, in order."""

    def see(self, record: Record) -> None: ...


class StartFold:
    """The agent's start-up state after record :attr:`seq` (-1: none yet)."""

    def __init__(
        self,
        *,
        keys_kept: int = IDEMPOTENCY_KEYS_KEPT,
        entries_kept: int = rec.KEPT_ENTRIES,
        also: Sequence[Follower] = (),
    ) -> None:
        self.seq = -1
        #: shown every record too: one pass over the ledger feeds them all
        self.also = tuple(also)
        #: the memory store's items (opened by the store at start)
        self.memory = MemoryFold()
        #: the skills' usage counts (skill.turn records)
        self.usage = Usage()
        # No detail kept: the summaries and reload lists are the image.
        self.sessions = rec.Sessions(kept=0, keys_kept=keys_kept, entries_kept=entries_kept)
        self.open = _recover.OpenTurns()
        #: executor token id -> its expiry (Unix ns), in ledger order
        self.expiries: dict[bytes, int] = {}
        #: ids of tokens minted without an expiry or for another role (their
        #: spending is never swept), while kernel state holds their spending
        self.lasting: set[bytes] = set()
        #: ids whose spending came into kernel state after :meth:`prune`
        #: dropped what the fold knew of them (a rollback brought it back):
        #: :meth:`resolve` finds their tokens again
        self.unknown: set[bytes] = set()
        #: the archived sessions not distilled since (distill18)
        self.distill_due = DueFold()
        #: what idle sessions' distillations need (idle18)
        self.distill_idle = IdleFold()

    def see(self, record: Record) -> None:
        """Fold one record; records come in ledger order, each once."""
        if record.seq <= self.seq:
            return
        self.seq = record.seq
        self.open.see(record)
        self.memory.see(record)
        self.usage.see_record(record)
        for part in self.also:
            part.see(record)
        if record.kind == MINTED_KIND:
            self._minted(record)
            return
        if record.kind == EFFECT_KIND:
            try:  # parsed once for both of its readers
                effect = kpb.Effect.FromString(record.payload)
            except DecodeError:
                return
            self._applied(effect)
            self.distill_due.see_effect(record.seq, effect)
            return
        self.distill_due.see(record)
        body = rec.body_of(record)
        self.distill_idle.see(record, body)
        if body is not None:
            self.sessions.note(record.kind, body, record.seq, record.timestamp_ns)

    def advance(self, ledger: Ledger, to_seq: int | None = None) -> int:
        """Fold the durable records after :attr:`seq` (through ``to_seq``);
        how many. Reads the disk: off the trio loop, but for a short tail."""
        end = ledger.size if to_seq is None else min(ledger.size, to_seq + 1)
        n = 0
        for record in ledger.iter_records(self.seq + 1, end):
            self.see(record)
            n += 1
        return n

    def _minted(self, record: Record) -> None:
        try:
            minted = zpb.TokenMinted.FromString(record.payload)
        except DecodeError:
            return  # not ours to judge: `naga ledger verify` checks records
        if minted.role == EXECUTOR_ROLE and minted.HasField("expires_at_ns"):
            self.expiries[minted.id] = minted.expires_at_ns
        else:
            self.lasting.add(minted.id)

    def _applied(self, effect: kpb.Effect) -> None:
        """Spending set for a token the fold no longer knows: only a rollback
        past a prune does that (a debit follows its token's mint)."""
        for op in effect.forward:
            if op.family != SPENT_FAMILY or not op.HasField("value"):
                continue
            try:
                tid = bytes.fromhex(op.key)
            except ValueError:
                continue  # not written by BudgetAccount: never swept
            if tid not in self.expiries and tid not in self.lasting:
                self.unknown.add(tid)

    def resolve(self, ledger: Ledger) -> int:
        """Find the tokens of :attr:`unknown` among the mint records: one
        pass over the ledger, only after a rollback brought back spending
        whose token the fold had pruned (rare: rollbacks are the owner's).
        A token not found is kept as lasting: its spending is never
        dropped. How many were looked for. Reads the disk: off the loop."""
        wanted = self.unknown
        if not wanted:
            return 0
        found: dict[bytes, int | None] = {}
        for record in ledger.iter_records(0, self.seq + 1):
            if record.kind != MINTED_KIND:
                continue
            try:
                minted = zpb.TokenMinted.FromString(record.payload)
            except DecodeError:
                continue
            if minted.id in wanted:
                executor = minted.role == EXECUTOR_ROLE and minted.HasField("expires_at_ns")
                found[minted.id] = minted.expires_at_ns if executor else None
        for tid in wanted:
            exp = found.get(tid)
            if exp is None:
                self.lasting.add(tid)
            else:
                self.expiries[tid] = exp
        self.unknown = set()
        return len(wanted)

    def token_expiries(self, spent: set[bytes]) -> list[tuple[int, bytes]]:
        """(expiry, id) of the executor tokens among ``spent``, soonest
        first: what the sweep queues again (naga_core.agent._sweep). After
        :meth:`resolve`, or a token a rollback brought back is missed."""
        return sorted((exp, tid) for tid, exp in self.expiries.items() if tid in spent)

    def prune(self, keep: Iterable[bytes], now_ns: int, *, revoked: Iterable[bytes] = ()) -> None:
        """Forget the expiries no later sweep can need: tokens past their
        expiry whose spending kernel state no longer holds (``keep``); and
        the lasting tokens that hold none and are ``revoked`` (they can
        spend no more). A rollback that brings such spending back is seen
        by :meth:`see`, and :meth:`resolve` finds the token again."""
        held = set(keep)
        self.expiries = {t: e for t, e in self.expiries.items() if t in held or e > now_ns}
        dead = set(revoked) - held
        self.lasting -= dead
        self.unknown &= held

    # --- images -------------------------------------------------------------------

    def image(self) -> snpb.AgentImage:
        img = snpb.AgentImage()
        img.sessions.extend(self.sessions.image())
        for t in self.open.found():
            img.open_turns.append(
                snpb.OpenTurnImage(
                    session=t.session,
                    turn_id=t.turn_id,
                    key=t.key,
                    peer=t.peer,
                    text=t.text,
                    trust=t.trust,
                    risk=t.risk,
                    message_seq=t.message_seq,
                    mode=t.mode,
                    steering=t.steering,
                    model_calls=t.model_calls,
                    tools=sorted(t.tools),
                    resumed=t.resumed,
                    calls=[
                        snpb.OpenToolCall(
                            call_id=c.call_id, tool=c.tool, link_seqs=c.links, answered=c.answered
                        )
                        for c in t.calls.values()
                    ],
                    step_seqs=t.steps,
                )
            )
        img.expiries.extend(
            snpb.TokenExpiry(id=tid, expires_at_ns=exp) for tid, exp in self.expiries.items()
        )
        img.memory.CopyFrom(self.memory.image())
        img.skills.CopyFrom(self.usage.image())
        img.lasting.extend(sorted(self.lasting))
        img.unknown.extend(sorted(self.unknown))
        img.distill_due.extend(self.distill_due.image())
        img.distill_idle.extend(self.distill_idle.image())
        return img

    @classmethod
    def restore(
        cls,
        img: snpb.AgentImage,
        seq: int,
        *,
        keys_kept: int = IDEMPOTENCY_KEYS_KEPT,
        entries_kept: int = rec.KEPT_ENTRIES,
        also: Sequence[Follower] = (),
    ) -> StartFold:
        """``also``: the followers, each already restored at ``seq``."""
        fold = cls(keys_kept=keys_kept, entries_kept=entries_kept, also=also)
        fold.seq = seq
        try:
            fold.sessions.restore(img.sessions, through=seq)
            fold.memory = MemoryFold.restore(img.memory, through=seq)
            fold.usage = Usage.restore(img.skills)
            fold.distill_due = DueFold.restore(img.distill_due, through=seq)
            fold.distill_idle = IdleFold.restore(img.distill_idle, through=seq)
        except ValueError as exc:
            raise FoldImageRejected(f"the agent image at seq {seq} is unusable: {exc}") from None
        for t in img.open_turns:
            if (
                t.message_seq > seq
                or not t.turn_id
                or any(not t.message_seq < s <= seq for s in t.step_seqs)
                or list(t.step_seqs) != sorted(set(t.step_seqs))
            ):
                raise FoldImageRejected(f"the agent image at seq {seq} has a bad open turn")
            fold.open.add(
                _recover.OpenTurn(
                    session=t.session,
                    turn_id=t.turn_id,
                    key=t.key,
                    peer=t.peer,
                    text=t.text,
                    trust=t.trust,
                    risk=t.risk,
                    message_seq=t.message_seq,
                    mode=t.mode,
                    steering=list(t.steering),
                    model_calls=t.model_calls,
                    tools=set(t.tools),
                    resumed=t.resumed,
                    calls={
                        c.call_id: _recover.OpenCall(
                            c.call_id, c.tool, list(c.link_seqs), answered=c.answered
                        )
                        for c in t.calls
                    },
                    steps=list(t.step_seqs),
                )
            )
        fold.expiries = {e.id: e.expires_at_ns for e in img.expiries}
        fold.lasting = set(img.lasting)
        fold.unknown = set(img.unknown)
        return fold


__all__ = ["FoldImageRejected", "Follower", "StartFold"]
