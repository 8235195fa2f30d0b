"""Tool calls that a model wrote into its text instead of the API's
``tool_calls`` field.

Small open models served through OpenAI-compatible servers often do this
when the server has no parser for their format: Qwen and Hermes-style
models write ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
others a fenced ```json block, or the bare object as the whole reply.

Only an object naming one of the request's tools counts, so a model that
shows the user a JSON example is not mistaken for one calling a tool; what
does not parse stays text. A tool's own name counts as well as its wire
form (``fs.list`` for ``fs__list``): small models copy the name the owner's
words and the tool descriptions use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from naga.v1 import model_pb2

_OPENERS = re.compile(r"<tool_call>|```(?:json|tool_call|tool_code)?[ \t]*\r?\n?")
_CLOSERS = {"<": "</tool_call>", "`": "```"}
_DECODER = json.JSONDecoder()


def _declared(name: object, tools: Collection[str]) -> str | None:
    """The request's tool ``name`` means, written as the request wrote it."""
    if not isinstance(name, str):
        return None
    if name in tools:
        return name
    wire = name.replace(".", "__")  # naga_core.agent's wire form of a tool's name
    return wire if "." in name and wire in tools else None


def _as_calls(value: object, tools: Collection[str]) -> list[tuple[str, str]] | None:
    """``(name, arguments JSON)`` per call if ``value`` is a call or a list of
    calls to declared tools; else None."""
    items: list[object] = value if isinstance(value, list) else [value]  # pyright: ignore[reportUnknownVariableType]
    calls: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        obj: dict[str, object] = item  # pyright: ignore[reportUnknownVariableType]
        function = obj.get("function")
        if isinstance(function, dict) and "name" not in obj:
            obj = function  # pyright: ignore[reportUnknownVariableType]
        name = _declared(obj.get("name"), tools)
        arguments = obj.get("arguments", obj.get("parameters", {}))
        if name is None:
            return None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        calls.append((name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))))
    return calls or None


def extract_text_tool_calls(
    text: str, tools: Collection[str]
) -> tuple[str, list[model_pb2.ToolCall]]:
    """The text with the call blocks removed, and the calls found in it."""
    if not tools or "{" not in text:
        return text, []
    found: list[tuple[str, str]] = []
    kept: list[str] = []
    position = 0
    for opener in _OPENERS.finditer(text):
        if opener.start() < position:
            continue  # inside a block already consumed
        start = opener.end()
        while start < len(text) and text[start].isspace():
            start += 1
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            continue
        closer = _CLOSERS[opener.group()[0]]
        rest = end
        while rest < len(text) and text[rest].isspace():
            rest += 1
        if text.startswith(closer, rest):
            rest += len(closer)
        elif rest != len(text):
            continue  # not a block: something else follows the JSON
        calls = _as_calls(value, tools)
        if calls is None:
            continue
        kept.append(text[position : opener.start()])
        found.extend(calls)
        position = rest
    if not found:
        stripped = text.strip()
        if stripped.startswith(("{", "[")):
            try:
                value = json.loads(stripped)
            except ValueError:
                return text, []
            calls = _as_calls(value, tools)
            if calls is not None:
                return "", _tool_calls(calls)
        return text, []
    kept.append(text[position:])
    return "".join(kept).strip(), _tool_calls(found)


def _tool_calls(calls: list[tuple[str, str]]) -> list[model_pb2.ToolCall]:
    return [
        model_pb2.ToolCall(id=f"text_call_{n}", name=name, arguments_json=arguments)
        for n, (name, arguments) in enumerate(calls)
    ]
