"""Lanes: one turn at a time per session, a global cap on running turns,
and the queue modes (docs/protocol/websocket.md, "Queue modes").

A message is acknowledged only once it is durable: when the core's
``accepted`` event for its turn arrives (or, for a steer, when the core
returns the steering message's seq). A message still waiting in a lane is
not acknowledged; if the gateway dies, the client resends it with the same
idempotency key, and the core, which dedups keys, never runs it twice.

The cap on running turns and the mode of a message that names none are the
core's settings ``lanes.max_concurrent`` and ``lanes.queue_mode``
(:meth:`Lanes.configure`, called by :mod:`naga_gateway._settings` whenever
they change): a lower cap lets running turns finish and holds new ones
back, a higher one lets waiting ones start at once.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Literal, Protocol

import attrs
import trio

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_gateway._core import CorePort
from naga_gateway.errors import CoreCallFailed, GatewayError, LaneRefused

Mode = Literal["followup", "collect", "steer", "interrupt"]
# A turn whose stream broke because the core went away is run again with
# the same idempotency key (the core replays or resumes it), this many times.
_RUN_ATTEMPTS = 5
_RETRY_BASE_S = 0.1


_PB_TRUST = {
    TrustLevel.UNTRUSTED: cpb.TRUST_LEVEL_UNTRUSTED,
    TrustLevel.GUEST: cpb.TRUST_LEVEL_GUEST,
    TrustLevel.KNOWN: cpb.TRUST_LEVEL_KNOWN,
    TrustLevel.OWNER: cpb.TRUST_LEVEL_OWNER,
}


@attrs.frozen
class Inbound:
    session: str
    text: str
    key: str
    peer: str
    #: None: the lanes' default mode (the core's ``lanes.queue_mode``).
    mode: Mode | None = None
    #: The peer's trust as the gateway derived it; the core caps it by the
    #: gateway's token.
    trust: TrustLevel = TrustLevel.UNTRUSTED


@attrs.frozen
class Ack:
    """A durable message: its ledger seq and the turn that carries it."""

    message_seq: int
    turn_id: str
    steered: bool = False
    replayed: bool = False


class LaneListener(Protocol):
    """Where the lanes report what happens (the event hub)."""

    def message(self, session: str, peer: str, text: str, seq: int) -> None: ...

    def queued(self, session: str, peer: str, key: str, position: int) -> None: ...

    def turn_event(self, session: str, peers: frozenset[str], event: tpb.TurnEvent) -> None: ...


@attrs.define(eq=False)
class _Pending:
    msg: Inbound
    done: trio.Event = attrs.field(factory=trio.Event)
    ack: Ack | None = None
    failure: GatewayError | None = None

    def resolve(self, ack: Ack) -> None:
        if not self.done.is_set():
            self.ack = ack
            self.done.set()

    def fail(self, failure: GatewayError) -> None:
        if not self.done.is_set():
            self.failure = failure
            self.done.set()


@attrs.frozen(eq=False)
class Ticket:
    """A message placed in its lane (``pending`` None: a steer, sent to the
    running turn when waited on)."""

    msg: Inbound
    pending: _Pending | None
    abort_running: bool = False
    #: The same key was already taken: the answer is the first copy's.
    joined: bool = False


@attrs.define(eq=False)
class _Lane:
    queue: deque[_Pending] = attrs.field(factory=deque[_Pending])
    running: bool = False
    turn_id: str | None = None


class Lanes:
    """The sessions' lanes. Start :meth:`serve` in a nursery first."""

    def __init__(
        self,
        core: CorePort,
        listener: LaneListener,
        *,
        max_running: int = 16,
        max_queued: int = 64,
        default_mode: Mode = "followup",
    ) -> None:
        if max_running < 1 or max_queued < 1:
            raise ValueError("max_running and max_queued must be at least 1")
        self._core = core
        self._listener = listener
        self._limiter = trio.CapacityLimiter(max_running)
        self._max_queued = max_queued
        self.default_mode: Mode = default_mode
        self._lanes: dict[str, _Lane] = {}
        self._by_key: dict[tuple[str, str], _Pending] = {}
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    @property
    def max_running(self) -> int:
        """Turns that may run at once across all sessions."""
        return int(self._limiter.total_tokens)

    @property
    def waiting(self) -> int:
        """Sessions whose next turn waits for a free run slot."""
        return self._limiter.statistics().tasks_waiting

    def configure(self, *, max_running: int, default_mode: Mode) -> None:
        """Apply the core's lanes settings from now on (turns already
        running go on; messages already queued keep the mode they got)."""
        if max_running < 1:
            raise ValueError("max_running must be at least 1")
        self._limiter.total_tokens = max_running
        self.default_mode = default_mode

    def running(self, session: str) -> bool:
        lane = self._lanes.get(session)
        return lane is not None and lane.running

    def enqueue(self, msg: Inbound) -> Ticket:
        """Place ``msg`` in its lane now (so messages keep the order they
        arrived in); :meth:`wait` on the ticket for its acknowledgement."""
        known = self._by_key.get((msg.session, msg.key))
        if known is not None:
            # The same message again (a client resending after a reconnect)
            # waits for the first copy instead of queueing twice.
            return Ticket(msg, known, joined=True)
        if msg.mode is None:
            msg = attrs.evolve(msg, mode=self.default_mode)
        lane = self._lanes.setdefault(msg.session, _Lane())
        if msg.mode == "steer" and lane.turn_id is not None:
            return Ticket(msg, None)
        if len(lane.queue) >= self._max_queued:
            raise LaneRefused(
                f"session {msg.session!r} already has {self._max_queued} messages waiting"
            )
        pending = _Pending(msg)
        self._by_key[(msg.session, msg.key)] = pending
        interrupt = msg.mode == "interrupt"
        if interrupt:
            lane.queue.appendleft(pending)
        else:
            lane.queue.append(pending)
        if lane.running:
            self._listener.queued(msg.session, msg.peer, msg.key, len(lane.queue))
        else:
            lane.running = True
            self._start(msg.session, lane)
        return Ticket(msg, pending, abort_running=interrupt and lane.turn_id is not None)

    async def wait(self, ticket: Ticket) -> Ack:
        """Until the ticket's message is durable: its acknowledgement."""
        msg = ticket.msg
        if ticket.pending is None:
            try:
                resp = await self._core.steer(
                    tpb.SteerTurnRequest(
                        session=msg.session, text=msg.text, idempotency_key=msg.key, peer=msg.peer
                    )
                )
            except CoreCallFailed as exc:
                if exc.code != "FAILED_PRECONDITION":
                    raise
                # The turn ended meanwhile: the message becomes the next one.
                return await self.wait(self.enqueue(attrs.evolve(msg, mode="followup")))
            self._listener.message(msg.session, msg.peer, msg.text, resp.message_seq)
            return Ack(resp.message_seq, "", steered=True)
        if ticket.abort_running:
            await self._abort_quietly(msg.session)
        ack = await self._wait(ticket.pending)
        return attrs.evolve(ack, replayed=True) if ticket.joined else ack

    async def submit(self, msg: Inbound) -> Ack:
        """Queue ``msg`` by its mode and wait until it is durable."""
        return await self.wait(self.enqueue(msg))

    async def abort(self, session: str) -> str:
        """Stop the session's running turn; its id."""
        resp = await self._core.abort(session)
        return resp.turn_id

    async def _abort_quietly(self, session: str) -> None:
        try:
            await self._core.abort(session)
        except CoreCallFailed as exc:
            # FAILED_PRECONDITION: it ended on its own; either way the
            # interrupting message runs next.
            if exc.code != "FAILED_PRECONDITION":
                raise

    async def _wait(self, pending: _Pending) -> Ack:
        await pending.done.wait()
        if pending.failure is not None:
            raise pending.failure
        assert pending.ack is not None
        return pending.ack

    def _start(self, session: str, lane: _Lane) -> None:
        if self._nursery is None:
            raise RuntimeError("Lanes.serve is not running")
        self._nursery.start_soon(self._drain, session, lane)

    async def _drain(self, session: str, lane: _Lane) -> None:
        try:
            while lane.queue:
                batch = _take(lane.queue)
                async with self._limiter:
                    await self._run(session, lane, batch)
        finally:
            lane.running = False
            if not lane.queue and self._lanes.get(session) is lane:
                del self._lanes[session]

    async def _run(self, session: str, lane: _Lane, batch: list[_Pending]) -> None:
        first = batch[0].msg
        text = "\n\n".join(p.msg.text for p in batch)
        key = first.key if len(batch) == 1 else _merged_key([p.msg.key for p in batch])
        request = tpb.RunTurnRequest(
            session=session,
            text=text,
            idempotency_key=key,
            peer=first.peer,
            # A merged turn runs with the least trust among its senders.
            trust=_PB_TRUST[min(p.msg.trust for p in batch)],
        )
        peers = frozenset(p.msg.peer for p in batch)

        async def on_event(event: tpb.TurnEvent) -> None:
            if event.HasField("accepted"):
                acc = event.accepted
                lane.turn_id = acc.turn_id
                if not acc.replayed:
                    self._listener.message(session, first.peer, text, acc.message_seq)
                for p in batch:
                    p.resolve(Ack(acc.message_seq, acc.turn_id, replayed=acc.replayed))
            self._listener.turn_event(session, peers, event)

        try:
            for attempt in range(_RUN_ATTEMPTS):
                try:
                    await self._core.run(request, on_event)
                    break
                except CoreCallFailed as exc:
                    if exc.code != "UNAVAILABLE" or attempt + 1 == _RUN_ATTEMPTS:
                        for p in batch:
                            p.fail(exc)
                        break
                    await trio.sleep(_RETRY_BASE_S * 2**attempt)
        finally:
            lane.turn_id = None
            for p in batch:
                p.fail(CoreCallFailed("the turn ended before the core accepted it", "ABORTED"))
                self._by_key.pop((session, p.msg.key), None)


def _take(queue: deque[_Pending]) -> list[_Pending]:
    """The next turn's messages: one, or a run of ``collect`` messages from
    the same peer merged into one turn."""
    batch = [queue.popleft()]
    if batch[0].msg.mode != "collect":
        return batch
    while queue and queue[0].msg.mode == "collect" and queue[0].msg.peer == batch[0].msg.peer:
        batch.append(queue.popleft())
    return batch


def _merged_key(keys: list[str]) -> str:
    # Deterministic, so a replay of the same collected run dedups at the core.
    digest = hashlib.sha256("\x00".join(keys).encode()).hexdigest()
    return f"collect-{digest[:48]}"


__all__ = ["Ack", "Inbound", "LaneListener", "Lanes", "Mode", "Ticket"]
