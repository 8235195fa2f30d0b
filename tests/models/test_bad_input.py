"""Bad input at both ends of an adapter: a provider's malformed answers
(BAD_RESPONSE naming what was wrong) and requests refused before sending
(INVALID_REQUEST naming the message or tool)."""

from __future__ import annotations

import pytest
import trio

from naga.v1 import model_pb2
from naga_plugins.models.errors import BadResponse, InvalidRequest
from tests.fakes.model_server import Reply
from tests.models.support import APIS, WEATHER, Chunks, hi, message, rig, with_weather_tool

MALFORMED_BODIES = {
    "openai not json": ("openai", b"{not json", "the body is not JSON"),
    "openai html": (
        "openai",
        b"<html><title>502 Bad Gateway</title></html>",
        "the body is not JSON",
    ),
    "openai no choices": ("openai", b'{"choices":[]}', "the body: choices: List should have"),
    "openai content not text": (
        "openai",
        b'{"choices":[{"message":{"content":5},"finish_reason":"stop"}]}',
        "the body: choices.0.message.content",
    ),
    "openai negative usage": (
        "openai",
        b'{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-1}}',
        "usage.prompt_tokens: Input should be greater than or equal to 0",
    ),
    "openai a list": ("openai", b"[]", "the body: (top level)"),
    "anthropic no usage": (
        "anthropic",
        b'{"type":"message","content":[]}',
        "the body: usage: Field required",
    ),
    "anthropic tool_use without input": (
        "anthropic",
        b'{"type":"message","content":[{"type":"tool_use","id":"t","name":"n"}],"usage":{}}',
        "content.0: tool_use needs id, name and input",
    ),
    "anthropic not a message": (
        "anthropic",
        b'{"type":"completion","content":[],"usage":{}}',
        "the body: type: Input should be 'message'",
    ),
}


@pytest.mark.parametrize(("api", "body", "words"), MALFORMED_BODIES.values(), ids=MALFORMED_BODIES)
def test_malformed_bodies_are_bad_responses_naming_the_fault(
    api: str, body: bytes, words: str
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.raw(body), Reply.answer("good"))
            with pytest.raises(BadResponse) as caught:
                await r.adapter.complete(hi())
            error = caught.value
            assert error.kind_name == "BAD_RESPONSE"
            assert str(error).startswith("fake: sent a malformed answer: ")
            assert words in str(error)
            assert error.attempts == 1  # the same provider would say the same again
            assert (await r.adapter.complete(hi())).message.content == "good"

    trio.run(main)


def _sse(*events: str) -> bytes:
    return "".join(f"{event}\n\n" for event in events).encode()


MALFORMED_STREAMS = {
    "openai event not json": ("openai", _sse("data: {oops"), "stream event 1 is not JSON"),
    "openai not utf-8": ("openai", b"data: \xff\xfe\n\n", "line 1 is not UTF-8"),
    "openai call without a name": (
        "openai",
        _sse(
            'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":'
            '{"arguments":"{}"}}]}}]}',
            "data: [DONE]",
        ),
        "tool call 0 never got a name",
    ),
    "openai skipped call index": (
        "openai",
        _sse('data: {"choices":[{"delta":{"tool_calls":[{"index":3,"id":"c"}]}}]}'),
        "tool call delta index 3 skips 0",
    ),
    "anthropic delta before start": (
        "anthropic",
        _sse(
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            '"delta":{"type":"text_delta","text":"x"}}'
        ),
        "the stream began with 'content_block_delta', not message_start",
    ),
    "anthropic unknown block": (
        "anthropic",
        _sse(
            'data: {"type":"message_start","message":{"model":"m"}}',
            'data: {"type":"content_block_delta","index":2,'
            '"delta":{"type":"text_delta","text":"x"}}',
        ),
        "stream event 2 (content_block_delta): content block 2 was never started",
    ),
    "anthropic json for a text block": (
        "anthropic",
        _sse(
            'data: {"type":"message_start","message":{"model":"m"}}',
            'data: {"type":"content_block_start","index":0,'
            '"content_block":{"type":"text","text":""}}',
            'data: {"type":"content_block_delta","index":0,'
            '"delta":{"type":"input_json_delta","partial_json":"{"}}',
        ),
        "an input_json_delta for a text block",
    ),
    "anthropic event without type": ("anthropic", _sse('data: {"index":0}'), "type: Field"),
}


@pytest.mark.parametrize(
    ("api", "body", "words"), MALFORMED_STREAMS.values(), ids=MALFORMED_STREAMS
)
def test_malformed_streams_are_bad_responses_naming_the_fault(
    api: str, body: bytes, words: str
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.raw(body, content_type="text/event-stream"), Reply.answer("ok"))
            with pytest.raises(BadResponse) as caught:
                await r.adapter.stream(hi(), Chunks())
            assert words in str(caught.value)
            assert caught.value.attempts == 1
            assert (await r.adapter.stream(hi(), Chunks())).message.content == "ok"

    trio.run(main)


def _request(*messages: model_pb2.ChatMessage) -> model_pb2.ChatRequest:
    return model_pb2.ChatRequest(messages=messages)


def _tool_message(content: str, call_id: str = "") -> model_pb2.ChatMessage:
    result = message(model_pb2.ROLE_TOOL, content)
    result.tool_call_id = call_id
    return result


def _assistant_calling(arguments: str, call_id: str = "c1") -> model_pb2.ChatMessage:
    assistant = message(model_pb2.ROLE_ASSISTANT)
    assistant.tool_calls.add(id=call_id, name="get_weather", arguments_json=arguments)
    return assistant


def _named_choice(name: str) -> model_pb2.ChatRequest:
    request = with_weather_tool(hi())
    request.tool_choice.mode = model_pb2.TOOL_CHOICE_MODE_NAMED
    request.tool_choice.name = name
    return request


def _required_without_tools() -> model_pb2.ChatRequest:
    request = hi()
    request.tool_choice.mode = model_pb2.TOOL_CHOICE_MODE_REQUIRED
    return request


def _tool(name: str, schema: str = "") -> model_pb2.ChatRequest:
    request = hi()
    request.tools.add(name=name, parameters_json_schema=schema)
    return request


def _with(request: model_pb2.ChatRequest, **fields: object) -> model_pb2.ChatRequest:
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(request, name).extend(value)
        else:
            setattr(request, name, value)
    return request


INVALID_REQUESTS = {
    "empty": (_request(), "the request has no user message"),
    "only system": (_request(message(model_pb2.ROLE_SYSTEM, "x")), "no user message"),
    "no role": (_request(message(model_pb2.ROLE_UNSPECIFIED, "x")), "message 0 has no role"),
    "tool result without call id": (
        _request(message(model_pb2.ROLE_USER, "x"), _tool_message("18 C")),
        "message 1 (tool) does not say which call it answers",
    ),
    "user with tool calls": (
        _request(
            model_pb2.ChatMessage(
                role=model_pb2.ROLE_USER, tool_calls=[model_pb2.ToolCall(id="a", name="b")]
            )
        ),
        "message 0 (user) has tool calls",
    ),
    "arguments not json": (
        _request(message(model_pb2.ROLE_USER, "x"), _assistant_calling("{city: Paris}")),
        "arguments of tool call 'c1' is not JSON",
    ),
    "arguments a list": (
        _request(message(model_pb2.ROLE_USER, "x"), _assistant_calling("[1]")),
        "arguments of tool call 'c1' must be a JSON object, not list",
    ),
    "call without id": (
        _request(message(model_pb2.ROLE_USER, "x"), _assistant_calling("{}", call_id="")),
        "message 1 has a tool call without an id or a name",
    ),
    "bad tool name": (_tool("get weather"), "tool name 'get weather' must be"),
    "tool twice": (
        _with(with_weather_tool(hi()), tools=[WEATHER]),
        "tool 'get_weather' is declared twice",
    ),
    "schema not json": (_tool("t", "{type: object}"), "parameters schema of tool 't' is not JSON"),
    "named tool undeclared": (_named_choice("send_email"), "tool_choice names 'send_email'"),
    "required without tools": (_required_without_tools(), "declares no tools"),
    "temperature nan": (_with(hi(), temperature=float("nan")), "temperature must be"),
    "empty stop": (_with(hi(), stop=["END", ""]), "a stop sequence is empty"),
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("request_", "words"), INVALID_REQUESTS.values(), ids=INVALID_REQUESTS.keys()
)
def test_invalid_requests_are_refused_before_sending(
    api: str, request_: model_pb2.ChatRequest, words: str
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            with pytest.raises(InvalidRequest) as caught:
                await r.adapter.complete(request_)
            assert caught.value.kind_name == "INVALID_REQUEST"
            assert words in str(caught.value)
            assert str(caught.value).startswith("fake: ")
            assert r.server.requests == []

    trio.run(main)
