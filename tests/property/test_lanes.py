"""Lanes under hypothesis-generated interleavings of messages across
sessions and queue modes: every message acknowledged once and only once
it is recorded, none lost or run twice, one turn at a time per session, the
global cap held, and each session's follow-up and collect messages reaching
the core, and running there, in the order they arrived.

Both halves are the real lanes: the gateway's (``naga_gateway.Lanes``,
which forwards every message at once) and the core's admission
(``naga_core.agent.Admission``: the session's turn, its lane with the modes
and collect merge, the global cap ``lanes.max_concurrent``), where the cap
now lives (docs/adr/0028-lanes-core-admission.md). Between them the core's
port is an in-process stand-in that drives the admission as the agent
does; its turns take a drawn number of scheduler checkpoints, so turns,
steers and interrupts interleave differently in each example.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TypeVar

import trio
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import turn_pb2 as tpb
from naga.v1.status_pb2 import Refusal
from naga_core.agent import Admission, Running
from naga_gateway import Ack, Inbound, Lanes, Mode, OnEvent, OnLedgerEvent, Ticket
from naga_gateway.errors import CoreCallFailed

M = TypeVar("M", bound=Message)

MAX_RUNNING = 2


class FakePort:
    """The core's side: records what reached it, admits turns through the
    core's real :class:`Admission` in the agent's order (the lane's go,
    then a slot of the cap), and checks the contract's rules."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = steps
        self.seq = 0
        self.recorded: dict[int, str] = {}
        #: Texts as they reached the core (message or steer), per session.
        self.received: dict[str, list[str]] = defaultdict(list)
        #: Texts as their turn started executing, per session.
        self.ran: dict[str, list[str]] = defaultdict(list)
        self.admission = Admission(lambda: MAX_RUNNING)
        self.executing: set[str] = set()
        #: Texts of turns aborted (by an interrupt) before they ended.
        self.aborted: set[str] = set()
        #: Turns between their Run and their end; ``idle`` is set at 0.
        self.open = 0
        self.idle = trio.Event()
        self.peak = 0
        self.keys: set[tuple[str, str]] = set()
        self.turns = 0

    def _record(self, text: str) -> int:
        self.seq += 1
        self.recorded[self.seq] = text
        return self.seq

    async def run(self, request: tpb.RunTurnRequest, on_event: OnEvent) -> None:
        session = request.session
        busy = self.admission.current(session)
        if busy is not None and request.mode == tpb.QUEUE_MODE_UNSPECIFIED:
            raise CoreCallFailed(
                f"session {session} runs a turn",
                "FAILED_PRECONDITION",
                refusal=Refusal.REFUSAL_TURN_CONFLICT,
            )
        key = (session, request.idempotency_key)
        assert key not in self.keys, f"key {key} run twice"
        self.keys.add(key)
        self.turns += 1
        turn = Running(
            turn_id=f"t{self.turns}",
            session=session,
            key=request.idempotency_key,
            peer=request.peer,
            trust=TrustLevel.OWNER,
            risk=Risk.R0,
        )
        steps = self.steps[self.turns % len(self.steps)]
        self.received[session].append(request.text)
        seq = self._record(request.text)
        waiting = self.admission.arrive(turn, request.mode, request.text)
        self.open += 1
        if busy is not None and request.mode == tpb.QUEUE_MODE_INTERRUPT:
            busy.aborted = True
        accepted = tpb.TurnAccepted(message_seq=seq, turn_id=turn.id)
        if waiting is not None:
            accepted.queued, accepted.position = True, waiting.position
        try:
            await on_event(tpb.TurnEvent(accepted=accepted))
            texts = [request.text]
            if waiting is not None:
                await self.admission.lanes.wait(waiting)
                if waiting.leader is not None:  # merged into the collect turn ahead
                    await waiting.ended.wait()
                    await on_event(tpb.TurnEvent(final=tpb.TurnFinal(text="merged")))
                    return
                texts = waiting.texts
            if turn.aborted:
                self.aborted.update(texts)
                await on_event(tpb.TurnEvent(error=tpb.TurnError(kind=tpb.TURN_ERROR_KIND_ABORTED)))
                return
            async with self.admission.cap.slot():
                assert session not in self.executing, f"two turns of {session} at once"
                self.executing.add(session)
                self.peak = max(self.peak, len(self.executing))
                self.ran[session].extend(texts)
                try:
                    for _ in range(steps):
                        await trio.lowlevel.checkpoint()
                        if turn.aborted:
                            break
                finally:
                    self.executing.discard(session)
            if turn.aborted:
                self.aborted.update(texts)
                await on_event(tpb.TurnEvent(error=tpb.TurnError(kind=tpb.TURN_ERROR_KIND_ABORTED)))
            else:
                await on_event(tpb.TurnEvent(final=tpb.TurnFinal(text="done")))
        finally:
            if waiting is not None:
                waiting.end_collected(apb.ExecutorOutcome(text="done"))
            self.admission.leave(turn)
            self.open -= 1
            if not self.open:
                self.idle.set()
                self.idle = trio.Event()

    async def steer(self, request: tpb.SteerTurnRequest) -> tpb.SteerTurnResponse:
        if self.admission.current(request.session) is None:
            raise CoreCallFailed(
                "no turn runs", "FAILED_PRECONDITION", refusal=Refusal.REFUSAL_NO_TURN_RUNNING
            )
        self.received[request.session].append(request.text)
        return tpb.SteerTurnResponse(message_seq=self._record(request.text))

    async def abort(self, session: str) -> tpb.AbortTurnResponse:
        turn = self.admission.current(session)
        if turn is None:
            raise CoreCallFailed(
                "no turn runs", "FAILED_PRECONDITION", refusal=Refusal.REFUSAL_NO_TURN_RUNNING
            )
        turn.aborted = True
        return tpb.AbortTurnResponse(turn_id=turn.id)

    async def list_sessions(
        self, limit: int, include_archived: bool = False
    ) -> tpb.ListSessionsResponse:
        return tpb.ListSessionsResponse()

    async def history(self, session: str, limit: int) -> tpb.SessionHistoryResponse:
        return tpb.SessionHistoryResponse()

    async def trust(self, peer: str) -> TrustLevel:
        return TrustLevel.UNTRUSTED

    async def rollback(self, to_seq: int, *, dry_run: bool) -> cpb.RollbackResponse:
        return cpb.RollbackResponse()

    async def tool_risks(self) -> dict[str, int]:
        return {}

    # The lanes' settings are the caller's (Lanes.configure), not the port's.
    async def setting(self, name: str) -> cpb.Setting:
        raise CoreCallFailed("no settings here", "UNIMPLEMENTED", final=True)

    async def ledger_size(self) -> int:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED", final=True)

    async def subscribe(self, request: lpb.SubscribeRequest, on_event: OnLedgerEvent) -> None:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED", final=True)

    async def decide_approval(self, approval_id: str, allow: bool) -> int:
        raise CoreCallFailed("no approvals here", "UNIMPLEMENTED")

    async def entries(self, before_seq: int, limit: int) -> cpb.HistoryResponse:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED")

    async def redeem_login(self, code: str) -> cnpb.RedeemLoginResponse:
        raise CoreCallFailed("no console logins here", "UNIMPLEMENTED")

    async def check_session(self, session: str) -> cnpb.ConsoleVerdict.ValueType:
        raise CoreCallFailed("no console logins here", "UNIMPLEMENTED")

    # The console's pages are not the lanes' business.
    async def list_settings(self) -> cpb.ListSettingsResponse:
        raise CoreCallFailed("no settings here", "UNIMPLEMENTED")

    async def list_trust(self) -> cpb.ListTrustResponse:
        raise CoreCallFailed("no trust table here", "UNIMPLEMENTED")

    async def list_plugins(self) -> spb.ListPluginsResponse:
        raise CoreCallFailed("no plugins here", "UNIMPLEMENTED")

    async def ledger_history(self, limit: int, before_seq: int | None) -> cpb.HistoryResponse:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED")

    async def records(self, from_seq: int, limit: int) -> list[lpb.Record]:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED")

    async def admin(self, method: str, request: Message, response: type[M]) -> M:
        raise CoreCallFailed("no owner changes here", "UNIMPLEMENTED")


class _Quiet:
    def message(self, session: str, peer: str, text: str, seq: int) -> None:
        pass

    def queued(self, session: str, peer: str, key: str, position: int) -> None:
        pass

    def turn_event(self, session: str, peers: frozenset[str], event: tpb.TurnEvent) -> None:
        pass


MODES: list[Mode] = ["followup", "followup", "collect", "steer", "interrupt"]
modes = st.sampled_from(MODES)
plans = st.lists(st.tuples(st.integers(0, 3), modes, st.integers(0, 6)), min_size=1, max_size=30)


@settings(max_examples=120, deadline=None)
@given(plans, st.lists(st.integers(0, 8), min_size=1, max_size=8))
def test_interleavings(plan: list[tuple[int, Mode, int]], steps: list[int]) -> None:
    port = FakePort(steps)
    acks: dict[str, Ack] = {}
    arrived: dict[str, list[tuple[str, Mode]]] = defaultdict(list)

    async def main() -> None:
        with trio.fail_after(20):
            await drive()

    async def drive() -> None:
        lanes = Lanes(port, _Quiet(), max_queued=100)
        async with trio.open_nursery() as nursery:
            await nursery.start(lanes.serve)
            async with trio.open_nursery() as senders:
                for i, (s, mode, pause) in enumerate(plan):
                    for _ in range(pause):
                        await trio.lowlevel.checkpoint()
                    msg = Inbound(f"s{s}", f"m{i}", f"k{i}", "webchat:owner", mode)
                    arrived[msg.session].append((msg.text, mode))
                    ticket = lanes.enqueue(msg)

                    async def wait(t: Ticket = ticket, text: str = msg.text) -> None:
                        acks[text] = await lanes.wait(t)

                    senders.start_soon(wait)
            # Acknowledged once recorded: the queued ones run after.
            while port.open:
                await port.idle.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)

    # Every message acknowledged, and only with a seq that records it.
    assert set(acks) == {f"m{i}" for i in range(len(plan))}
    for text, ack in acks.items():
        assert text in port.recorded[ack.message_seq].split("\n\n")
    # None lost, none run twice.
    everything = [t for texts in port.received.values() for t in texts]
    assert sorted(everything) == sorted(acks)
    assert port.peak <= MAX_RUNNING
    # Every message that steered no turn ran, once, unless an interrupt cut it.
    ran = [t for texts in port.ran.values() for t in texts]
    assert len(ran) == len(set(ran))
    assert set(ran) | port.aborted == {t for t, a in acks.items() if not a.steered}
    # Each session's follow-up and collect messages keep their order, as
    # they reach the core and as they run there (an interrupt goes first,
    # past them; an interrupted one does not run).
    for session, msgs in arrived.items():
        queued = [t for t, m in msgs if m in ("followup", "collect")]
        got = [t for t in port.received[session] if t in set(queued)]
        assert got == queued, session
        ran = [t for t in port.ran[session] if t in set(queued)]
        assert ran == [t for t in queued if t in set(ran)], session
