"""The embedded local model's costs: prints one JSON object.

* ``start_to_ready_s``: from launching the server to ``GET /v1/models``
  answering (model load included);
* memory of the server process (``/proc/PID/status``): resident set once
  ready and after the requests, split into anonymous memory and file pages
  (the model is mmapped, so most of it is shared, evictable page cache),
  plus the peak virtual size that bounds ``memory_limit_bytes``;
* a 64-token reply: wall time, completion tokens, tokens/s (prompt
  processing included, as a user waits for it);
* a forced tool call: wall time and whether the arguments parsed;
* CPU the idle server burns over ``--idle-s`` seconds after the requests;
* its sandbox as ``/proc/PID/status`` shows it (seccomp mode, no_new_privs)
  and the layers this kernel could not give.

Needs ``make`` first (wheel built, [local] installed, model assembled)::

    .venv/bin/python bench/local_model.py [--threads N] [--ctx 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sandbox  # noqa: E402
from naga_core._localmodel import LocalModelSettings, local_model  # noqa: E402

STORY = "Write a story of at least 200 words about a lighthouse keeper."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


def _status_kib(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in {"VmRSS", "RssAnon", "RssFile", "VmHWM", "VmPeak"}:
            fields[name] = int(value.split()[0])
    return fields


def _memory_mib(pid: int) -> dict[str, float]:
    kib = _status_kib(pid)
    return {
        "rss_mib": round(kib["VmRSS"] / 1024, 1),
        "rss_anon_mib": round(kib["RssAnon"] / 1024, 1),
        "rss_file_mib": round(kib["RssFile"] / 1024, 1),
        "rss_peak_mib": round(kib["VmHWM"] / 1024, 1),
        "vm_peak_mib": round(kib["VmPeak"] / 1024, 1),
    }


def _sandbox(pid: int) -> dict[str, str]:
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {"seccomp": status["Seccomp"].strip(), "no_new_privs": status["NoNewPrivs"].strip()}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _chat(client: httpx.AsyncClient, model: str, **body: Any) -> tuple[float, Any]:
    started = time.monotonic()
    response = await client.post("/chat/completions", json={"model": model, **body})
    response.raise_for_status()
    return time.monotonic() - started, response.json()


async def run(settings: LocalModelSettings, idle_s: float) -> dict[str, Any]:
    started = time.monotonic()
    with sandbox.Forker() as forker:  # closed after the server is reaped
        return await _measure(settings, idle_s, forker, started)


async def _measure(
    settings: LocalModelSettings, idle_s: float, forker: sandbox.Forker, started: float
) -> dict[str, Any]:
    async with local_model(settings, forker) as endpoint:
        ready_s = time.monotonic() - started
        memory_ready = _memory_mib(endpoint.pid)
        sandboxed = {**_sandbox(endpoint.pid), "degraded": list(endpoint.degraded)}
        async with httpx.AsyncClient(
            base_url=endpoint.base_url, timeout=300, trust_env=False
        ) as client:
            messages = [{"role": "user", "content": STORY}]
            await _chat(client, endpoint.model, messages=messages, max_tokens=8)  # warm-up
            reply_s, reply = await _chat(
                client, endpoint.model, messages=messages, max_tokens=64, temperature=0, seed=1
            )
            tool_s, tool = await _chat(
                client,
                endpoint.model,
                messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
                tools=[WEATHER_TOOL],
                tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=64,
                temperature=0,
            )
            cpu_before = _cpu_s(endpoint.pid)
            await trio.sleep(idle_s)  # measuring idleness: waiting is the point
            idle_cpu = _cpu_s(endpoint.pid) - cpu_before
            memory_after = _memory_mib(endpoint.pid)
    tokens = reply["usage"]["completion_tokens"]
    call = tool["choices"][0]["message"]["tool_calls"][0]["function"]
    return {
        "bench": "local_model",
        "model": settings.model_name,
        "model_file_mib": round(settings.model_path.stat().st_size / (1 << 20), 1),
        "threads": settings.n_threads,
        "n_ctx": settings.n_ctx,
        "cpus": len(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "start_to_ready_s": round(ready_s, 2),
        "memory_ready": memory_ready,
        "memory_after_requests": memory_after,
        "reply": {
            "completion_tokens": tokens,
            "prompt_tokens": reply["usage"]["prompt_tokens"],
            "wall_s": round(reply_s, 2),
            "tokens_per_s": round(tokens / reply_s, 1),
        },
        "forced_tool_call": {
            "wall_s": round(tool_s, 2),
            "name": call["name"],
            "arguments": json.loads(call["arguments"]),
        },
        "sandbox": sandboxed,
        "idle_cpu_s": round(idle_cpu, 3),
        "idle_s": idle_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--chat-format", default=None)
    parser.add_argument("--idle-s", type=float, default=3.0)
    args = parser.parse_args()
    overrides: dict[str, Any] = {"n_ctx": args.ctx, "chat_format": args.chat_format}
    if args.threads is not None:
        overrides["n_threads"] = args.threads
    settings = LocalModelSettings.from_cache(**overrides)
    print(json.dumps(trio.run(run, settings, args.idle_s)))


if __name__ == "__main__":
    main()
