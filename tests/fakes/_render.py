"""How the fake model server words a scripted reply in each provider's
dialect, as the providers' documentation shows their bodies and events."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tests.fakes.model_server import Reply

Dialect = Literal["openai", "anthropic"]

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def dialect_of(path: str) -> Dialect | None:
    if path.endswith("/chat/completions"):
        return "openai"
    if path == "/v1/messages":
        return "anthropic"
    return None


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _pieces(text: str, count: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(count, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def _finish(dialect: Dialect, reply: Reply) -> str:
    if reply.finish:
        return reply.finish
    if dialect == "openai":
        return "tool_calls" if reply.tool_calls else "stop"
    return "tool_use" if reply.tool_calls else "end_turn"


def error_body(dialect: Dialect, status: int, error_type: str, message: str) -> bytes:
    if dialect == "anthropic":
        kind = error_type or _ANTHROPIC_ERRORS.get(status, "api_error")
        return _dump({"type": "error", "error": {"type": kind, "message": message}})
    kind = error_type or ("invalid_request_error" if status < 500 else "server_error")
    return _dump({"error": {"message": message, "type": kind, "param": None, "code": kind}})


def error_event(dialect: Dialect, error_type: str, message: str) -> bytes:
    if dialect == "anthropic":
        data = {"type": "error", "error": {"type": error_type, "message": message}}
        return b"event: error\ndata: " + _dump(data) + b"\n\n"
    return b"data: " + _dump({"error": {"message": message, "type": error_type}}) + b"\n\n"


def body(dialect: Dialect, reply: Reply) -> bytes:
    prompt, completion = reply.usage
    if dialect == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in reply.tool_calls
            ]
        return _dump(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 0,
                "model": reply.model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": _finish(dialect, reply)}
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content.extend(
        {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)}
        for i, n, a in reply.tool_calls
    )
    return _dump(
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": content,
            "stop_reason": _finish(dialect, reply),
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
    )


def events(dialect: Dialect, reply: Reply, *, include_usage: bool) -> list[bytes]:
    """The reply as SSE events, one ``bytes`` per event."""
    if dialect == "openai":
        return _openai_events(reply, include_usage=include_usage)
    return _anthropic_events(reply)


def after_pieces(dialect: Dialect, reply: Reply) -> list[int]:
    """The index in :func:`events` of each text piece's event, in order."""
    first = 1 if dialect == "openai" else 3  # after the role chunk / start, block, ping
    return [first + n for n in range(len(_pieces(reply.text, reply.pieces)))]


def _openai_events(reply: Reply, *, include_usage: bool) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": reply.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + _dump(data) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out.extend(chunk({"content": piece}) for piece in _pieces(reply.text, reply.pieces))
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        head = {"index": index, "id": call_id, "type": "function"}
        out.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        out.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            for part in _halves(arguments)
        )
    out.append(chunk({}, _finish("openai", reply)))
    if include_usage:
        prompt, completion = reply.usage
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        data: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "model": reply.model,
            "choices": [],
            "usage": usage,
        }
        out.append(b"data: " + _dump(data) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def _anthropic_events(reply: Reply) -> list[bytes]:
    def event(data: dict[str, Any]) -> bytes:
        return f"event: {data['type']}\n".encode() + b"data: " + _dump(data) + b"\n\n"

    prompt, completion = reply.usage
    out = [
        event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": reply.model,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": 1},
                },
            }
        )
    ]
    index = 0
    if reply.text:
        block = {"type": "text", "text": ""}
        out.append(event({"type": "content_block_start", "index": index, "content_block": block}))
        out.append(event({"type": "ping"}))
        out.extend(
            event(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                }
            )
            for piece in _pieces(reply.text, reply.pieces)
        )
        out.append(event({"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, arguments in reply.tool_calls:
        block: dict[str, Any] = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        out.append(event({"type": "content_block_start", "index": index, "content_block": block}))
        out.extend(
            event(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
            )
            for part in _halves(arguments)
        )
        out.append(event({"type": "content_block_stop", "index": index}))
        index += 1
    stop = {"stop_reason": _finish("anthropic", reply), "stop_sequence": None}
    out.append(
        event({"type": "message_delta", "delta": stop, "usage": {"output_tokens": completion}})
    )
    out.append(event({"type": "message_stop"}))
    return out
