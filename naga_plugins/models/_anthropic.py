"""The Anthropic messages API: ``POST {base_url}/v1/messages``.

System messages go to the top-level ``system`` field; tool calls are
``tool_use`` content blocks and their results ``tool_result`` blocks in the
next user message. Streams are typed events: ``message_start``,
``content_block_start/delta/stop`` (``text_delta``, ``input_json_delta``),
``message_delta`` (stop reason, usage), ``message_stop``, and ``error``.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import pydantic

from naga.v1 import model_pb2
from naga_plugins.models._config import Endpoint
from naga_plugins.models._dialect import (
    MAX_TOKENS_FIELD,
    HttpCall,
    Malformed,
    StreamErrorEvent,
    WireModel,
    load_json,
    validate,
)
from naga_plugins.models._request import arguments_object, compact_json, schema_object
from naga_plugins.models._sse import SseEvent

#: The API version this mapping was written against (sent on every request).
ANTHROPIC_VERSION = "2023-06-01"

_FINISH = {
    "end_turn": model_pb2.FINISH_REASON_STOP,
    "stop_sequence": model_pb2.FINISH_REASON_STOP,
    "max_tokens": model_pb2.FINISH_REASON_LENGTH,
    "model_context_window_exceeded": model_pb2.FINISH_REASON_LENGTH,
    "tool_use": model_pb2.FINISH_REASON_TOOL_CALLS,
    "refusal": model_pb2.FINISH_REASON_CONTENT_FILTER,
}

Count = Annotated[int, pydantic.Field(ge=0, le=MAX_TOKENS_FIELD)]


def finish_reason(raw: str | None) -> model_pb2.FinishReason.ValueType:
    if raw is None:
        return model_pb2.FINISH_REASON_UNSPECIFIED
    return _FINISH.get(raw, model_pb2.FINISH_REASON_OTHER)


# --- the provider's bodies -------------------------------------------------------


class _Usage(WireModel):
    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_creation_input_tokens: Count | None = None
    cache_read_input_tokens: Count | None = None

    @property
    def prompt_tokens(self) -> int:
        # Cached prompt tokens are prompt tokens too (billed at other rates).
        total = (
            self.input_tokens
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )
        return min(total, MAX_TOKENS_FIELD)


class _Block(WireModel):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None


class _Message(WireModel):
    type: Literal["message"]
    content: list[_Block]
    model: str = ""
    stop_reason: str | None = None
    usage: _Usage


class _Error(WireModel):
    type: str = ""
    message: str = ""


class _Event(WireModel):
    type: str


class _ErrorEvent(WireModel):
    error: _Error


class _StartMessage(WireModel):
    model: str = ""
    usage: _Usage = _Usage()


class _MessageStart(WireModel):
    message: _StartMessage


class _BlockStart(WireModel):
    index: int = pydantic.Field(ge=0)
    content_block: _Block


class _Delta(WireModel):
    type: str
    text: str | None = None
    partial_json: str | None = None


class _BlockDelta(WireModel):
    index: int = pydantic.Field(ge=0)
    delta: _Delta


class _BlockStop(WireModel):
    index: int = pydantic.Field(ge=0)


class _StopDelta(WireModel):
    stop_reason: str | None = None


class _MessageDelta(WireModel):
    delta: _StopDelta = _StopDelta()
    usage: _Usage | None = None


# --- the dialect -----------------------------------------------------------------------


class AnthropicDialect:
    api = "anthropic"
    text_tool_calls = False

    def build(
        self,
        endpoint: Endpoint,
        request: model_pb2.ChatRequest,
        *,
        stream: bool,
        default_max_tokens: int,
    ) -> HttpCall:
        provider = endpoint.provider
        body: dict[str, Any] = {
            "model": request.model or endpoint.model,
            # Required by this API; the adapter's default when the caller
            # left it to us.
            "max_tokens": request.max_tokens or default_max_tokens,
        }
        system = [m.content for m in request.messages if m.role == model_pb2.ROLE_SYSTEM]
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = _messages(request, provider)
        if stream:
            body["stream"] = True
        if request.HasField("temperature"):
            body["temperature"] = request.temperature
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        if request.tools:
            body["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": schema_object(tool, provider),
                }
                for tool in request.tools
            ]
            choice = request.tool_choice
            if choice.mode == model_pb2.TOOL_CHOICE_MODE_AUTO:
                body["tool_choice"] = {"type": "auto"}
            elif choice.mode == model_pb2.TOOL_CHOICE_MODE_NONE:
                body["tool_choice"] = {"type": "none"}
            elif choice.mode == model_pb2.TOOL_CHOICE_MODE_REQUIRED:
                body["tool_choice"] = {"type": "any"}
            elif choice.mode == model_pb2.TOOL_CHOICE_MODE_NAMED:
                body["tool_choice"] = {"type": "tool", "name": choice.name}
        headers = [
            ("content-type", "application/json"),
            ("anthropic-version", ANTHROPIC_VERSION),
        ]
        if stream:
            headers.append(("accept", "text/event-stream"))
        if endpoint.api_key:
            headers.append(("x-api-key", endpoint.api_key))
        return HttpCall(f"{endpoint.base_url}/v1/messages", tuple(headers), compact_json(body))

    def parse(self, body: bytes) -> model_pb2.ChatResponse:
        parsed = validate(_Message, load_json(body, "the body"), "the body")
        response = model_pb2.ChatResponse(
            finish_reason=finish_reason(parsed.stop_reason),
            provider_finish_reason=parsed.stop_reason or "",
            model=parsed.model,
        )
        message = response.message
        message.role = model_pb2.ROLE_ASSISTANT
        texts: list[str] = []
        for n, block in enumerate(parsed.content):
            if block.type == "text":
                if block.text is None:
                    raise Malformed(f"the body: content.{n}: a text block without text")
                texts.append(block.text)
            elif block.type == "tool_use":
                if not block.id or not block.name or block.input is None:
                    raise Malformed(f"the body: content.{n}: tool_use needs id, name and input")
                message.tool_calls.add(
                    id=block.id, name=block.name, arguments_json=compact_json(block.input).decode()
                )
            # Other blocks (thinking, redacted_thinking) are not part of the
            # contract's message; they are dropped.
        message.content = "".join(texts)
        response.usage.SetInParent()
        response.usage.prompt_tokens = parsed.usage.prompt_tokens
        response.usage.completion_tokens = parsed.usage.output_tokens
        return response

    def stream_decoder(self) -> AnthropicStream:
        return AnthropicStream()


def _messages(request: model_pb2.ChatRequest, provider: str) -> list[dict[str, Any]]:
    """Messages as content blocks; consecutive ones of the same API role are
    merged, since tool results must all sit in the one user message that
    follows the tool calls."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for message in request.messages:
        blocks: list[dict[str, Any]] = []
        if message.role == model_pb2.ROLE_SYSTEM:
            continue
        if message.role == model_pb2.ROLE_TOOL:
            role = "user"
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.tool_error:
                result["is_error"] = True
            blocks.append(result)
        else:
            role = "assistant" if message.role == model_pb2.ROLE_ASSISTANT else "user"
            # Images before the text, as Anthropic advises.
            blocks.extend(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": image.mime,
                        "data": base64.b64encode(image.data).decode(),
                    },
                }
                for image in message.images
                if image.data
            )
            # The API refuses empty text blocks next to tool_use or image blocks.
            if message.content or not (message.tool_calls or blocks):
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": arguments_object(call, provider),
                }
                for call in message.tool_calls
            )
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})  # fewer bytes
        else:
            out.append({"role": role, "content": blocks})
    return out


class AnthropicStream:
    """Typed events of one streamed message -> chunks."""

    def __init__(self) -> None:
        self.complete = False
        self.model = ""
        self.provider_finish_reason = ""
        self._started = False
        self._prompt_tokens = 0
        # content block index -> ("text" | "tool" | "other", tool ordinal)
        self._blocks: dict[int, tuple[str, int]] = {}
        self._stopped: set[int] = set()
        self._tools = 0
        self._events = 0

    def feed(self, event: SseEvent) -> list[model_pb2.ChatChunk]:
        self._events += 1
        what = f"stream event {self._events}"
        data = load_json(event.data, what)
        kind = validate(_Event, data, what).type
        what = f"{what} ({kind})"
        if kind == "ping" or self.complete:
            return []
        if kind == "error":
            error = validate(_ErrorEvent, data, what).error
            raise StreamErrorEvent(error.message, error.type)
        if not self._started and kind != "message_start":
            raise Malformed(f"the stream began with {kind!r}, not message_start")
        chunk = model_pb2.ChatChunk()
        if kind == "message_start":
            if self._started:
                raise Malformed(f"{what}: a second message_start")
            self._started = True
            start = validate(_MessageStart, data, what).message
            self.model = start.model
            self._prompt_tokens = start.usage.prompt_tokens
        elif kind == "content_block_start":
            self._block_start(validate(_BlockStart, data, what), chunk, what)
        elif kind == "content_block_delta":
            self._block_delta(validate(_BlockDelta, data, what), chunk, what)
        elif kind == "content_block_stop":
            index = validate(_BlockStop, data, what).index
            self._open_block(index, what)
            self._stopped.add(index)
        elif kind == "message_delta":
            delta = validate(_MessageDelta, data, what)
            if delta.delta.stop_reason:
                self.provider_finish_reason = delta.delta.stop_reason
                chunk.finish_reason = finish_reason(delta.delta.stop_reason)
            if delta.usage is not None:
                chunk.usage.SetInParent()
                chunk.usage.prompt_tokens = delta.usage.prompt_tokens or self._prompt_tokens
                chunk.usage.completion_tokens = delta.usage.output_tokens
        elif kind == "message_stop":
            self.complete = True
        # Event types added to the API later are skipped, as its docs ask.
        if chunk.ByteSize() == 0 and not chunk.HasField("usage"):
            return []
        return [chunk]

    def _open_block(self, index: int, what: str) -> tuple[str, int]:
        if index not in self._blocks:
            raise Malformed(f"{what}: content block {index} was never started")
        if index in self._stopped:
            raise Malformed(f"{what}: content block {index} was already stopped")
        return self._blocks[index]

    def _block_start(self, start: _BlockStart, chunk: model_pb2.ChatChunk, what: str) -> None:
        if start.index in self._blocks:
            raise Malformed(f"{what}: content block {start.index} started twice")
        block = start.content_block
        if block.type == "text":
            self._blocks[start.index] = ("text", 0)
            chunk.text_delta = block.text or ""
        elif block.type == "tool_use":
            if not block.id or not block.name:
                raise Malformed(f"{what}: a tool_use block needs an id and a name")
            self._blocks[start.index] = ("tool", self._tools)
            chunk.tool_calls.add(index=self._tools, id=block.id, name=block.name)
            self._tools += 1
        else:
            self._blocks[start.index] = ("other", 0)

    def _block_delta(self, delta: _BlockDelta, chunk: model_pb2.ChatChunk, what: str) -> None:
        kind, ordinal = self._open_block(delta.index, what)
        if delta.delta.type == "text_delta":
            if kind != "text" or delta.delta.text is None:
                raise Malformed(f"{what}: a text_delta for a {kind} block")
            chunk.text_delta = delta.delta.text
        elif delta.delta.type == "input_json_delta":
            if kind != "tool" or delta.delta.partial_json is None:
                raise Malformed(f"{what}: an input_json_delta for a {kind} block")
            if delta.delta.partial_json:
                chunk.tool_calls.add(index=ordinal, arguments_fragment=delta.delta.partial_json)
        # thinking_delta, signature_delta, citations_delta: not in the contract.
