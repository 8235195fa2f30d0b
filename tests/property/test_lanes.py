"""Lanes under hypothesis-generated interleavings of messages across
sessions and queue modes: every message acknowledged once and only once
it is recorded, none lost or run twice, one turn at a time per session, the
global cap held, and each session's follow-up and collect messages reaching
the core in the order they arrived.

The core here is an in-process fake of the lanes' peer (``CorePort``):
turns take a drawn number of scheduler checkpoints, so turns, steers and
aborts interleave differently in each example.
"""

from __future__ import annotations

from collections import defaultdict

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import turn_pb2 as tpb
from naga_gateway import Ack, Inbound, Lanes, Mode, OnEvent, OnLedgerEvent, Ticket
from naga_gateway.errors import CoreCallFailed

MAX_RUNNING = 2


@attrs.define
class _Turn:
    turn_id: str
    aborted: bool = False


class FakePort:
    """Records what reached the core; enforces the contract's rules."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = steps
        self.seq = 0
        self.recorded: dict[int, str] = {}
        self.received: dict[str, list[str]] = defaultdict(list)
        self.running: dict[str, _Turn] = {}
        self.peak = 0
        self.keys: set[tuple[str, str]] = set()
        self.turns = 0

    def _record(self, text: str) -> int:
        self.seq += 1
        self.recorded[self.seq] = text
        return self.seq

    async def run(self, request: tpb.RunTurnRequest, on_event: OnEvent) -> None:
        session = request.session
        if session in self.running:
            raise CoreCallFailed(f"session {session} runs a turn", "FAILED_PRECONDITION")
        key = (session, request.idempotency_key)
        assert key not in self.keys, f"key {key} run twice"
        self.keys.add(key)
        self.turns += 1
        turn = _Turn(f"t{self.turns}")
        self.running[session] = turn
        self.peak = max(self.peak, len(self.running))
        try:
            self.received[session].extend(request.text.split("\n\n"))
            seq = self._record(request.text)
            await on_event(
                tpb.TurnEvent(accepted=tpb.TurnAccepted(message_seq=seq, turn_id=turn.turn_id))
            )
            for _ in range(self.steps[self.turns % len(self.steps)]):
                await trio.lowlevel.checkpoint()
                if turn.aborted:
                    await on_event(
                        tpb.TurnEvent(error=tpb.TurnError(kind=tpb.TURN_ERROR_KIND_ABORTED))
                    )
                    return
            await on_event(tpb.TurnEvent(final=tpb.TurnFinal(text="done")))
        finally:
            del self.running[session]

    async def steer(self, request: tpb.SteerTurnRequest) -> tpb.SteerTurnResponse:
        if request.session not in self.running:
            raise CoreCallFailed("no turn runs", "FAILED_PRECONDITION")
        self.received[request.session].append(request.text)
        return tpb.SteerTurnResponse(message_seq=self._record(request.text))

    async def abort(self, session: str) -> tpb.AbortTurnResponse:
        turn = self.running.get(session)
        if turn is None:
            raise CoreCallFailed("no turn runs", "FAILED_PRECONDITION")
        turn.aborted = True
        return tpb.AbortTurnResponse(turn_id=turn.turn_id)

    async def list_sessions(self, limit: int) -> tpb.ListSessionsResponse:
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
        raise CoreCallFailed("no settings here", "UNIMPLEMENTED")

    async def ledger_size(self) -> int:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED")

    async def subscribe(self, request: lpb.SubscribeRequest, on_event: OnLedgerEvent) -> None:
        raise CoreCallFailed("no ledger here", "UNIMPLEMENTED")


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
        lanes = Lanes(port, _Quiet(), max_running=MAX_RUNNING, max_queued=100)
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
    # Each session's follow-up and collect messages keep their order.
    for session, msgs in arrived.items():
        queued = [t for t, m in msgs if m in ("followup", "collect")]
        got = [t for t in port.received[session] if t in set(queued)]
        assert got == queued, session
