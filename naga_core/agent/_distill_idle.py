"""Distillation of idle sessions (idle18,
docs/adr/0055-idle18-idle-distillation.md).

With ``memory.distill_idle_h`` above 0 (0, the default, is off), a session
whose last turn ended that many hours ago and that has a message no
``memory.distill`` record covered yet is distilled, only its entries after
the newest one covered (the record's ``through_seq``). What is due is
derived from the ledger by :class:`IdleFold` (a part of the start fold,
imaged in the start-up snapshot): a distillation a stop or a crash cut
short left no record and is due again; one recorded is not redone.

:func:`watch_idle` is the timer: a task of the runner's nursery
(naga_core.agent._distill_runner), on trio's clock, that brings its own
copy of the fold to the ledger's head at each check (off the loop) and
queues what is due, one session at a time through the runner's queue.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

import trio
from google.protobuf.message import DecodeError

from naga.constants import DISTILL_IDLE_CHECK_S, DISTILL_IDLE_RECHECK_S
from naga.v1 import agent_pb2 as apb
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.agent import _sessions as rec
from naga_core.agent._distill_due import DISTILL
from naga_core.ledger import Ledger, Record

log = logging.getLogger("naga.agent")

#: The setting: hours a session is idle before its new messages are distilled.
IDLE_SETTING = "memory.distill_idle_h"
_HOUR_NS = 3600 * 1_000_000_000


class IdleFold:
    """Session -> [last message seq, last turn end seq, its record time,
    newest entry covered by a distillation (-1: none)]; :attr:`seq` is the
    last record folded (-1: none)."""

    def __init__(self) -> None:
        self.seq = -1
        self._of: dict[str, list[int]] = {}

    def _state(self, session: str) -> list[int]:
        found = self._of.get(session)
        if found is None:
            found = self._of[session] = [-1, -1, 0, -1]
        return found

    def see(self, record: Record, body: apb.TurnRecord | None = None) -> None:
        """One record (``body``: its TurnRecord, when the caller parsed it)."""
        if record.seq <= self.seq:
            return
        self.seq = record.seq
        if record.kind == DISTILL:
            self._distilled(record)
            return
        if record.kind not in (rec.MESSAGE, rec.REPLY, rec.ERROR):
            return
        if body is None:
            body = rec.body_of(record)
            if body is None:
                return
        state = self._state(body.session)
        if record.kind == rec.MESSAGE:
            state[0] = record.seq
        else:
            state[1], state[2] = record.seq, record.timestamp_ns

    def _distilled(self, record: Record) -> None:
        try:
            body = mmpb.MemoryDistillRecord.FromString(record.payload)
        except DecodeError:
            return  # DueFold says so in the log
        if not body.session or body.through_seq < 0:
            return  # a call with no usable answer covered nothing (adr 0058)
        # A record before idle18 has no through_seq: it was shown the
        # history as it stood, everything before the record itself.
        through = body.through_seq if body.through_seq > 0 else record.seq
        state = self._state(body.session)
        state[3] = max(state[3], through)

    def covered(self, session: str) -> int:
        """The newest entry of ``session`` a distillation covered (-1: none)."""
        found = self._of.get(session)
        return found[3] if found is not None else -1

    def advance(self, ledger: Ledger) -> int:
        """Fold the durable records after :attr:`seq`; how many. Reads the
        disk: off the trio loop."""
        n = 0
        for record in ledger.iter_records(self.seq + 1, ledger.size):
            self.see(record)
            n += 1
        return n

    def due(self, now_ns: int, idle_ns: int) -> tuple[list[tuple[str, int, int]], int | None]:
        """The sessions due at ``now_ns``, each (session, newest entry
        covered, its last message), longest idle first; and the record time
        at which the next session waiting becomes due (None: none waits)."""
        out: list[tuple[int, str, int, int]] = []
        soonest: int | None = None
        for session, (said, ended, ended_ns, covered) in self._of.items():
            # Nothing new, or its last message's turn has not ended.
            if said <= covered or ended < said:
                continue
            at = ended_ns + idle_ns
            if at <= now_ns:
                out.append((ended_ns, session, covered, said))
            elif soonest is None or at < soonest:
                soonest = at
        out.sort()
        return [(s, covered, said) for _, s, covered, said in out], soonest

    def copy(self) -> IdleFold:
        fold = IdleFold()
        fold.seq = self.seq
        fold._of = {s: list(v) for s, v in self._of.items()}
        return fold

    def image(self) -> list[snpb.DistillIdle]:
        return [
            snpb.DistillIdle(
                session=s, said_seq=v[0], ended_seq=v[1], ended_ns=v[2], covered_seq=v[3]
            )
            for s, v in sorted(self._of.items())
        ]

    @classmethod
    def restore(cls, items: Iterable[snpb.DistillIdle], *, through: int) -> IdleFold:
        """The fold imaged at seq ``through``; ValueError if it cannot be."""
        fold = cls()
        fold.seq = through
        for i in items:
            seqs = (i.said_seq, i.ended_seq, i.covered_seq)
            if not i.session or i.session in fold._of or not all(-1 <= s <= through for s in seqs):
                raise ValueError(f"an idle session's state is not of records up to {through}")
            fold._of[i.session] = [i.said_seq, i.ended_seq, i.ended_ns, i.covered_seq]
        return fold


async def watch_idle(
    fold: IdleFold,
    *,
    hours: Callable[[], float],
    advance: Callable[[IdleFold], Awaitable[object]],
    queue: Callable[[str, int], bool],
    skip: Callable[[str], bool],
    now_ns: Callable[[], int],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Queue the idle sessions due until cancelled. ``hours``: the setting;
    ``advance``: brings ``fold`` to the ledger's head; ``queue(session,
    after)``: the runner's; ``skip(session)``: a turn runs in it, or it is
    archived (its archive's distillation covers it); ``now_ns``: the clock
    the records were stamped with."""
    task_status.started()
    #: session -> the last message an idle distillation was queued for: not
    #: queued again for it while its record is not yet folded (or if it
    #: recorded nothing); a restart forgets it, and the fold decides.
    queued: dict[str, int] = {}
    while True:
        h = hours()
        if h <= 0:
            await trio.sleep(DISTILL_IDLE_RECHECK_S)
            continue
        idle_ns = int(h * _HOUR_NS)
        await advance(fold)
        now = now_ns()
        due, soonest = fold.due(now, idle_ns)
        for session, covered, said in due:
            if queued.get(session, -1) >= said or skip(session):
                continue
            if queue(session, covered):
                queued[session] = said
                log.info("distill: session %s idle for %g h, queued", session, h)
        # Until the next known session is due, and at most one period: a
        # turn that ends meanwhile is seen at the next check.
        wait = min(DISTILL_IDLE_CHECK_S, h * 3600.0)
        if soonest is not None:
            wait = min(wait, max((soonest - now) / 1e9, 0.0))
        await trio.sleep(max(wait, 0.001))


__all__ = ["IDLE_SETTING", "IdleFold", "watch_idle"]
