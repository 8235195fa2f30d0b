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
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import trio

from naga.constants import DISTILL_AT_ONCE
from naga_core.agent._agent import Agent
from naga_core.agent._distill import distill
from naga_core.agent._distill_due import ARCHIVED_FAMILY
from naga_core.errors import NagaError

log = logging.getLogger("naga.agent")


class Distillations:
    """The queue of sessions to distil and the tasks that distil them."""

    def __init__(self, agent: Agent, *, at_once: int = DISTILL_AT_ONCE) -> None:
        self._agent = agent
        self._at_once = at_once
        self._send, self._receive = trio.open_memory_channel[str](math.inf)
        #: queued and not started: archiving one again queues nothing more
        self._queued: set[str] = set()

    def schedule(self, session: str) -> bool:
        """Queue ``session``'s distillation (on the trio thread); False if it
        was queued already and has not started (it will read the newest
        history when it does)."""
        if session in self._queued:
            return False
        self._queued.add(session)
        self._send.send_nowait(session)
        return True

    async def serve(
        self,
        due: Iterable[str] = (),
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Queue ``due`` (what the last core left undone), then distil until
        cancelled (the core's stop)."""
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
            task_status.started()

    async def _work(self) -> None:
        async for session in self._receive:
            self._queued.discard(session)
            await self._one(session)

    async def _one(self, session: str) -> None:
        agent = self._agent
        core = agent.core
        # Unarchived while queued: it did not end after all (its next
        # archive distils it), as a start would judge it (DueFold).
        if core.kernel.state.get((ARCHIVED_FAMILY, session)) is not True:
            log.info("distill: session %s was unarchived before its distillation ran", session)
            return
        try:
            found = await agent.session(session)
            done = await distill(
                core, agent.workers, agent.memory.store, session, list(found.entries)
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
        log.info("distill: session %s: %s (record %d)", session, done.outcome, done.seq)


__all__ = ["Distillations"]
