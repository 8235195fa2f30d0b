"""One running turn as the core sees it: its events, in order, for every
stream that watches it, and what its executor's calls need to check.

Text deltas arrive per token-ish chunk from the provider worker. They are
coalesced rather than queued one event each: deltas that arrive while no
stream is waiting wait as text and become one TextDelta event when a
stream next reads (or before the next other event, to keep the order). So
a fast reader sees every chunk as it comes, and a slow one (or none) costs
one event per read, never one per chunk."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, Protocol

import trio

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._prompt import Budget
from naga_core.agent._results import Stored


class Running:
    """A turn between its message and its end."""

    def __init__(
        self,
        *,
        turn_id: str,
        session: str,
        key: str,
        peer: str,
        trust: TrustLevel,
        risk: Risk,
    ) -> None:
        self.id = turn_id
        self.session = session
        self.key = key
        self.peer = peer
        self.trust = trust
        self.risk = risk
        self.token_id = b""
        self.token_expires_ns = 0
        self.message_seq = 0
        #: the seq of its recorded reply or error, once staged
        self.end_seq = 0
        self.accepted = False
        #: Set at its first model or tool call: from then on the turn has
        #: reached the world and its job is never handed to an executor again.
        self.called = False
        self.events: list[tpb.TurnEvent] = []
        self.done = False
        self.aborted = False
        self.scope = trio.CancelScope()
        self.steering: list[str] = []
        #: Set once its last model answer is in (no tool call and no steering
        #: came while it was made) or a call ended the turn (an error, the
        #: budget): a steer then reaches no model call of it and is refused,
        #: so the gateway sends it as the next message (docs/adr/0059).
        self.steering_closed = False
        #: The turn this one's interrupt message aborted: its end is made
        #: durable before this message is acknowledged.
        self.interrupts: Running | None = None
        #: Folders of the skill versions it viewed, read-only in its shell
        #: commands (naga_core.skills._files).
        self.skill_dirs: list[str] = []
        #: The images sent with its message (references; adr 0047).
        self.images: list[mpb.ImagePart] = []
        #: The turn's deadline (trio time); every hop below gets a share of
        #: what is left (docs/adr/0009-turn-deadline-scheme.md).
        self.deadline = math.inf
        #: Seconds the channel held the message before the core had it
        #: (RunTurnRequest.waited_ms): taken off the deadline.
        self.waited_s = 0.0
        #: What the prompt budget left out of this turn's prompt, in words
        #: (docs/adr/0010-prompt-budget.md); said in every turn.model record.
        self.omitted: list[str] = []
        self.dropped_seqs: list[int] = []
        #: The prompt budget of the turn's model (set with its job), and the
        #: index range of the job's history messages in each request.
        self.budget = Budget(0, 0, 0)
        self.history: tuple[int, int] = (1, 1)
        #: Results of this turn stored whole as blobs, by call id.
        self.stored: dict[str, Stored] = {}
        #: A re-run after a stop: the steps it had recorded, as the model
        #: saw them, sent after its message (it resumes from them).
        self.resume: list[mpb.ChatMessage] = []
        self._changed = trio.Event()
        self._text: list[str] = []
        self._ended = False

    def left_s(self) -> float:
        """Seconds left before the turn's deadline."""
        return self.deadline - trio.current_time()

    def emit(self, event: tpb.TurnEvent) -> None:
        self._flush()
        self._append(event)
        if event.WhichOneof("kind") in ("final", "error"):
            self._ended = True

    def delta(self, text: str) -> None:
        """More of the reply's text, as the model produces it. Ignored once
        the turn is aborted or has its last event (a model call still in
        flight then has no one to show it to)."""
        if not text or self._ended or self.done or self.aborted:
            return
        self._text.append(text)
        self._wake()

    def streamed(self) -> str:
        """Every text delta shown so far (what an aborted turn keeps as its
        partial text: the reader saw it)."""
        shown = "".join(e.delta.text for e in self.events if e.WhichOneof("kind") == "delta")
        return shown + "".join(self._text)

    def _flush(self) -> None:
        if self._text:
            text = "".join(self._text)
            self._text.clear()
            self._append(tpb.TurnEvent(delta=tpb.TextDelta(text=text)))

    def _append(self, event: tpb.TurnEvent) -> None:
        event.index = len(self.events)
        self.events.append(event)
        self._wake()

    def end(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_ended(self) -> None:
        """Until its last event (final or error, sent once durable) or its end."""
        while not self._ended and not self.done:
            await self._changed.wait()

    async def wait_past(self, count: int) -> None:
        while len(self.events) <= count and not self._text and not self.done:
            await self._changed.wait()
        self._flush()


class Starter(Protocol):
    """What :class:`Reloading` needs of the agent."""

    async def session(self, name: str) -> object: ...

    def start(self, caller: Any, req: tpb.RunTurnRequest) -> TurnCursor | Reloading: ...


class Expiring:
    """Tokens of ended turns, by expiry (soonest first)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, bytes]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, expires_ns: int, token_id: bytes, now_ns: int) -> list[bytes]:
        """Add one; take out and return every one expired at ``now_ns``."""
        heapq.heappush(self._heap, (expires_ns, token_id))
        gone: list[bytes] = []
        while self._heap and self._heap[0][0] <= now_ns:
            gone.append(heapq.heappop(self._heap)[1])
        return gone


class TurnCursor:
    """One Run stream: the turn's events from the first, as they come."""

    def __init__(self, running: Running | None, replay: Sequence[tpb.TurnEvent] = ()) -> None:
        self._running = running
        self._replay = list(replay)
        self._sent = 0

    async def next(self) -> Sequence[tpb.TurnEvent] | None:
        if self._running is None:
            batch, self._replay = self._replay, []
            return batch or None
        await self._running.wait_past(self._sent)
        batch = self._running.events[self._sent :]
        if not batch and self._running.done:
            return None
        self._sent += len(batch)
        return batch


class Reloading:
    """A Run stream on a session whose detail must first be read back from
    the ledger: its first read does that (on a worker thread), then starts
    the turn as ``Agent.start`` would have."""

    def __init__(self, agent: Starter, caller: object, req: tpb.RunTurnRequest) -> None:
        self._agent = agent
        self._caller = caller
        self._req = req
        self._inner: TurnCursor | Reloading | None = None

    async def next(self) -> Sequence[tpb.TurnEvent] | None:
        if self._inner is None:
            await self._agent.session(self._req.session)
            self._inner = self._agent.start(self._caller, self._req)
        return await self._inner.next()


__all__ = ["Expiring", "Reloading", "Running", "Starter", "TurnCursor"]
