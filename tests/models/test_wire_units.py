"""The adapters' parts without a network: the SSE decoder and the chunk
assembler (property tests), tool calls in text, provider error bodies,
Retry-After, and the configuration classes' refusals."""

from __future__ import annotations

import email.utils
import json
import time

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import model_pb2
from naga_plugins.models import (
    Assembler,
    Endpoint,
    RetryPolicy,
    SseDecoder,
    SseError,
    SseEvent,
    Timeouts,
    extract_text_tool_calls,
)
from naga_plugins.models._failures import error_details, retry_after_s
from naga_plugins.models.errors import EndpointConfigError
from tests.fakes.model_server import Reply
from tests.models.support import hi, rig, with_weather_tool

# --- server-sent events ------------------------------------------------------------

_LINE = st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=12)
_EVENTS = st.lists(
    st.builds(
        SseEvent,
        event=st.sampled_from(["", "message_start", "ping", "content_block_delta"]),
        data=st.lists(_LINE, min_size=1, max_size=3).map("\n".join),
    ),
    max_size=8,
)


@st.composite
def _encoded(draw: st.DrawFn) -> tuple[list[SseEvent], bytes, list[int]]:
    events = draw(_EVENTS)
    # One line end per stream, as servers write: mixed, a CR line followed by
    # an empty LF line would read as one CRLF.
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    out: list[str] = []
    for event in events:
        if draw(st.booleans()):
            out.append(": keep-alive" + end)
        if event.event:
            out.append(f"event: {event.event}" + end)
        out.extend(f"data: {line}" + end for line in event.data.split("\n"))
        out.append(end)
    # A CR at the very end could still be the first half of a CRLF; a last
    # comment line ends it.
    out.append(":\n")
    raw = "".join(out).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    return events, raw, cuts


@settings(max_examples=300, deadline=None)
@given(_encoded())
def test_sse_events_do_not_depend_on_where_the_bytes_were_cut(
    case: tuple[list[SseEvent], bytes, list[int]],
) -> None:
    events, raw, cuts = case
    decoder = SseDecoder()
    got: list[SseEvent] = []
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        got.extend(decoder.feed(raw[start:end]))
    assert got == events
    assert not decoder.pending


def test_sse_fields_as_the_standard_says() -> None:
    decoder = SseDecoder()
    raw = b"data:no space\n\ndata:  two spaces\nid: 7\nretry: 10\nunknown: x\n\nevent: e\n\n"
    assert decoder.feed(raw) == [SseEvent("", "no space"), SseEvent("", " two spaces")]
    # An event name with no data dispatches nothing.
    assert not decoder.pending


def test_sse_refuses_what_is_not_text() -> None:
    with pytest.raises(SseError, match="line 2 is not UTF-8"):
        SseDecoder().feed(b"data: ok\ndata: \xc3\x28\n\n")


def test_sse_refuses_an_endless_line() -> None:
    decoder = SseDecoder()
    for _ in range(4):
        assert decoder.feed(b"x" * (1 << 20)) == []
    with pytest.raises(SseError, match="a line longer than"):
        decoder.feed(b"x")


# --- the assembler -------------------------------------------------------------------

_DELTAS = st.builds(
    model_pb2.ToolCallDelta,
    index=st.integers(0, 2),
    id=st.sampled_from(["", "call_a", "call_b"]),
    name=st.sampled_from(["", "search", "read"]),
    arguments_fragment=st.sampled_from(["", "{", '"q":', '"x"', "}"]),
)
_FINISH = st.sampled_from(list(model_pb2.FinishReason.values()))


@st.composite
def _chunk(draw: st.DrawFn) -> model_pb2.ChatChunk:
    chunk = model_pb2.ChatChunk(
        text_delta=draw(st.text(max_size=5)),
        tool_calls=draw(st.lists(_DELTAS, max_size=2)),
        finish_reason=draw(_FINISH),
    )
    if draw(st.booleans()):
        chunk.usage.prompt_tokens = draw(st.integers(0, 2**32 - 1))
        chunk.usage.completion_tokens = draw(st.integers(0, 2**32 - 1))
    return chunk


@settings(max_examples=300, deadline=None)
@given(st.lists(_chunk(), max_size=12))
def test_the_response_is_what_the_chunks_add_up_to(chunks: list[model_pb2.ChatChunk]) -> None:
    assembler = Assembler()
    for chunk in chunks:
        assembler.add(chunk)
    response = assembler.response()

    assert response.message.role == model_pb2.ROLE_ASSISTANT
    assert response.message.content == "".join(c.text_delta for c in chunks)
    deltas = [d for c in chunks for d in c.tool_calls]
    indexes = sorted({d.index for d in deltas})
    assert [call.id for call in response.message.tool_calls] == [
        next((d.id for d in deltas if d.index == i and d.id), "") for i in indexes
    ]
    assert [call.name for call in response.message.tool_calls] == [
        next((d.name for d in deltas if d.index == i and d.name), "") for i in indexes
    ]
    assert [call.arguments_json for call in response.message.tool_calls] == [
        "".join(d.arguments_fragment for d in deltas if d.index == i) or "{}" for i in indexes
    ]
    finishes = [c.finish_reason for c in chunks if c.finish_reason]
    assert response.finish_reason == (finishes[-1] if finishes else 0)
    usages = [c.usage for c in chunks if c.HasField("usage")]
    assert response.HasField("usage") == bool(usages)
    if usages:
        assert response.usage == usages[-1]
    assert assembler.chunks == len(chunks)


# --- tool calls in text --------------------------------------------------------------


def test_several_text_calls_and_the_text_around_them() -> None:
    text = (
        "First Paris.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "Then two at once:\n"
        '<tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
        '{"function": {"name": "get_time", "arguments": "{\\"tz\\": \\"CET\\"}"}}]</tool_call>'
        "\nDone."
    )
    rest, calls = extract_text_tool_calls(text, {"get_weather", "get_time"})
    assert rest == "First Paris.\n\nThen two at once:\n\nDone."
    assert [(c.id, c.name, json.loads(c.arguments_json)) for c in calls] == [
        ("text_call_0", "get_weather", {"city": "Paris"}),
        ("text_call_1", "get_weather", {"city": "Oslo"}),
        ("text_call_2", "get_time", {"tz": "CET"}),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "no json here",
        '{"name": "get_weather", "arguments": [1, 2]}',  # arguments not an object
        '{"name": "get_weather", "arguments": "{not json"}',
        '[{"name": "get_weather", "arguments": {}}, {"name": "unknown", "arguments": {}}]',
        "<tool_call>{unterminated",
    ],
)
def test_text_that_is_not_a_call_is_left_alone(text: str) -> None:
    assert extract_text_tool_calls(text, {"get_weather"}) == (text, [])


def test_no_tools_means_no_text_calls() -> None:
    text = '{"name": "get_weather", "arguments": {}}'
    assert extract_text_tool_calls(text, set()) == (text, [])


def test_ollama_style_answer_says_stop_but_calls_a_tool() -> None:
    # content "", arguments as an object, finish_reason "stop": Ollama's
    # OpenAI-compatible endpoint answers tool calls so.
    body = json.dumps(
        {
            "model": "qwen3:4b",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "call_x",
                                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                            }
                        ],
                    },
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()

    async def main() -> None:
        async with rig("openai") as r:
            r.server.script(Reply.raw(body))
            response = await r.adapter.complete(with_weather_tool(hi()))
            (call,) = response.message.tool_calls
            assert (call.id, call.name, call.arguments_json) == (
                "call_x",
                "get_weather",
                '{"city":"Paris"}',
            )
            assert response.finish_reason == model_pb2.FINISH_REASON_TOOL_CALLS
            assert response.provider_finish_reason == "stop"
            assert not response.HasField("usage")

    trio.run(main)


# --- provider error bodies and Retry-After ---------------------------------------------

ERROR_BODIES = {
    "openai": (
        b'{"error":{"message":"Rate limit reached","type":"requests",'
        b'"code":"rate_limit_exceeded"}}',
        ("Rate limit reached", "rate_limit_exceeded"),
    ),
    "anthropic": (
        b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        ("Overloaded", "overloaded_error"),
    ),
    "vllm": (
        b'{"object":"error","message":"max_tokens too large","type":"BadRequestError","code":400}',
        ("max_tokens too large", "BadRequestError"),
    ),
    "llama.cpp": (
        b'{"error":{"code":500,"message":"slot unavailable","type":"server_error"}}',
        ("slot unavailable", "server_error"),
    ),
    "ollama": (b'{"error":"model \\"qwen\\" not found"}', ('model "qwen" not found', "")),
    "text": (b"upstream connect error", ("upstream connect error", "")),
    "html": (
        b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
        ("an HTML page: 502 Bad Gateway", ""),
    ),
    "json list": (b"[1]", ("[1]", "")),
}


@pytest.mark.parametrize(("body", "expected"), ERROR_BODIES.values(), ids=ERROR_BODIES.keys())
def test_error_details_of_each_provider_shape(body: bytes, expected: tuple[str, str]) -> None:
    assert error_details(body) == expected


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, 0.0),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "soon"}, 0.0),
        ({"retry-after": "nan"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "x", "retry-after": "2"}, 0.0),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float) -> None:
    assert retry_after_s(headers) == seconds


def test_retry_after_as_an_http_date() -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after_s({"retry-after": date}) <= 30


# --- configuration -------------------------------------------------------------------------

KEY = "sk-unit-0123456789"
ENDPOINTS = {
    "ftp": ({"base_url": "ftp://host/v1"}, "must be an http:// or https:// URL with a host"),
    "no host": ({"base_url": "http:///v1"}, "with a host"),
    "not a url": ({"base_url": "localhost:8080"}, "must be an http:// or https:// URL"),
    "bad port": ({"base_url": "http://host:99999"}, "Port out of range"),
    "user in url": ({"base_url": "https://me:pw@host"}, "no user, query or fragment"),
    "query": ({"base_url": "https://host/v1?key=x"}, "no user, query or fragment"),
    "key with newline": ({"api_key": KEY + "\n"}, "api_key holds whitespace or control"),
    "empty model": ({"model": ""}, "model must be a non-empty name"),
    "provider name": ({"provider": "my provider"}, "provider name 'my provider' must be"),
}


@pytest.mark.parametrize(("change", "words"), ENDPOINTS.values(), ids=ENDPOINTS.keys())
def test_endpoint_refusals(change: dict[str, str], words: str) -> None:
    fields = {
        "provider": "p",
        "base_url": "https://api.example.com/v1",
        "api_key": KEY,
        "model": "m",
    }
    fields.update(change)
    with pytest.raises(EndpointConfigError, match=None) as caught:
        Endpoint.of(**fields)
    assert words in str(caught.value)
    assert KEY not in str(caught.value)


def test_endpoint_trims_the_slash_and_hides_the_key() -> None:
    endpoint = Endpoint.of(
        provider="deepseek", base_url="https://api.deepseek.com/v1/", api_key=KEY, model="m"
    )
    assert endpoint.base_url == "https://api.deepseek.com/v1"
    assert endpoint.host == "api.deepseek.com"
    assert KEY not in repr(endpoint)


def test_timeouts_and_retry_policy_refuse_nonsense() -> None:
    with pytest.raises(EndpointConfigError, match="read_s must be a positive number"):
        Timeouts(read_s=0)
    with pytest.raises(EndpointConfigError, match="deadline_s must be a positive number"):
        Timeouts(deadline_s=float("inf"))
    with pytest.raises(EndpointConfigError, match="max_attempts must be at least 1"):
        RetryPolicy(max_attempts=0)


def test_backoff_grows_and_is_capped() -> None:
    import random

    policy = RetryPolicy(base_delay_s=1, max_delay_s=8)
    rng = random.Random(3)
    for failures, step in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 8), (30, 8)]:
        for _ in range(20):
            assert step / 2 <= policy.backoff_s(failures, rng) <= step
