"""Shared pieces of the model adapter tests: an adapter wired to the fake
provider over real HTTP, on a virtual clock, with short timeouts."""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import attrs

from naga.v1 import model_pb2
from naga_plugins.models import Endpoint, ModelAdapter, RetryPolicy, Timeouts
from tests.fakes.clock import VirtualClock
from tests.fakes.model_server import FakeModelServer, open_model_server

APIS = ("openai", "anthropic")
#: Long enough to be found if it leaked into a message.
API_KEY = "sk-test-4f9a2c51e07b4d3c"
#: Short: the stall tests wait read_s for real (long enough that a loaded
#: machine does not turn a slow answer into a stall).
FAST = Timeouts(connect_s=2.0, read_s=0.5, write_s=2.0, pool_s=2.0, deadline_s=60.0)
RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.5, max_delay_s=4.0, max_retry_after_s=30.0)


@attrs.frozen
class Rig:
    adapter: ModelAdapter
    server: FakeModelServer
    clock: VirtualClock


def endpoint_for(server: FakeModelServer, api: str, *, provider: str = "fake") -> Endpoint:
    url = server.openai_url if api == "openai" else server.anthropic_url
    return Endpoint.of(provider=provider, base_url=url, api_key=API_KEY, model="fake-model-1")


@asynccontextmanager
async def rig(
    api: str,
    *,
    timeouts: Timeouts = FAST,
    retry: RetryPolicy = RETRY,
    seed: int = 7,
    strict: bool = False,
) -> AsyncGenerator[Rig]:
    async with open_model_server(strict=strict) as server:
        clock = VirtualClock()
        adapter = ModelAdapter.for_api(
            api,
            endpoint_for(server, api),
            timeouts=timeouts,
            retry=retry,
            clock=clock,
            rng=random.Random(seed),
        )
        async with adapter:
            yield Rig(adapter, server, clock)
        assert not server.unexpected, f"requests with no scripted reply: {server.unexpected}"
        assert not server.refused, f"requests the real server refuses: {server.refused}"


def message(role: model_pb2.Role.ValueType, content: str = "") -> model_pb2.ChatMessage:
    return model_pb2.ChatMessage(role=role, content=content)


def hi(system: str = "You are Naga, a helpful assistant.") -> model_pb2.ChatRequest:
    """A single "hi" from the user under a short system prompt."""
    return model_pb2.ChatRequest(
        messages=[message(model_pb2.ROLE_SYSTEM, system), message(model_pb2.ROLE_USER, "hi")]
    )


WEATHER = model_pb2.ToolSpec(
    name="get_weather",
    description="Current weather in a city.",
    parameters_json_schema=(
        '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}'
    ),
)


def with_weather_tool(request: model_pb2.ChatRequest) -> model_pb2.ChatRequest:
    request.tools.append(WEATHER)
    return request


class Chunks:
    """An ``on_chunk`` callback that keeps what it was given."""

    def __init__(self) -> None:
        self.got: list[model_pb2.ChatChunk] = []

    async def __call__(self, chunk: model_pb2.ChatChunk) -> None:
        self.got.append(chunk)

    @property
    def text(self) -> str:
        return "".join(chunk.text_delta for chunk in self.got)
