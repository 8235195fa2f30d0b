"""A turn record in words, for ``naga history`` and the console's history:
what it is and where it belongs, from the fields kept in the clear (session,
turn, tool, counts). Never the sealed words (docs/adr/0037): a forgotten
subject's records read the same as anyone's."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga_core.agent import _sessions as rec
from naga_core.agent._compact import COMPACT
from naga_core.agent._recover import RESUMED, TOOL_CALL, TOOL_EFFECT


def describe_turn_record(kind: str, payload: bytes) -> str:
    """``kind``'s record in words ('' when it is not a turn record)."""
    if not kind.startswith("turn."):
        return ""
    try:
        body = apb.TurnRecord.FromString(payload)
    except DecodeError:
        return "(unreadable turn record)"
    where = f"turn {body.turn_id} of session {body.session}"
    if kind == rec.MESSAGE:
        return f"message starting {where}" + (f" from {body.peer}" if body.peer else "")
    if kind == rec.STEER:
        return f"steering message for {where}"
    if kind == rec.MODEL:
        failed = ", failed" if body.failed else ""
        via = f" via {body.provider}" if body.provider else ""
        return (
            f"model call of {where}{via} ({body.prompt_tokens}+{body.completion_tokens} "
            f"tokens, {body.duration_us // 1000} ms{failed})"
        )
    if kind == TOOL_CALL:
        return f"tool call {body.tool} of {where} (about to run)"
    if kind == rec.TOOL:
        return f"tool {body.tool} of {where} {'answered' if body.ok else 'failed'}"
    if kind == TOOL_EFFECT:
        return f"tool {body.tool} of {where}: its workspace changes, journaled next"
    if kind == rec.REPLY:
        return (
            f"reply ending {where} ({_n(body.model_calls, 'model call')}, "
            f"{_n(body.tool_calls, 'tool call')})"
        )
    if kind == rec.ERROR:
        return f"error ending {where}"
    if kind == COMPACT:
        return f"summary of older history for {where} ({_n(len(body.dropped_seqs), 'message')})"
    if kind == RESUMED:
        return f"{where} re-run after a restart"
    if kind == rec.NOTE:
        return f"note in session {body.session}"
    return f"{kind} of {where}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


__all__ = ["describe_turn_record"]
