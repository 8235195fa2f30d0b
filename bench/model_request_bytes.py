"""Model adapters against the fake provider on 127.0.0.1: prints one JSON object.

* the bytes one "hi" costs on the wire (request line, headers, body) and in
  the body alone, under a short system prompt, for each API, streamed or not;
* the adapter's round trip to a provider that answers at once (its own
  overhead, since the fake does no work): p50/p99 over ``--calls`` calls;
* ``with_default_tools``: the bytes of "hi" under the agent's system prompt
  with the tools a fresh install offers an owner's turn (the shipped tool
  plugins' tools up to ``tools.max_risk``, as naga_core.agent builds them).

    python bench/model_request_bytes.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from naga.v1 import model_pb2

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "You are Naga, a helpful assistant."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    calls: int = args.calls
    sys.path.insert(0, str(REPO))  # the fake provider lives with the tests

    import trio

    from naga.v1 import model_pb2
    from naga_plugins.models import Endpoint, ModelAdapter
    from tests.fakes.model_server import Reply, open_model_server

    request = model_pb2.ChatRequest(
        messages=[
            model_pb2.ChatMessage(role=model_pb2.ROLE_SYSTEM, content=SYSTEM),
            model_pb2.ChatMessage(role=model_pb2.ROLE_USER, content="hi"),
        ]
    )
    result: dict[str, object] = {
        "bench": "model_request_bytes",
        "python": platform.python_version(),
        "system_prompt_chars": len(SYSTEM),
        "calls": calls,
    }

    async def on_chunk(_chunk: model_pb2.ChatChunk) -> None:
        pass

    async def run() -> None:
        async with open_model_server() as server:
            for api in ("openai", "anthropic"):
                url = server.openai_url if api == "openai" else server.anthropic_url
                endpoint = Endpoint.of(
                    provider="bench",
                    base_url=url,
                    api_key="sk-" + "x" * 48,  # a key of a real key's length
                    model="deepseek-chat",
                )
                async with ModelAdapter.for_api(api, endpoint) as adapter:
                    for streamed in (False, True):
                        mode = "stream" if streamed else "complete"
                        server.script(*(Reply.answer("Hello!") for _ in range(calls + 1)))
                        first = len(server.requests)
                        times: list[float] = []
                        for _ in range(calls + 1):
                            started = time.perf_counter()
                            if streamed:
                                await adapter.stream(request, on_chunk)
                            else:
                                await adapter.complete(request)
                            times.append(time.perf_counter() - started)
                        times = times[1:]  # the first call also opens the connection
                        sent = server.requests[first]
                        quantiles = statistics.quantiles(times, n=100)
                        result[f"{api}_{mode}"] = {
                            "wire_bytes": sent.wire_bytes,
                            "body_bytes": len(sent.body),
                            "round_trip_p50_us": round(quantiles[49] * 1e6),
                            "round_trip_p99_us": round(quantiles[98] * 1e6),
                        }

    trio.run(run)
    result["with_default_tools"] = trio.run(_with_default_tools)
    print(json.dumps(result))
    return 0


def _default_tool_specs() -> list[model_pb2.ToolSpec]:
    from naga.tokens import Risk
    from naga_core.agent._tools import spec_for_model
    from naga_core.kernel import DEFAULT_SETTINGS
    from naga_core.plugins._catalog import Catalog, Root
    from naga_core.plugins._host import TOOLS_ROOT

    limit = Risk[str(next(s.default for s in DEFAULT_SETTINGS if s.name == "tools.max_risk"))]
    catalog = Catalog.scan([Root(TOOLS_ROOT, shipped=True)])
    tools = [t for name in catalog.names() for t in catalog.plugins[name][-1].manifest.tools]
    return [spec_for_model(t) for t in sorted(tools, key=lambda t: t.name) if t.risk <= limit]


async def _with_default_tools() -> dict[str, object]:
    from naga_core.agent import SYSTEM_PROMPT
    from naga_plugins.models import Endpoint, ModelAdapter
    from tests.fakes.model_server import Reply, open_model_server

    specs = _default_tool_specs()
    request = model_pb2.ChatRequest(
        messages=[
            model_pb2.ChatMessage(role=model_pb2.ROLE_SYSTEM, content=SYSTEM_PROMPT),
            model_pb2.ChatMessage(role=model_pb2.ROLE_USER, content="hi"),
        ],
        tools=specs,
    )
    out: dict[str, object] = {"tools": len(specs)}
    async with open_model_server() as server:
        for api in ("openai", "anthropic"):
            url = server.openai_url if api == "openai" else server.anthropic_url
            endpoint = Endpoint.of(
                provider="bench", base_url=url, api_key="sk-" + "x" * 48, model="deepseek-chat"
            )
            async with ModelAdapter.for_api(api, endpoint) as adapter:
                server.script(Reply.answer("Hello!"))
                await adapter.complete(request)
                sent = server.requests[-1]
                out[api] = {"wire_bytes": sent.wire_bytes, "body_bytes": len(sent.body)}
    return out


if __name__ == "__main__":
    sys.exit(main())
