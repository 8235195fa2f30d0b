"""Checks on a ``ChatRequest`` before any byte is sent, shared by both
adapters, and the JSON helpers their mappings use.

A request the provider would refuse anyway is refused here with a message
naming the message or tool at fault, instead of a provider's 400 about
``messages.3.content.0`` that the owner cannot map back to anything.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from naga.v1 import model_pb2
from naga_plugins.models.errors import InvalidRequest

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ROLE_NAMES = {
    model_pb2.ROLE_SYSTEM: "system",
    model_pb2.ROLE_USER: "user",
    model_pb2.ROLE_ASSISTANT: "assistant",
    model_pb2.ROLE_TOOL: "tool",
}


def compact_json(value: object) -> bytes:
    """The body bytes: no spaces, UTF-8 as is (fewer bytes per request)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _object(text: str, what: str, provider: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"{what} is not JSON: {exc}", provider=provider) from None
    if not isinstance(value, dict):
        raise InvalidRequest(
            f"{what} must be a JSON object, not {type(value).__name__}", provider=provider
        )
    return value  # pyright: ignore[reportUnknownVariableType]


def arguments_object(call: model_pb2.ToolCall, provider: str) -> dict[str, Any]:
    return _object(call.arguments_json or "{}", f"arguments of tool call {call.id!r}", provider)


def schema_object(tool: model_pb2.ToolSpec, provider: str) -> dict[str, Any]:
    if not tool.parameters_json_schema:
        return {"type": "object", "properties": {}}
    what = f"parameters schema of tool {tool.name!r}"
    return _object(tool.parameters_json_schema, what, provider)


def check_request(request: model_pb2.ChatRequest, provider: str) -> None:
    """Raise :class:`InvalidRequest` naming the first thing wrong."""

    def refuse(what: str) -> InvalidRequest:
        return InvalidRequest(what, provider=provider)

    if not any(m.role != model_pb2.ROLE_SYSTEM for m in request.messages):
        raise refuse("the request has no user message (only system messages, or none)")
    for n, message in enumerate(request.messages):
        role = _ROLE_NAMES.get(message.role)
        if role is None:
            raise refuse(f"message {n} has no role (or an unknown one: {message.role})")
        if message.tool_calls and message.role != model_pb2.ROLE_ASSISTANT:
            raise refuse(f"message {n} ({role}) has tool calls; only assistant messages may")
        if message.role == model_pb2.ROLE_TOOL:
            if not message.tool_call_id:
                raise refuse(f"message {n} (tool) does not say which call it answers")
        elif message.tool_call_id or message.tool_error:
            raise refuse(f"message {n} ({role}) has tool result fields; only tool messages may")
        for call in message.tool_calls:
            if not call.id or not call.name:
                raise refuse(f"message {n} has a tool call without an id or a name")
            arguments_object(call, provider)
    names: set[str] = set()
    for tool in request.tools:
        if not _TOOL_NAME.fullmatch(tool.name):
            raise refuse(f"tool name {tool.name!r} must be 1-64 letters, digits, '_' or '-'")
        if tool.name in names:
            raise refuse(f"tool {tool.name!r} is declared twice")
        names.add(tool.name)
        schema_object(tool, provider)
    mode = request.tool_choice.mode
    if mode in (model_pb2.TOOL_CHOICE_MODE_REQUIRED, model_pb2.TOOL_CHOICE_MODE_NAMED):
        if not request.tools:
            raise refuse("tool_choice requires a tool call but the request declares no tools")
        if mode == model_pb2.TOOL_CHOICE_MODE_NAMED and request.tool_choice.name not in names:
            raise refuse(f"tool_choice names {request.tool_choice.name!r}, which is not declared")
    if request.HasField("temperature") and not (
        math.isfinite(request.temperature) and request.temperature >= 0
    ):
        raise refuse(f"temperature must be a finite number >= 0, not {request.temperature}")
    if any(not stop for stop in request.stop):
        raise refuse("a stop sequence is empty")


def tool_names(request: model_pb2.ChatRequest) -> frozenset[str]:
    """The tools the model may call in this request (none if forbidden)."""
    if request.tool_choice.mode == model_pb2.TOOL_CHOICE_MODE_NONE:
        return frozenset()
    return frozenset(tool.name for tool in request.tools)
