"""Lanes, the gateway's side: every message goes to the core at once, and
is acknowledged once the core has recorded it (docs/protocol/websocket.md,
"Queue modes"; docs/adr/0028-lanes-core-admission.md).

The lanes live in the core (docs/adr/0013-lanes-home.md): one turn at a
time per session, the queue modes, and the global cap on running turns
(``lanes.max_concurrent``) are the core's. So nothing waits here
unacknowledged: each accepted ``send`` is a ``Run`` with its mode, answered
when the core's ``accepted`` event for its turn arrives (``queued`` when it
waits there, behind its session's turn or for a slot of the cap), or, for
a steer, when the core returns the steering message's seq.

What the gateway keeps is each session's order: a session's messages reach
the core in the order they arrived here, each only after the one before it
was accepted (or failed). And a resend of a key still in flight joins it.

The mode of a message that names none is the core's ``lanes.queue_mode``
(:meth:`Lanes.configure`, called by :mod:`naga_gateway._settings` whenever
it changes).
"""

from __future__ import annotations

from typing import Literal, Protocol

import attrs
import trio

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga.v1.status_pb2 import Refusal
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

_CORE_MODES = {
    "followup": tpb.QUEUE_MODE_FOLLOWUP,
    "collect": tpb.QUEUE_MODE_COLLECT,
    "interrupt": tpb.QUEUE_MODE_INTERRUPT,
    # A steer the core found no turn for is the next message.
    "steer": tpb.QUEUE_MODE_FOLLOWUP,
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
    #: trio time the gateway took it (the turn's deadline counts from here)
    since: float
    done: trio.Event = attrs.field(factory=trio.Event)
    ack: Ack | None = None
    failure: GatewayError | None = None
    #: Its slot (of ``max_open`` and of its session's queue) was given back.
    released: bool = False

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
    """A message on its way to the core; :meth:`Lanes.wait` for its ack."""

    msg: Inbound
    pending: _Pending
    #: The same key was already in flight: the answer is the first copy's.
    joined: bool = False


@attrs.define(eq=False)
class _Lane:
    #: Messages of the session whose turn has not ended yet.
    open: int = 0
    #: The last message sent on to the core: the next one waits until it
    #: was accepted (or failed), to keep the session's order.
    last: _Pending | None = None


class Lanes:
    """The sessions' messages on their way to the core's lanes. Start
    :meth:`serve` in a nursery first."""

    def __init__(
        self,
        core: CorePort,
        listener: LaneListener,
        *,
        max_queued: int = 64,
        max_open: int = 224,
        default_mode: Mode = "followup",
    ) -> None:
        if max_queued < 1 or max_open < 1:
            raise ValueError("max_queued and max_open must be at least 1")
        self._core = core
        self._listener = listener
        self._max_queued = max_queued
        self._max_open = max_open
        self.default_mode: Mode = default_mode
        self._lanes: dict[str, _Lane] = {}
        self._by_key: dict[tuple[str, str], _Pending] = {}
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def configure(self, *, default_mode: Mode) -> None:
        """The mode of messages that name none, from now on (messages
        already sent keep the mode they got)."""
        self.default_mode = default_mode

    def running(self, session: str) -> bool:
        """Whether a message of the session has not ended yet here."""
        return session in self._lanes

    def enqueue(self, msg: Inbound) -> Ticket:
        """Send ``msg`` on now (so messages keep the order they arrived
        in); :meth:`wait` on the ticket for its acknowledgement."""
        known = self._by_key.get((msg.session, msg.key))
        if known is not None:
            # The same message again (a client resending after a reconnect)
            # waits for the first copy instead of running twice.
            return Ticket(msg, known, joined=True)
        if self._nursery is None:
            raise RuntimeError("Lanes.serve is not running")
        if msg.mode is None:
            msg = attrs.evolve(msg, mode=self.default_mode)
        if len(self._by_key) >= self._max_open:
            # Each open message holds a Run stream of the core's: refused
            # here, answered, rather than held unacknowledged.
            raise LaneRefused(
                f"{self._max_open} messages are already waiting or running; send again shortly"
            )
        lane = self._lanes.setdefault(msg.session, _Lane())
        if lane.open >= self._max_queued:
            raise LaneRefused(
                f"session {msg.session!r} already has {self._max_queued} messages waiting"
            )
        pending = _Pending(msg, trio.current_time())
        self._by_key[(msg.session, msg.key)] = pending
        lane.open += 1
        before, lane.last = lane.last, pending
        self._nursery.start_soon(self._send, lane, pending, before)
        return Ticket(msg, pending)

    async def wait(self, ticket: Ticket) -> Ack:
        """Until the ticket's message is durable: its acknowledgement."""
        pending = ticket.pending
        await pending.done.wait()
        if pending.failure is not None:
            raise pending.failure
        assert pending.ack is not None
        return attrs.evolve(pending.ack, replayed=True) if ticket.joined else pending.ack

    async def submit(self, msg: Inbound) -> Ack:
        """Send ``msg`` by its mode and wait until it is durable."""
        return await self.wait(self.enqueue(msg))

    async def abort(self, session: str) -> str:
        """Stop the session's running turn; its id."""
        resp = await self._core.abort(session)
        return resp.turn_id

    async def _send(self, lane: _Lane, pending: _Pending, before: _Pending | None) -> None:
        msg = pending.msg
        try:
            if before is not None:
                await before.done.wait()
            if msg.mode == "steer" and await self._steered(pending):
                return
            await self._run(lane, pending)
        finally:
            pending.fail(CoreCallFailed("the turn ended before the core accepted it", "ABORTED"))
            self._release(lane, pending)

    def _release(self, lane: _Lane, pending: _Pending) -> None:
        """Give back the message's slots, once: when its turn's last event
        (final or error) arrives, before that event goes on to the clients,
        so a client that saw the turn end finds its slot free; else when
        its send ends."""
        if pending.released:
            return
        pending.released = True
        msg = pending.msg
        if self._by_key.get((msg.session, msg.key)) is pending:
            del self._by_key[(msg.session, msg.key)]
        lane.open -= 1
        if lane.last is pending:
            lane.last = None
        if lane.open == 0 and self._lanes.get(msg.session) is lane:
            del self._lanes[msg.session]

    async def _steered(self, pending: _Pending) -> bool:
        """Steer the session's running turn; False if none runs (the
        message is then the next one)."""
        msg = pending.msg
        request = tpb.SteerTurnRequest(
            session=msg.session, text=msg.text, idempotency_key=msg.key, peer=msg.peer
        )
        try:
            resp = await self._core.steer(request)
        except CoreCallFailed as exc:
            if exc.refusal == Refusal.REFUSAL_NO_TURN_RUNNING:
                return False
            pending.fail(exc)
            return True
        self._listener.message(msg.session, msg.peer, msg.text, resp.message_seq)
        pending.resolve(Ack(resp.message_seq, "", steered=True))
        return True

    async def _run(self, lane: _Lane, pending: _Pending) -> None:
        msg = pending.msg
        assert msg.mode is not None
        session = msg.session
        peers = frozenset({msg.peer})

        async def on_event(event: tpb.TurnEvent) -> None:
            if event.HasField("accepted") and not pending.done.is_set():
                acc = event.accepted
                if not acc.replayed:
                    self._listener.message(session, msg.peer, msg.text, acc.message_seq)
                if acc.queued:
                    self._listener.queued(session, msg.peer, msg.key, acc.position)
                pending.resolve(Ack(acc.message_seq, acc.turn_id, replayed=acc.replayed))
            if event.HasField("final") or event.HasField("error"):
                # The turn is over: its slot is free before anyone hears so.
                self._release(lane, pending)
            self._listener.turn_event(session, peers, event)

        for attempt in range(_RUN_ATTEMPTS):
            waited_ms = int((trio.current_time() - pending.since) * 1000)
            request = tpb.RunTurnRequest(
                session=session,
                text=msg.text,
                idempotency_key=msg.key,
                peer=msg.peer,
                trust=_PB_TRUST[msg.trust],
                mode=_CORE_MODES[msg.mode],
                waited_ms=min(waited_ms, 2**32 - 1),
            )
            try:
                await self._core.run(request, on_event)
            except CoreCallFailed as exc:
                if pending.released:
                    return  # broke after the turn's end: nothing left to run
                if not exc.unavailable or attempt + 1 == _RUN_ATTEMPTS:
                    pending.fail(exc)
                    return
                # The same key again: the core joins, resumes or replays it.
                await trio.sleep(_RETRY_BASE_S * 2**attempt)
            else:
                return


__all__ = ["Ack", "Inbound", "LaneListener", "Lanes", "Mode", "Ticket"]
