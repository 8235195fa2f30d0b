"""The adapters against the fake provider over real HTTP: replies, streams,
tool calls, and what each adapter puts on the wire."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from naga.v1 import model_pb2
from naga_plugins.models import ANTHROPIC_DEFAULT_MAX_TOKENS, ANTHROPIC_VERSION
from tests.fakes.model_server import Reply
from tests.models.support import (
    API_KEY,
    APIS,
    WEATHER,
    Chunks,
    hi,
    message,
    rig,
    with_weather_tool,
)

PARIS = ("call_1", "get_weather", '{"city":"Paris"}')
TOKYO = ("call_2", "get_weather", '{"city":"Tokyo"}')


def test_openai_plain_reply_and_what_was_sent() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer("Hello! How can I help?", usage=(21, 7)))
            response = await r.adapter.complete(hi())

            assert response.message.role == model_pb2.ROLE_ASSISTANT
            assert response.message.content == "Hello! How can I help?"
            assert not response.message.tool_calls
            assert response.finish_reason == model_pb2.FINISH_REASON_STOP
            assert response.provider_finish_reason == "stop"
            assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (21, 7)
            assert response.model == "fake-model"
            assert response.provider == "fake"
            assert response.attempts == 1
            assert response.latency_us > 0
            assert response.first_chunk_us == 0

            (sent,) = r.server.requests
            assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
            assert sent.header("authorization") == f"Bearer {API_KEY}"
            assert sent.header("content-type") == "application/json"
            assert sent.json() == {
                "model": "fake-model-1",
                "messages": [
                    {"role": "system", "content": "You are Naga, a helpful assistant."},
                    {"role": "user", "content": "hi"},
                ],
            }

    trio.run(main)


def test_anthropic_plain_reply_and_what_was_sent() -> None:
    async def main() -> None:
        async with rig("anthropic") as r:
            r.server.script(Reply.answer("Hello! How can I help?", usage=(21, 7)))
            response = await r.adapter.complete(hi())

            assert response.message.content == "Hello! How can I help?"
            assert response.finish_reason == model_pb2.FINISH_REASON_STOP
            assert response.provider_finish_reason == "end_turn"
            assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (21, 7)

            (sent,) = r.server.requests
            assert (sent.method, sent.path) == ("POST", "/v1/messages")
            assert sent.header("x-api-key") == API_KEY
            assert sent.header("anthropic-version") == ANTHROPIC_VERSION
            assert sent.header("authorization") is None
            assert sent.json() == {
                "model": "fake-model-1",
                "max_tokens": ANTHROPIC_DEFAULT_MAX_TOKENS,
                "system": "You are Naga, a helpful assistant.",
                "messages": [{"role": "user", "content": "hi"}],
            }

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_streamed_reply_is_assembled_from_its_chunks(api: str) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice."

    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.answer(text, pieces=6, usage=(30, 12)))
            chunks = Chunks()
            response = await r.adapter.stream(hi(), chunks)

            text_chunks = [c for c in chunks.got if c.text_delta]
            assert len(text_chunks) == 6
            assert chunks.text == text == response.message.content
            assert response.finish_reason == model_pb2.FINISH_REASON_STOP
            assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30, 12)
            assert [c.usage.completion_tokens for c in chunks.got if c.HasField("usage")] == [12]
            assert 0 < response.first_chunk_us <= response.latency_us
            assert response.model == "fake-model"

            body = r.server.requests[0].json()
            assert body["stream"] is True
            assert r.server.requests[0].header("accept") == "text/event-stream"
            if api == "openai":
                assert body["stream_options"] == {"include_usage": True}

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
def test_native_tool_calls(api: str, streamed: bool) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.answer("Let me check.", tool_calls=(PARIS, TOKYO)))
            request = with_weather_tool(hi())
            chunks = Chunks()
            if streamed:
                response = await r.adapter.stream(request, chunks)
            else:
                response = await r.adapter.complete(request)

            calls = [
                (c.id, c.name, json.loads(c.arguments_json)) for c in response.message.tool_calls
            ]
            assert calls == [
                ("call_1", "get_weather", {"city": "Paris"}),
                ("call_2", "get_weather", {"city": "Tokyo"}),
            ]
            assert response.message.content == "Let me check."
            assert response.finish_reason == model_pb2.FINISH_REASON_TOOL_CALLS
            if streamed:
                # The deltas, regrouped by index, are the calls.
                fragments: dict[int, str] = {}
                for chunk in chunks.got:
                    for delta in chunk.tool_calls:
                        fragments[delta.index] = (
                            fragments.get(delta.index, "") + delta.arguments_fragment
                        )
                assert fragments == {0: '{"city":"Paris"}', 1: '{"city":"Tokyo"}'}
                assert sum(len(c.tool_calls) for c in chunks.got) >= 4  # split, not whole

            tool = r.server.requests[0].json()["tools"][0]
            schema = json.loads(WEATHER.parameters_json_schema)
            if api == "openai":
                assert tool == {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Current weather in a city.",
                        "parameters": schema,
                    },
                }
            else:
                assert tool == {
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "input_schema": schema,
                }

    trio.run(main)


TEXT_CALLS = {
    "qwen tags": (
        'I will look it up.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call>',
        "I will look it up.",
    ),
    "fenced json": (
        'Checking.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
        "Checking.",
    ),
    "bare object": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', ""),
    "arguments as a string": (
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
        "",
    ),
}


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(("text", "rest"), TEXT_CALLS.values(), ids=TEXT_CALLS.keys())
def test_openai_tool_calls_written_in_the_text_are_parsed(
    text: str, rest: str, streamed: bool
) -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer(text, finish="stop"))
            request = with_weather_tool(hi())
            chunks = Chunks()
            if streamed:
                response = await r.adapter.stream(request, chunks)
            else:
                response = await r.adapter.complete(request)

            (call,) = response.message.tool_calls
            assert (call.id, call.name) == ("text_call_0", "get_weather")
            assert json.loads(call.arguments_json) == {"city": "Paris"}
            assert response.message.content == rest
            assert response.finish_reason == model_pb2.FINISH_REASON_TOOL_CALLS
            assert response.provider_finish_reason == "stop"
            if streamed:
                # The text went out as it came; a last chunk says it was a call.
                assert chunks.text == text
                last = chunks.got[-1]
                assert last.finish_reason == model_pb2.FINISH_REASON_TOOL_CALLS
                assert [(d.index, d.name) for d in last.tool_calls] == [(0, "get_weather")]

    trio.run(main)


FS_LIST = model_pb2.ToolSpec(
    name="fs__list",  # fs.list as naga_core.agent writes it on the wire
    description="List a workspace directory",
    parameters_json_schema='{"type":"object","properties":{"path":{"type":"string"}}}',
)


@pytest.mark.parametrize(
    "text",
    [
        # What the embedded qwen2.5-coder-0.5b answered to "Call fs.list with path .".
        '{"name": "fs.list", "arguments": {"path": "."}}',
        '<tool_call>\n{"name": "fs.list", "arguments": {"path": "."}}\n</tool_call>',
    ],
    ids=["bare object", "qwen tags"],
)
def test_openai_text_calls_may_name_the_tool_as_naga_does(text: str) -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer(text, finish="stop"))
            request = hi()
            request.tools.append(FS_LIST)
            response = await r.adapter.complete(request)
            (call,) = response.message.tool_calls
            assert (call.name, json.loads(call.arguments_json)) == ("fs__list", {"path": "."})
            assert response.message.content == ""
            assert response.finish_reason == model_pb2.FINISH_REASON_TOOL_CALLS

    trio.run(main)


def test_a_dotted_name_is_no_call_when_its_wire_form_is_not_offered() -> None:
    text = '{"name": "fs.delete", "arguments": {"path": "x"}}'

    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer(text))
            request = hi()
            request.tools.append(FS_LIST)
            response = await r.adapter.complete(request)
            assert response.message.content == text
            assert not response.message.tool_calls

    trio.run(main)


@pytest.mark.parametrize(
    "text",
    [
        # A tool the request did not declare: an example shown to the user.
        '```json\n{"name": "delete_everything", "arguments": {}}\n```',
        # Not a call at all.
        '```json\n{"city": "Paris"}\n```',
        # A declared tool, but followed by more text inside the block.
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}} and more',
    ],
)
def test_openai_text_that_only_looks_like_a_call_stays_text(text: str) -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer(text))
            response = await r.adapter.complete(with_weather_tool(hi()))
            assert response.message.content == text
            assert not response.message.tool_calls
            assert response.finish_reason == model_pb2.FINISH_REASON_STOP

    trio.run(main)


def test_openai_text_calls_are_not_parsed_when_tools_are_forbidden() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'

    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer(text))
            request = with_weather_tool(hi())
            request.tool_choice.mode = model_pb2.TOOL_CHOICE_MODE_NONE
            response = await r.adapter.complete(request)
            assert response.message.content == text
            assert not response.message.tool_calls

    trio.run(main)


def _conversation_after_calls() -> model_pb2.ChatRequest:
    request = with_weather_tool(hi())
    request.messages[-1].content = "Weather in Paris and Tokyo?"
    assistant = message(model_pb2.ROLE_ASSISTANT, "Let me check.")
    for call_id, name, arguments in (PARIS, TOKYO):
        assistant.tool_calls.add(id=call_id, name=name, arguments_json=arguments)
    request.messages.append(assistant)
    paris = message(model_pb2.ROLE_TOOL, "18 C, sunny")
    paris.tool_call_id = "call_1"
    tokyo = message(model_pb2.ROLE_TOOL, "weather service unavailable")
    tokyo.tool_call_id = "call_2"
    tokyo.tool_error = True
    request.messages.extend([paris, tokyo])
    return request


def test_anthropic_tool_use_round_trip() -> None:
    async def main() -> None:
        async with rig("anthropic") as r:
            r.server.script(
                Reply.answer("Let me check.", tool_calls=(PARIS, TOKYO)),
                Reply.answer("Paris is sunny at 18 C; Tokyo's weather is unavailable."),
            )
            first = await r.adapter.complete(with_weather_tool(hi()))
            assert [c.id for c in first.message.tool_calls] == ["call_1", "call_2"]

            second = await r.adapter.stream(_conversation_after_calls(), Chunks())
            assert second.message.content.startswith("Paris is sunny")
            assert second.finish_reason == model_pb2.FINISH_REASON_STOP

            body: dict[str, Any] = r.server.requests[1].json()
            assert body["system"] == "You are Naga, a helpful assistant."
            assert body["messages"] == [
                {"role": "user", "content": "Weather in Paris and Tokyo?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me check."},
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "call_2",
                            "name": "get_weather",
                            "input": {"city": "Tokyo"},
                        },
                    ],
                },
                {
                    # Both results in the one user message after the calls.
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "18 C, sunny"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_2",
                            "content": "weather service unavailable",
                            "is_error": True,
                        },
                    ],
                },
            ]

    trio.run(main)


def test_openai_tool_round_trip() -> None:
    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.answer("Paris is sunny."))
            await r.adapter.complete(_conversation_after_calls())
            messages = r.server.requests[0].json()["messages"]
            assert messages[2:] == [
                {
                    "role": "assistant",
                    "content": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
                        },
                    ],
                },
                {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"},
                {
                    "role": "tool",
                    "content": "weather service unavailable",
                    "tool_call_id": "call_2",
                },
            ]

    trio.run(main)


CHOICES = {
    "auto": (model_pb2.TOOL_CHOICE_MODE_AUTO, "auto", {"type": "auto"}),
    "none": (model_pb2.TOOL_CHOICE_MODE_NONE, "none", {"type": "none"}),
    "required": (model_pb2.TOOL_CHOICE_MODE_REQUIRED, "required", {"type": "any"}),
    "named": (
        model_pb2.TOOL_CHOICE_MODE_NAMED,
        {"type": "function", "function": {"name": "get_weather"}},
        {"type": "tool", "name": "get_weather"},
    ),
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(("mode", "openai", "anthropic"), CHOICES.values(), ids=CHOICES.keys())
def test_sampling_options_and_tool_choice_are_mapped(
    api: str, mode: model_pb2.ToolChoiceMode.ValueType, openai: object, anthropic: object
) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.answer("ok"))
            request = with_weather_tool(hi())
            request.tool_choice.mode = mode
            request.tool_choice.name = (
                "get_weather" if mode == model_pb2.TOOL_CHOICE_MODE_NAMED else ""
            )
            request.max_tokens = 64
            request.temperature = 0.25
            request.stop.extend(["\n\nUser:", "END"])
            request.model = "other-model"
            await r.adapter.complete(request)
            body = r.server.requests[0].json()
            assert body["model"] == "other-model"
            assert body["max_tokens"] == 64
            assert body["temperature"] == 0.25
            if api == "openai":
                assert body["stop"] == ["\n\nUser:", "END"]
                assert body["tool_choice"] == openai
            else:
                assert body["stop_sequences"] == ["\n\nUser:", "END"]
                assert body["tool_choice"] == anthropic

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_a_server_that_ignores_stream_true_still_streams_one_chunk(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(Reply.answer("all at once", ignore_stream=True, usage=(5, 3)))
            chunks = Chunks()
            response = await r.adapter.stream(hi(), chunks)
            (chunk,) = chunks.got
            assert chunk.text_delta == "all at once" == response.message.content
            assert chunk.usage.completion_tokens == 3
            assert response.finish_reason == model_pb2.FINISH_REASON_STOP

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_concurrent_calls_share_one_adapter(api: str) -> None:
    async def main() -> None:
        async with rig(api) as r:
            r.server.script(*(Reply.answer("same") for _ in range(4)))
            results: list[str] = []

            async def one() -> None:
                results.append((await r.adapter.stream(hi(), Chunks())).message.content)

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(one)
            assert results == ["same"] * 4

    trio.run(main)


@pytest.mark.parametrize("api", APIS)
def test_streamed_answers_reuse_one_connection(api: str) -> None:
    """A stream is read to its body's end after its end event, so the
    connection goes back to the pool: three streamed calls, one connection
    (each call opened its own, through the egress proxy, before)."""

    async def main() -> None:
        async with rig(api) as r:
            r.server.script(*(Reply.answer(f"answer {i}", pieces=3) for i in range(3)))
            for i in range(3):
                chunks = Chunks()
                response = await r.adapter.stream(hi(), chunks)
                assert response.message.content == f"answer {i}"
            assert r.server.connections == 1

    trio.run(main)
