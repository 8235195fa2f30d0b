"""Tool results too large to show the model whole (docs/adr/0010-prompt-budget.md).

A result above the turn's ``Budget.shown_bytes`` is stored whole as a blob
(the turn.tool record names it); the model is shown a JSON object with the
head of the result, its size and how to read on: ``turn.read_result``, a
read-only tool the core itself answers for results of the same turn, by
byte offset. Nothing here decides what a tool may do: it only shows what a
tool the turn was allowed to call already returned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from naga.v1 import model_pb2 as mpb

#: The core's own tool (R0), in the model's spelling too.
READ_RESULT_TOOL = "turn.read_result"
READ_RESULT_SPEC = mpb.ToolSpec(
    name="turn__read_result",
    description=(
        "Read more of a tool result that was too long to show whole in this turn: "
        "give its call_id and the byte offset to read from"
    ),
    parameters_json_schema=json.dumps(
        {
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "the call whose result to read"},
                "offset": {"type": "integer", "minimum": 0, "description": "byte offset"},
            },
            "required": ["call_id"],
        },
        separators=(",", ":"),
    ),
)


@dataclass(frozen=True, slots=True)
class Stored:
    """A large result of this turn: its blob and size in bytes."""

    digest: bytes
    size: int


def _piece(raw: bytes, offset: int, size: int) -> tuple[str, int]:
    """Up to ``size`` bytes from ``offset``, never cut inside a character;
    the text and the offset after it."""
    end = min(len(raw), offset + size)
    while end < len(raw) and end > offset and (raw[end] & 0xC0) == 0x80:
        end -= 1
    return raw[offset:end].decode(errors="ignore"), end


def shown(call_id: str, raw: bytes, size: int) -> str:
    """What the model is shown of a result of ``len(raw)`` bytes (> ``size``)."""
    head, end = _piece(raw, 0, size)
    return json.dumps(
        {
            "truncated": True,
            "result_bytes": len(raw),
            "shown_bytes": end,
            "head": head,
            "read_more": {"tool": READ_RESULT_SPEC.name, "call_id": call_id, "offset": end},
        },
        ensure_ascii=False,
    )


def read_arguments(arguments_json: str) -> tuple[str, int] | str:
    """``(call_id, offset)`` of a read_result call, or why they are wrong."""
    try:
        args = json.loads(arguments_json or "{}")
    except ValueError as exc:
        return f"the arguments are not JSON: {exc}"
    if not isinstance(args, dict):
        return "the arguments must be a JSON object"
    call_id = args.get("call_id")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    offset = args.get("offset", 0)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if not isinstance(call_id, str) or not call_id:
        return "call_id (a string) is required"
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return "offset must be a non-negative integer"
    return call_id, offset


def read_piece(call_id: str, raw: bytes, offset: int, size: int) -> str:
    text, end = _piece(raw, min(offset, len(raw)), size)
    return json.dumps(
        {
            "call_id": call_id,
            "result_bytes": len(raw),
            "offset": offset,
            "text": text,
            "next_offset": end if end < len(raw) else None,
        },
        ensure_ascii=False,
    )


__all__ = [
    "READ_RESULT_SPEC",
    "READ_RESULT_TOOL",
    "Stored",
    "read_arguments",
    "read_piece",
    "shown",
]
