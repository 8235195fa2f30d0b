"""The OpenAI-compatible chat completions API (OpenAI, DeepSeek, vLLM,
llama.cpp server, Ollama): ``POST {base_url}/chat/completions``.

Streams are ``data: {chunk}`` events ended by ``data: [DONE]``; tool calls
arrive as deltas keyed by ``index`` that are concatenated per index.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

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

_FINISH = {
    "stop": model_pb2.FINISH_REASON_STOP,
    "length": model_pb2.FINISH_REASON_LENGTH,
    "tool_calls": model_pb2.FINISH_REASON_TOOL_CALLS,
    "function_call": model_pb2.FINISH_REASON_TOOL_CALLS,
    "content_filter": model_pb2.FINISH_REASON_CONTENT_FILTER,
}
_ROLES = {
    model_pb2.ROLE_SYSTEM: "system",
    model_pb2.ROLE_USER: "user",
    model_pb2.ROLE_ASSISTANT: "assistant",
    model_pb2.ROLE_TOOL: "tool",
}
_TOOL_CHOICE = {
    model_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    model_pb2.TOOL_CHOICE_MODE_NONE: "none",
    model_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
}

Count = Annotated[int, pydantic.Field(ge=0, le=MAX_TOKENS_FIELD)]
Index = Annotated[int, pydantic.Field(ge=0, le=1023)]


def finish_reason(raw: str | None) -> model_pb2.FinishReason.ValueType:
    if raw is None:
        return model_pb2.FINISH_REASON_UNSPECIFIED
    return _FINISH.get(raw, model_pb2.FINISH_REASON_OTHER)


# --- the provider's bodies -------------------------------------------------------


class _Usage(WireModel):
    prompt_tokens: Count = 0
    completion_tokens: Count = 0


class _Function(WireModel):
    name: str
    # Some servers (Ollama's native shape leaking through) send an object.
    arguments: str | dict[str, Any] = ""


class _ToolCall(WireModel):
    id: str = ""
    function: _Function


class _Message(WireModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(WireModel):
    message: _Message
    finish_reason: str | None = None


class _ErrorBody(WireModel):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class _Completion(WireModel):
    model: str = ""
    choices: list[_Choice] = pydantic.Field(min_length=1)
    usage: _Usage | None = None


class _DeltaFunction(WireModel):
    name: str | None = None
    arguments: str | None = None


class _DeltaToolCall(WireModel):
    index: Index | None = None
    id: str | None = None
    function: _DeltaFunction | None = None


class _Delta(WireModel):
    content: str | None = None
    tool_calls: list[_DeltaToolCall] | None = None


class _ChunkChoice(WireModel):
    index: int = 0
    delta: _Delta = _Delta()
    finish_reason: str | None = None


class _Chunk(WireModel):
    model: str = ""
    choices: list[_ChunkChoice] = pydantic.Field(default_factory=list[_ChunkChoice])
    usage: _Usage | None = None
    error: _ErrorBody | str | None = None


def _arguments_text(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else compact_json(arguments).decode()


# --- the dialect -----------------------------------------------------------------------


class OpenAIDialect:
    api = "openai"
    text_tool_calls = True

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
            "messages": [self._message(m, provider) for m in request.messages],
        }
        if stream:
            # Without include_usage a stream carries no token counts, and the
            # core debits budgets by them.
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        # 0 leaves the length to the provider, whose defaults are sane here.
        max_tokens = request.max_tokens or default_max_tokens
        if max_tokens:
            body["max_tokens"] = max_tokens
        if request.HasField("temperature"):
            body["temperature"] = request.temperature
        if request.stop:
            body["stop"] = list(request.stop)
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": schema_object(tool, provider),
                    },
                }
                for tool in request.tools
            ]
            choice = request.tool_choice
            if choice.mode == model_pb2.TOOL_CHOICE_MODE_NAMED:
                body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
            elif choice.mode in _TOOL_CHOICE:
                body["tool_choice"] = _TOOL_CHOICE[choice.mode]
        headers = [("content-type", "application/json")]
        if stream:
            headers.append(("accept", "text/event-stream"))
        if endpoint.api_key:  # local servers (llama.cpp, Ollama) often take none
            headers.append(("authorization", f"Bearer {endpoint.api_key}"))
        return HttpCall(f"{endpoint.base_url}/chat/completions", tuple(headers), compact_json(body))

    @staticmethod
    def _message(message: model_pb2.ChatMessage, provider: str) -> dict[str, Any]:
        out: dict[str, Any] = {"role": _ROLES[message.role]}
        if message.role == model_pb2.ROLE_ASSISTANT and message.tool_calls:
            # Without text, no "content" at all: null is what OpenAI sends
            # back, but llama-cpp-python's server (the embedded model) types
            # it `NotRequired[str]` and refuses null with a 500, and the
            # others accept the key left out.
            if message.content:
                out["content"] = message.content
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # Re-encoded, so what the provider sees is canonical
                        # JSON whatever spacing the model produced.
                        "arguments": compact_json(arguments_object(call, provider)).decode(),
                    },
                }
                for call in message.tool_calls
            ]
        elif message.role == model_pb2.ROLE_USER and any(i.data for i in message.images):
            # Content parts: the text, then each image as a data URL (the
            # core fills data only for a provider that declares vision).
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
            parts.extend(
                {
                    "type": "image_url",
                    "image_url": {
                        "url": f"data:{image.mime};base64," + base64.b64encode(image.data).decode()
                    },
                }
                for image in message.images
                if image.data
            )
            out["content"] = parts
        else:
            out["content"] = message.content
        if message.role == model_pb2.ROLE_TOOL:
            out["tool_call_id"] = message.tool_call_id
        return out

    def parse(self, body: bytes) -> model_pb2.ChatResponse:
        completion = validate(_Completion, load_json(body, "the body"), "the body")
        choice = completion.choices[0]
        response = model_pb2.ChatResponse(
            finish_reason=finish_reason(choice.finish_reason),
            provider_finish_reason=choice.finish_reason or "",
            model=completion.model,
        )
        message = response.message
        message.role = model_pb2.ROLE_ASSISTANT
        message.content = choice.message.content or ""
        for call in choice.message.tool_calls or ():
            message.tool_calls.add(
                id=call.id,
                name=call.function.name,
                arguments_json=_arguments_text(call.function.arguments) or "{}",
            )
        if completion.usage is not None:
            response.usage.SetInParent()
            response.usage.prompt_tokens = completion.usage.prompt_tokens
            response.usage.completion_tokens = completion.usage.completion_tokens
        return response

    def stream_decoder(self) -> OpenAIStream:
        return OpenAIStream()


class OpenAIStream:
    """``data:`` events of one streamed completion -> chunks."""

    def __init__(self) -> None:
        self.complete = False
        self.model = ""
        self.provider_finish_reason = ""
        self._events = 0
        self._last_index = -1
        self._last_id = ""

    def feed(self, event: SseEvent) -> list[model_pb2.ChatChunk]:
        self._events += 1
        if self.complete:
            return []  # nothing follows [DONE]; a stray keep-alive is harmless
        if event.data.strip() == "[DONE]":
            self.complete = True
            return []
        what = f"stream event {self._events}"
        parsed = validate(_Chunk, load_json(event.data, what), what)
        if parsed.error is not None:
            if isinstance(parsed.error, str):
                raise StreamErrorEvent(parsed.error, "")
            code = parsed.error.code if parsed.error.code is not None else parsed.error.type
            raise StreamErrorEvent(parsed.error.message, str(code or ""))
        if parsed.model:
            self.model = parsed.model
        chunk = model_pb2.ChatChunk()
        for choice in parsed.choices:
            if choice.index != 0:
                continue  # the adapter never asks for n > 1
            if choice.delta.content:
                chunk.text_delta += choice.delta.content
            for call in choice.delta.tool_calls or ():
                delta = chunk.tool_calls.add(index=self._call_index(call))
                delta.id = call.id or ""
                if call.function is not None:
                    delta.name = call.function.name or ""
                    delta.arguments_fragment = call.function.arguments or ""
            if choice.finish_reason:
                self.provider_finish_reason = choice.finish_reason
                chunk.finish_reason = finish_reason(choice.finish_reason)
        if parsed.usage is not None:
            chunk.usage.SetInParent()
            chunk.usage.prompt_tokens = parsed.usage.prompt_tokens
            chunk.usage.completion_tokens = parsed.usage.completion_tokens
        if chunk.ByteSize() == 0 and not chunk.HasField("usage"):
            return []
        return [chunk]

    def _call_index(self, call: _DeltaToolCall) -> int:
        if call.index is not None:
            index = call.index
        elif call.id and call.id != self._last_id:
            # Servers that omit the index start each new call with its id.
            index = self._last_index + 1
        else:
            index = max(self._last_index, 0)
        if index > self._last_index + 1:
            raise Malformed(f"tool call delta index {index} skips {self._last_index + 1}")
        self._last_index = max(self._last_index, index)
        if call.id:
            self._last_id = call.id
        return index
