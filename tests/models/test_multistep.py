"""Every adapter over a multi-step tool conversation, against a fake that
checks each request as strictly as the real server does
(tests/fakes/strict_requests.py): the follow-up after a tool result is
where a lenient fake hid that llama-cpp-python refuses ``content: null``."""

from __future__ import annotations

import json

import pytest
import trio

from naga.v1 import model_pb2
from tests.fakes.model_server import Reply
from tests.fakes.strict_requests import refusal
from tests.models.support import APIS, hi, rig, with_weather_tool

PARIS = ("call_1", "get_weather", '{"city":"Paris"}')
TOKYO = ("call_2", "get_weather", '{"city":"Tokyo"}')
OSLO = ("call_3", "get_weather", '{"city":"Oslo"}')


def _result(call_id: str, content: str, *, error: bool = False) -> model_pb2.ChatMessage:
    return model_pb2.ChatMessage(
        role=model_pb2.ROLE_TOOL, content=content, tool_call_id=call_id, tool_error=error
    )


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("streamed", [False, True])
def test_three_steps_with_parallel_calls_a_failed_one_and_text_beside_a_call(
    api: str, streamed: bool
) -> None:
    async def main() -> None:
        async with rig(api, strict=True) as r:
            r.server.script(
                Reply.answer("", tool_calls=(PARIS, TOKYO)),
                Reply.answer("Let me check Oslo too.", tool_calls=(OSLO,)),
                Reply.answer("Paris 18, Tokyo failed, Oslo 9."),
            )
            request = with_weather_tool(hi())

            async def ask() -> model_pb2.ChatResponse:
                if streamed:

                    async def ignore(_chunk: model_pb2.ChatChunk) -> None:
                        return None

                    return await r.adapter.stream(request, ignore)
                return await r.adapter.complete(request)

            first = await ask()
            assert [c.id for c in first.message.tool_calls] == ["call_1", "call_2"]
            request.messages.append(first.message)
            request.messages.append(_result("call_1", '{"temp_c":18}'))
            request.messages.append(_result("call_2", "tool failed: timeout", error=True))
            second = await ask()
            assert [c.id for c in second.message.tool_calls] == ["call_3"]
            request.messages.append(second.message)
            request.messages.append(_result("call_3", '{"temp_c":9}'))
            third = await ask()
            assert third.message.content == "Paris 18, Tokyo failed, Oslo 9."
            assert third.finish_reason == model_pb2.FINISH_REASON_STOP
            assert len(r.server.requests) == 3
            last = r.server.requests[-1].json()
            assert refusal("openai" if api == "openai" else "anthropic", last) == ""

    trio.run(main)


def test_the_strict_fake_refuses_what_llama_cpp_python_refuses() -> None:
    """The checks can fail: the request the adapter used to send (content
    null beside tool calls) and an unanswered call are refused."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    null_content = {
        "model": "m",
        "messages": [
            *base,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "r", "tool_call_id": "c1"},
        ],
    }
    assert "validation errors" in refusal("openai", null_content)
    assert "messages" in refusal("openai", null_content)
    unanswered = {
        "model": "m",
        "messages": [*base, {"role": "assistant", "tool_calls": [call]}, base[1]],
    }
    assert "not answered" in refusal("openai", unanswered)
    orphan = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "r"}],
            },
        ],
    }
    assert "unexpected tool_use_id" in refusal("anthropic", orphan)
    assert "max_tokens" in refusal("anthropic", {**orphan, "max_tokens": None})
    json.dumps(orphan)  # the bodies are plain JSON
