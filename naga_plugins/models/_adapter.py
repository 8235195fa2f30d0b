"""One model provider behind one object: a request in, a response (and its
chunks) out, retries and deadlines handled, every failure one
:class:`~naga_plugins.models.errors.ModelCallFailed`.

The adapter talks HTTP through a transport with httpcore's narrow shape
(``handle_async_request`` / ``aclose``): in production httpx's own
connection pool (under trio, through anyio), in tests the same against a
fake provider on 127.0.0.1. Streamed chunks go to a callback rather than out
of an async generator: a generator suspended inside the adapter's cancel
scopes would break trio's nesting rules (PEP 789), and the callback lets the
caller push back.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import AsyncIterator
from typing import Protocol

import httpx
import trio

from naga.v1 import model_pb2
from naga_plugins.models._anthropic import AnthropicDialect
from naga_plugins.models._attempt import Attempt, OnChunk, add_calls, as_chunk, read_capped
from naga_plugins.models._config import Clock, Endpoint, RetryPolicy, Timeouts, TrioClock
from naga_plugins.models._dialect import Dialect, HttpCall, Malformed, StreamErrorEvent
from naga_plugins.models._failures import Redactor, http_failure, stream_error, transport_failure
from naga_plugins.models._openai import OpenAIDialect
from naga_plugins.models._request import check_request, tool_names
from naga_plugins.models._sse import SseDecoder, SseError
from naga_plugins.models._textcalls import extract_text_tool_calls
from naga_plugins.models.errors import (
    BadResponse,
    EndpointConfigError,
    ModelCallFailed,
    StreamCut,
    TimedOut,
)

#: Largest answer body read; a bigger one is a broken or hostile provider.
MAX_RESPONSE_BYTES = 32 << 20
#: Largest error body read (the rest is dropped; only the message matters).
MAX_ERROR_BODY_BYTES = 64 << 10
#: What is read of a stream after its end event so that its connection is
#: reused (a chunked body's last chunk, some servers' trailing comments);
#: past either bound the connection is dropped, the answer kept.
_DRAIN_MAX_BYTES = 64 << 10
_DRAIN_S = 0.5
#: max_tokens sent to Anthropic, which requires one, when the request has 0.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


class Transport(Protocol):
    """httpcore's shape, as httpx's async transports implement it."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...

    async def aclose(self) -> None: ...


class ModelAdapter:
    """A model provider's API. Use as ``async with``, or call :meth:`aclose`.

    Build it with :meth:`openai`, :meth:`anthropic` or :meth:`for_api`. One
    adapter serves many calls, concurrently too; a failed call leaves it
    usable for the next.
    """

    def __init__(
        self,
        dialect: Dialect,
        endpoint: Endpoint,
        *,
        transport: Transport | None,
        timeouts: Timeouts,
        retry: RetryPolicy,
        clock: Clock | None,
        rng: random.Random | None,
        default_max_tokens: int,
    ) -> None:
        self._dialect = dialect
        self.endpoint = endpoint
        self.timeouts = timeouts
        self.retry = retry
        self._owns_transport = transport is None
        self._transport: Transport = transport or httpx.AsyncHTTPTransport(retries=0)
        self._clock: Clock = clock or TrioClock()
        self._rng = rng or random.Random()
        self._default_max_tokens = default_max_tokens
        self._redact = Redactor(endpoint.api_key)

    @classmethod
    def openai(
        cls,
        endpoint: Endpoint,
        *,
        transport: Transport | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        default_max_tokens: int = 0,
    ) -> ModelAdapter:
        """OpenAI-compatible chat completions (``{base_url}/chat/completions``)."""
        return cls(
            OpenAIDialect(),
            endpoint,
            transport=transport,
            timeouts=timeouts or Timeouts(),
            retry=retry or RetryPolicy(),
            clock=clock,
            rng=rng,
            default_max_tokens=default_max_tokens,
        )

    @classmethod
    def anthropic(
        cls,
        endpoint: Endpoint,
        *,
        transport: Transport | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        default_max_tokens: int = ANTHROPIC_DEFAULT_MAX_TOKENS,
    ) -> ModelAdapter:
        """Anthropic messages (``{base_url}/v1/messages``)."""
        return cls(
            AnthropicDialect(),
            endpoint,
            transport=transport,
            timeouts=timeouts or Timeouts(),
            retry=retry or RetryPolicy(),
            clock=clock,
            rng=rng,
            default_max_tokens=default_max_tokens,
        )

    @classmethod
    def for_api(
        cls,
        api: str,
        endpoint: Endpoint,
        *,
        transport: Transport | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> ModelAdapter:
        """The adapter for providers.json's ``api`` value."""
        if api == "openai":
            make = cls.openai
        elif api == "anthropic":
            make = cls.anthropic
        else:
            raise EndpointConfigError(f"{endpoint.provider}: unknown api {api!r}")
        return make(
            endpoint, transport=transport, timeouts=timeouts, retry=retry, clock=clock, rng=rng
        )

    @property
    def api(self) -> str:
        return self._dialect.api

    @property
    def text_tool_calls(self) -> bool:
        """Whether this dialect reads tool calls out of the reply's text."""
        return self._dialect.text_tool_calls

    async def __aenter__(self) -> ModelAdapter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (of a transport the adapter made itself)."""
        if self._owns_transport:
            await self._transport.aclose()

    async def complete(
        self, request: model_pb2.ChatRequest, *, deadline_s: float | None = None
    ) -> model_pb2.ChatResponse:
        """One non-streamed call, within ``deadline_s`` (the caller's share of
        its own deadline) or ``timeouts.deadline_s``, whichever is shorter."""
        return await self._call(request, None, deadline_s)

    async def stream(
        self,
        request: model_pb2.ChatRequest,
        on_chunk: OnChunk,
        *,
        deadline_s: float | None = None,
    ) -> model_pb2.ChatResponse:
        """One streamed call: ``on_chunk`` gets each chunk as it arrives; the
        return value is the whole response. Once a chunk was delivered the
        call is never retried (the caller has seen it); a failure after that
        carries the partial response. ``deadline_s`` as in :meth:`complete`."""
        return await self._call(request, on_chunk, deadline_s)

    # --- the retry loop ------------------------------------------------------------

    async def _call(
        self, request: model_pb2.ChatRequest, on_chunk: OnChunk | None, deadline_s: float | None
    ) -> model_pb2.ChatResponse:
        check_request(request, self.endpoint.provider)
        call = self._dialect.build(
            self.endpoint,
            request,
            stream=on_chunk is not None,
            default_max_tokens=self._default_max_tokens,
        )
        limit_s = self.timeouts.deadline_s
        if deadline_s is not None:
            limit_s = min(limit_s, deadline_s)
        deadline = self._clock.now() + limit_s
        attempt = 0
        while True:
            attempt += 1
            state = Attempt(on_chunk)
            try:
                response = await self._attempt_by(deadline, limit_s, call, request, state)
            except ModelCallFailed as error:
                error.attempts = attempt
                delay = self._retry_delay(error, attempt, state, deadline, limit_s)
                if delay is None:
                    raise
                await self._clock.sleep(delay)
                continue
            response.attempts = attempt
            return response

    def _retry_delay(
        self, error: ModelCallFailed, attempt: int, state: Attempt, deadline: float, limit_s: float
    ) -> float | None:
        if not error.retryable or state.delivered or attempt >= self.retry.max_attempts:
            return None
        if error.retry_after_s > self.retry.max_retry_after_s:
            error.gave_up_because = (
                f"it asks to wait {error.retry_after_s:g} s, longer than the "
                f"{self.retry.max_retry_after_s:g} s the retry policy waits"
            )
            return None
        delay = error.retry_after_s or self.retry.backoff_s(attempt, self._rng)
        if self._clock.now() + delay >= deadline:
            error.gave_up_because = (
                f"a retry in {delay:.3g} s would pass the call's "
                f"{limit_s:g} s deadline (after {attempt} attempts)"
            )
            return None
        return delay

    async def _attempt_by(
        self,
        deadline: float,
        limit_s: float,
        call: HttpCall,
        request: model_pb2.ChatRequest,
        state: Attempt,
    ) -> model_pb2.ChatResponse:
        remaining = deadline - self._clock.now()
        if remaining > 0:
            with trio.move_on_after(remaining):
                return await self._attempt(call, request, state)
        raise TimedOut(
            f"no complete answer within the call's {limit_s:g} s deadline",
            provider=self.endpoint.provider,
            partial=state.partial(self.endpoint.provider),
        )

    # --- one attempt -------------------------------------------------------------------

    async def _attempt(
        self, call: HttpCall, request: model_pb2.ChatRequest, state: Attempt
    ) -> model_pb2.ChatResponse:
        http_request = httpx.Request(
            "POST",
            call.url,
            headers=list(call.headers),
            content=call.body,
            extensions={"timeout": self.timeouts.httpx_extension()},
        )
        state.sent_ns = time.perf_counter_ns()
        try:
            http_response = await self._transport.handle_async_request(http_request)
        except httpx.TransportError as exc:
            raise self._transport_failure(exc, state) from None
        state.answered = True
        try:
            return await self._read_answer(http_response, request, state)
        except httpx.TransportError as exc:
            raise self._transport_failure(exc, state) from None
        finally:
            # Shielded so a deadline that fired mid-read still returns (or
            # drops) the connection, but bounded: a close never hangs a call.
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await http_response.aclose()

    def _transport_failure(self, exc: httpx.TransportError, state: Attempt) -> ModelCallFailed:
        return transport_failure(
            self.endpoint,
            self.timeouts,
            exc,
            answered=state.answered,
            chunks=state.delivered,
            partial=state.partial(self.endpoint.provider),
        )

    def _bad(self, what: str, state: Attempt) -> BadResponse:
        return BadResponse(
            f"sent a malformed answer: {what}",
            provider=self.endpoint.provider,
            partial=state.partial(self.endpoint.provider),
        )

    async def _read_answer(
        self, http_response: httpx.Response, request: model_pb2.ChatRequest, state: Attempt
    ) -> model_pb2.ChatResponse:
        status = http_response.status_code
        if not 200 <= status < 300:
            body = await read_capped(http_response, MAX_ERROR_BODY_BYTES, truncate=True)
            raise http_failure(self.endpoint, status, http_response.headers, body, self._redact)
        content_type = http_response.headers.get("content-type", "")
        if state.on_chunk is not None and content_type.startswith("text/event-stream"):
            response = await self._read_stream(http_response, state)
        else:
            # A server that ignored "stream": true answers one JSON body; it
            # is delivered as one chunk.
            try:
                body = await read_capped(http_response, MAX_RESPONSE_BYTES, truncate=False)
                response = self._dialect.parse(body)
            except Malformed as exc:
                raise self._bad(str(exc), state) from None
            if state.on_chunk is not None:
                await state.deliver(as_chunk(response))
        done_ns = time.perf_counter_ns()
        response.provider = self.endpoint.provider
        response.latency_us = (done_ns - state.sent_ns) // 1000
        if state.on_chunk is not None and state.first_chunk_ns:
            response.first_chunk_us = (state.first_chunk_ns - state.sent_ns) // 1000
        await self._finish_tool_calls(response, request, state)
        return response

    async def _read_stream(
        self, http_response: httpx.Response, state: Attempt
    ) -> model_pb2.ChatResponse:
        sse = SseDecoder()
        decoder = self._dialect.stream_decoder()
        pieces = http_response.aiter_bytes()
        try:
            async for piece in pieces:
                for event in sse.feed(piece):
                    for chunk in decoder.feed(event):
                        await state.deliver(chunk)
                if decoder.complete:
                    break  # what follows the end event is of no use
        except (SseError, Malformed) as exc:
            raise self._bad(str(exc), state) from None
        except StreamErrorEvent as exc:
            partial = state.partial(self.endpoint.provider)
            raise stream_error(
                self.endpoint, exc.message, exc.code, self._redact, partial
            ) from None
        if not decoder.complete:
            raise StreamCut(
                f"the stream ended without its end event after {state.delivered} chunks",
                provider=self.endpoint.provider,
                retryable=True,
                partial=state.partial(self.endpoint.provider),
            )
        await _drain(pieces)
        unnamed = state.assembler.unnamed_call()
        if unnamed is not None:
            raise self._bad(f"tool call {unnamed} never got a name", state)
        state.assembler.model = decoder.model
        state.assembler.provider_finish_reason = decoder.provider_finish_reason
        return state.assembler.response()

    async def _finish_tool_calls(
        self, response: model_pb2.ChatResponse, request: model_pb2.ChatRequest, state: Attempt
    ) -> None:
        message = response.message
        if self._dialect.text_tool_calls and not message.tool_calls:
            text, calls = extract_text_tool_calls(message.content, tool_names(request))
            if calls:
                message.content = text
                message.tool_calls.extend(calls)
                response.finish_reason = model_pb2.FINISH_REASON_TOOL_CALLS
                if state.on_chunk is not None:
                    # The text deltas already carried the block; this chunk
                    # tells a streaming caller it was a call after all.
                    chunk = model_pb2.ChatChunk(finish_reason=response.finish_reason)
                    add_calls(chunk, calls)
                    await state.on_chunk(chunk)
        # Some servers (Ollama) say "stop" when the model called tools.
        if message.tool_calls and response.finish_reason == model_pb2.FINISH_REASON_STOP:
            response.finish_reason = model_pb2.FINISH_REASON_TOOL_CALLS


async def _drain(pieces: AsyncIterator[bytes]) -> None:
    """Read a stream's body to its end after its end event, briefly and
    ignoring what comes: a response closed unread takes its connection
    with it, and each model call then paid a new connection (a tunnel
    through the egress proxy and a TCP connect) instead of reusing one."""
    left = _DRAIN_MAX_BYTES
    with trio.move_on_after(_DRAIN_S), contextlib.suppress(httpx.HTTPError):
        async for rest in pieces:
            left -= len(rest)
            if left < 0:
                return
