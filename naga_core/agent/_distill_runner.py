"""Distillations in the background (distill18,
docs/adr/0050-distill18-background-distillation.md).

Archiving a session answers once its archive mark is recorded; the
session's distillation (one model call, naga_core.agent._distill) is queued
here and run by :meth:`Distillations.serve`, a task of the core's nursery
started in order by the composition root (naga_core.daemon._serve), at most
``DISTILL_AT_ONCE`` at a time, so a burst of archives queues instead of
flooding the model that the turns need too. Its outcome is its
``memory.distill`` record, as before; a failed call is that outcome.

The core's stop cancels the nursery: the call in flight ends and records
nothing, the queue is dropped. What the last core left undone is found at
start from the ledger (the fold's :class:`DueFold`) and queued again before
the core serves: an archived session is distilled once per archive.

With ``memory.distill_idle_h`` on, the timer of naga_core.agent._distill_idle
queues idle sessions here too, each with the newest entry a distillation
covered already (docs/adr/0055-idle18-idle-distillation.md).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterable

import trio

from naga.constants import DISTILL_AT_ONCE
from naga_core.agent._agent import Agent
from naga_core.agent._distill import distill
from naga_core.agent._distill_due import ARCHIVED_FAMILY
from naga_core.agent._distill_idle import IDLE_SETTING, IdleFold, watch_idle
from naga_core.errors import NagaError

log = logging.getLogger("naga.agent")


class Distillations:
    """The queue of sessions to distil and the tasks that distil them."""

    def __init__(
        self,
        agent: Agent,
        *,
        at_once: int = DISTILL_AT_ONCE,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._agent = agent
        self._at_once = at_once
        #: the clock the ledger stamps records with (idle sessions' age)
        self._clock = clock
        self._send, self._receive = trio.open_memory_channel[str](math.inf)
        #: queued and not started -> None (an archive's: the whole history)
        #: or the newest entry covered already (an idle session's: only the
        #: entries after it); archiving one again queues nothing more
        self._queued: dict[str, int | None] = {}
        #: the idle timer's copy of the start fold's idle part (serve's
        #: ``idle``): what distillations covered, as of its last look
        self._idle: IdleFold | None = None
        #: while a look brings it to the head on a worker thread (not read
        #: then), and the event set when that look ends
        self._folding = False
        self._folded: trio.Event | None = None
        #: session -> the newest entry a distillation of this runner covered
        #: (seen by the archive's next distillation before the timer's look)
        self._covered: dict[str, int] = {}

    def schedule(self, session: str, *, after: int | None = None) -> bool:
        """Queue ``session``'s distillation (on the trio thread); False if it
        was queued already and has not started (it will read the newest
        history when it does). ``after``: an idle session's, of the entries
        after that seq; an archive's queued over it makes it the archive's."""
        if session in self._queued:
            if after is None:
                self._queued[session] = None
            return False
        self._queued[session] = after
        self._send.send_nowait(session)
        return True

    def _skip_idle(self, session: str) -> bool:
        """Not an idle session to distil now: a turn runs in it, or it is
        archived (its archive's distillation is its end)."""
        agent = self._agent
        if agent.core.kernel.state.get((ARCHIVED_FAMILY, session)) is True:
            return True
        return any(r.session == session for r in agent.running.values())

    async def serve(
        self,
        due: Iterable[str] = (),
        idle: IdleFold | None = None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Queue ``due`` (what the last core left undone), then distil until
        cancelled (the core's stop). ``idle``: the start fold's idle part at
        the head, a copy the idle timer keeps following (none: no timer)."""
        again = [s for s in due if self.schedule(s)]
        if again:
            log.info(
                "distill: %d archived sessions not distilled before the last stop, "
                "queued again: %s",
                len(again),
                ", ".join(again),
            )
        async with trio.open_nursery() as nursery:
            for _ in range(self._at_once):
                nursery.start_soon(self._work)
            if idle is not None:
                self._idle = idle
                ledger = self._agent.core.ledger
                settings = self._agent.core.settings

                async def advance(fold: IdleFold) -> None:
                    self._folding, self._folded = True, trio.Event()
                    try:
                        await trio.to_thread.run_sync(fold.advance, ledger)
                    finally:
                        self._folding = False
                        self._folded.set()

                await nursery.start(
                    functools.partial(
                        watch_idle,
                        idle,
                        hours=lambda: settings.get_real(IDLE_SETTING),
                        advance=advance,
                        queue=lambda s, after: self.schedule(s, after=after),
                        skip=self._skip_idle,
                        now_ns=self._clock,
                    )
                )
            task_status.started()

    async def _work(self) -> None:
        async for session in self._receive:
            after = self._queued.pop(session, None)
            await self._one(session, after)

    async def _one(self, session: str, after: int | None = None) -> None:
        agent = self._agent
        core = agent.core
        if after is not None and self._skip_idle(session):
            # A turn started (or an archive came) since it was queued: its
            # next idle time distils it (or its archive does).
            log.info("distill: idle session %s is in use again; not distilled now", session)
            return
        # Unarchived while queued: it did not end after all (its next
        # archive distils it), as a start would judge it (DueFold).
        if after is None and core.kernel.state.get((ARCHIVED_FAMILY, session)) is not True:
            log.info("distill: session %s was unarchived before its distillation ran", session)
            return
        # An archive's is shown what no distillation covered yet, and
        # recorded with no call when that is nothing (adr 0058): its record
        # is its end all the same (ADR 0050's once per archive).
        shown_after = (
            max(after, 0) if after is not None else max(await self._covered_of(session), 0)
        )
        try:
            found = await agent.session(session)
            done = await distill(
                core,
                agent.workers,
                agent.memory.store,
                session,
                list(found.entries),
                after=shown_after,
                record_nothing_new=after is None,
            )
        except (NagaError, OSError) as exc:
            # A failed model call is recorded as the outcome (in distill);
            # what lands here recorded nothing (no message to distil, the
            # ledger failing): said in the log, the archive stands.
            log.warning("distill: session %s not distilled: %s", session, exc)
            return
        # The records are staged: durable before anyone is told (there is
        # no RPC here whose answer would settle them).
        if await trio.to_thread.run_sync(core.settle):
            core.notify_appended()
        if done.through > self._covered.get(session, -1):
            self._covered[session] = done.through
        log.info("distill: session %s: %s (record %d)", session, done.outcome, done.seq)

    async def _covered_of(self, session: str) -> int:
        """The newest entry of ``session`` a distillation covered, as far as
        this runner knows (the timer's fold as of its last look, and what it
        recorded since); -1: none. Older than the ledger's at worst (the
        owner's by-hand distillations since the last look): an archive is
        then shown more, never less."""
        while self._folding and self._folded is not None:
            await self._folded.wait()
        folded = self._idle.covered(session) if self._idle is not None else -1
        return max(folded, self._covered.get(session, -1))


__all__ = ["Distillations"]
