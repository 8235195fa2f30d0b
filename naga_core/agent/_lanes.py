"""The sessions' lanes, in the core (docs/adr/0013-lanes-home.md): one turn
runs at a time per session; a message sent while one runs is recorded at
once (its ``turn.message``, so it is acknowledged only once durable), then
waits here for its turn. The queue is memory only because the ledger holds
it: every message without an end is a queued or running turn, and the next
start rebuilds the lanes from those records (in message order, interrupt
messages first, as they were queued).

Modes (naga.v1.QueueMode): followup waits at the back; interrupt goes to
the front (the running turn is aborted by the agent); collect waits at the
back and, when its turn comes, takes the collect messages of the same peer
queued right behind it into one turn.

The global cap (``lanes.max_concurrent``, :class:`Cap`) is the core's too
(docs/adr/0028-lanes-core-admission.md): a session's turn, once its lane
lets it go, takes a slot before it executes, first come first served
across sessions. So every channel forwards every message at once and is
answered once it is durable; the core alone decides what runs when.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager

import trio

from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._turn import Running

QUEUED_MODES = frozenset(
    {tpb.QUEUE_MODE_FOLLOWUP, tpb.QUEUE_MODE_COLLECT, tpb.QUEUE_MODE_INTERRUPT}
)


class Waiting:
    """A queued turn's place. A collect turn merged into the one ahead of
    it (``leader``) does not run: it ends with the leader's outcome."""

    def __init__(self, running: Running, mode: int) -> None:
        self.running = running
        self.mode = mode
        self.go = trio.Event()
        #: collect turns of the same peer merged into this one when it goes
        self.collected: list[Waiting] = []
        self.leader: Waiting | None = None
        self.outcome: apb.ExecutorOutcome | None = None
        self.ended = trio.Event()

    @property
    def texts(self) -> list[str]:
        """The texts the turn runs with: its own and the merged ones'."""
        return [w.text for w in (self, *self.collected)]

    text = ""
    position = 0

    def end_collected(self, outcome: apb.ExecutorOutcome) -> None:
        """The leader's outcome is every merged turn's."""
        for w in self.collected:
            w.outcome = outcome
            w.ended.set()


class Lanes:
    """Queued turns per session, in the order they will run."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Waiting]] = {}
        self._by_turn: dict[str, Waiting] = {}

    def __len__(self) -> int:
        return len(self._by_turn)

    def add(self, running: Running, mode: int, text: str) -> Waiting:
        """Queue ``running`` by its mode; its place (``position`` 1: next)."""
        queue = self._queues.setdefault(running.session, deque())
        waiting = Waiting(running, mode)
        waiting.text = text
        self._by_turn[running.id] = waiting
        if mode == tpb.QUEUE_MODE_INTERRUPT:
            queue.appendleft(waiting)
            waiting.position = 1
        else:
            queue.append(waiting)
            waiting.position = len(queue)
        return waiting

    def queued(self, turn_id: str) -> bool:
        return turn_id in self._by_turn

    def by_key(self, session: str, key: str) -> Running | None:
        for w in self._queues.get(session, ()):
            if w.running.key == key:
                return w.running
        return None

    async def wait(self, waiting: Waiting) -> None:
        """Until its turn comes (:meth:`next` let it go, or merged it into
        the collect turn ahead of it: then ``leader`` is set)."""
        await waiting.go.wait()

    def drop(self, running: Running) -> None:
        """Take a queued turn out (it ended before its turn came: aborted)."""
        waiting = self._by_turn.pop(running.id, None)
        if waiting is None:
            return
        queue = self._queues.get(running.session)
        if queue is not None and waiting in queue:
            queue.remove(waiting)
            if not queue:
                del self._queues[running.session]
        waiting.go.set()

    def next(self, session: str) -> Running | None:
        """The session's next turn, let go (with the collect turns behind
        it, if it is one); None when none waits."""
        queue = self._queues.get(session)
        if not queue:
            return None
        first = queue.popleft()
        del self._by_turn[first.running.id]
        if first.mode == tpb.QUEUE_MODE_COLLECT:
            while (
                queue
                and queue[0].mode == tpb.QUEUE_MODE_COLLECT
                and queue[0].running.peer == first.running.peer
            ):
                merged = queue.popleft()
                del self._by_turn[merged.running.id]
                first.collected.append(merged)
                merged.leader = first
                merged.go.set()
        if not queue:
            del self._queues[session]
        first.go.set()
        return first.running


class Cap:
    """Turns executing at once across all sessions, at most the setting
    ``read()`` gives (read again at every admission and by :meth:`refresh`,
    so a change applies live: a raise lets waiting turns go at once, a
    lower cap lets running ones finish). Waiters go in arrival order."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._limiter = trio.CapacityLimiter(max(1, read()))

    @property
    def total(self) -> int:
        return int(self._limiter.total_tokens)

    @property
    def running(self) -> int:
        return int(self._limiter.borrowed_tokens)

    @property
    def waiting(self) -> int:
        return self._limiter.statistics().tasks_waiting

    @property
    def full(self) -> bool:
        """A turn admitted now would wait."""
        return self.waiting > 0 or self.running >= self.total

    def refresh(self) -> None:
        total = max(1, self._read())
        if total != self._limiter.total_tokens:
            self._limiter.total_tokens = total  # wakes waiters on a raise

    @asynccontextmanager
    async def slot(self) -> AsyncGenerator[bool]:
        """Hold a slot while inside; yields whether the turn had to wait."""
        self.refresh()
        try:
            self._limiter.acquire_nowait()
            waited = False
        except trio.WouldBlock:
            await self._limiter.acquire()
            waited = True
        try:
            yield waited
        finally:
            self._limiter.release()


class Admission:
    """What runs when, in the core: each session's current turn (one at a
    time), the lanes behind it, and the global cap. A turn arrives
    (:meth:`arrive`: it becomes its session's current turn, or waits in the
    lane, then :meth:`Lanes.wait` for its go), takes a :meth:`Cap.slot` to
    execute, and leaves when it ended (:meth:`leave`: the session's next
    goes)."""

    def __init__(self, read_cap: Callable[[], int]) -> None:
        self.lanes = Lanes()
        self.cap = Cap(read_cap)
        self._current: dict[str, Running] = {}

    def busy(self, session: str) -> bool:
        return session in self._current

    def current(self, session: str) -> Running | None:
        """The session's turn (executing, or waiting for a slot of the cap)."""
        return self._current.get(session)

    def arrive(self, running: Running, mode: int, text: str) -> Waiting | None:
        """Place ``running``: None if its session was free (it is the
        session's turn now), else its place in the lane (by ``mode``)."""
        if running.session not in self._current:
            self._current[running.session] = running
            return None
        return self.lanes.add(running, mode or tpb.QUEUE_MODE_FOLLOWUP, text)

    def leave(self, running: Running) -> None:
        """``running`` ended (or was dropped while queued): its session's
        next turn, if any, becomes the current one and goes."""
        self.lanes.drop(running)
        if self._current.get(running.session) is running:
            del self._current[running.session]
            following = self.lanes.next(running.session)
            if following is not None:
                self._current[running.session] = following


__all__ = ["QUEUED_MODES", "Admission", "Cap", "Lanes", "Waiting"]
