"""The hub keeps nothing per turn once the turn has ended: a tool call
whose finish never came (the turn was aborted mid-call) is dropped with the
turn, and the same call id in another session names its own tool."""

from __future__ import annotations

from naga.v1 import turn_pb2 as tpb
from naga_gateway import Hub


def started(call_id: str, tool: str) -> tpb.TurnEvent:
    return tpb.TurnEvent(tool_started=tpb.ToolCallStarted(call_id=call_id, tool=tool))


def finished(call_id: str) -> tpb.TurnEvent:
    return tpb.TurnEvent(tool_finished=tpb.ToolCallFinished(call_id=call_id, ok=True))


def test_unfinished_tool_calls_go_with_their_turn() -> None:
    hub = Hub()
    peers = frozenset({"webchat:owner"})
    for n in range(100):
        hub.turn_event("s", peers, started("call_1", "danger.echo"))
        if n % 2:
            end = tpb.TurnEvent(final=tpb.TurnFinal(text="ok"))
        else:
            end = tpb.TurnEvent(error=tpb.TurnError(kind=tpb.TURN_ERROR_KIND_ABORTED))
        hub.turn_event("s", peers, end)
    assert hub.open_tool_calls == 0


def test_a_call_id_is_per_session() -> None:
    hub = Hub()
    peers = frozenset({"webchat:owner"})
    hub.turn_event("a", peers, started("call_1", "danger.echo"))
    hub.turn_event("b", peers, started("call_1", "web.search"))
    assert hub.open_tool_calls == 2
    hub.turn_event("a", peers, finished("call_1"))
    assert hub.open_tool_calls == 1
    hub.turn_event("b", peers, finished("call_1"))
    assert hub.open_tool_calls == 0
