"""One HTTP attempt's state, and the helpers that read an answer's body.

Kept apart from the retry loop in ``_adapter`` so each stays small.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

import httpx

from naga.v1 import model_pb2
from naga_plugins.models._assemble import Assembler
from naga_plugins.models._dialect import Malformed

OnChunk = Callable[[model_pb2.ChatChunk], Awaitable[None]]


class Attempt:
    """What one HTTP attempt has received so far."""

    def __init__(self, on_chunk: OnChunk | None) -> None:
        self.on_chunk = on_chunk
        self.assembler = Assembler()
        self.sent_ns = time.perf_counter_ns()
        self.first_chunk_ns = 0
        self.answered = False

    @property
    def delivered(self) -> int:
        return self.assembler.chunks

    async def deliver(self, chunk: model_pb2.ChatChunk) -> None:
        if not self.first_chunk_ns:
            self.first_chunk_ns = time.perf_counter_ns()
        self.assembler.add(chunk)
        if self.on_chunk is not None:
            await self.on_chunk(chunk)

    def partial(self, provider: str) -> model_pb2.ChatResponse | None:
        if self.on_chunk is None:
            return None
        response = self.assembler.response()
        response.provider = provider
        return response


def as_chunk(response: model_pb2.ChatResponse) -> model_pb2.ChatChunk:
    chunk = model_pb2.ChatChunk(
        text_delta=response.message.content, finish_reason=response.finish_reason
    )
    add_calls(chunk, response.message.tool_calls)
    if response.HasField("usage"):
        chunk.usage.CopyFrom(response.usage)
    return chunk


def add_calls(chunk: model_pb2.ChatChunk, calls: Iterable[model_pb2.ToolCall]) -> None:
    for n, call in enumerate(calls):
        chunk.tool_calls.add(
            index=n, id=call.id, name=call.name, arguments_fragment=call.arguments_json
        )


async def read_capped(response: httpx.Response, limit: int, *, truncate: bool) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for piece in response.aiter_bytes():
        size += len(piece)
        if size > limit:
            if truncate:
                break
            raise Malformed(f"the body is larger than {limit} bytes")
        parts.append(piece)
    return b"".join(parts)
