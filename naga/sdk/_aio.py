"""The SDK's calls on ``grpc.aio``, for a process that keeps many streams
open at once: the synchronous client holds a thread per open stream, this
one holds none (every call is a coroutine on one asyncio loop). The
gateway uses it (one turn stream per waiting message, ADR 0038).

Errors are the synchronous client's, translated by the same function
(:func:`naga.sdk._transport.translate`): callers see only
:mod:`naga.sdk.errors`. Every method must run on the one asyncio loop that
created the client's channel (grpc.aio binds a channel to its loop).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic

import grpc
import grpc.aio

from naga.constants import RPC_DEADLINE_S
from naga.sdk import errors
from naga.sdk._address import CoreAddress
from naga.sdk._rpc import M, decode
from naga.sdk._transport import OPTIONS, translate, unavailable

# As the synchronous client: reads are retried after UNAVAILABLE on a fresh
# channel, writes never are.
_READ_ATTEMPTS = 3


class AsyncClient:
    """A connection to one naga-core whose calls are coroutines. Build with
    :meth:`presenting`; connects at the first call; after UNAVAILABLE the
    next call connects afresh. ``aclose`` closes the channel."""

    def __init__(self, address: CoreAddress, authorization: str, timeout: float) -> None:
        self._address = address
        self._metadata = (("authorization", authorization),)
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None

    @classmethod
    def presenting(
        cls,
        target: str | os.PathLike[str],
        authorization: str,
        *,
        timeout: float = RPC_DEADLINE_S,
    ) -> AsyncClient:
        """A client of the core at ``target`` presenting ``authorization``
        (an ``authorization`` header value, as a process the core started
        was handed it)."""
        return cls(CoreAddress.resolve(target), authorization, timeout)

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            if not self._address.socket_exists():
                raise unavailable(self._address, "no socket")
            self._channel = grpc.aio.insecure_channel(self._address.target, options=OPTIONS)
        return self._channel

    async def _reset(self, channel: grpc.aio.Channel) -> None:
        """Drop ``channel`` if it is still the current one."""
        if self._channel is channel:
            self._channel = None
            await channel.close()

    async def _fail(self, exc: grpc.RpcError, channel: grpc.aio.Channel, method: str) -> Exception:
        failure = translate(exc, self._address, method)
        if isinstance(failure, errors.CoreUnavailable):
            await self._reset(channel)
        return failure

    async def call(
        self,
        method: str,
        request: Any,
        response: type[M],
        *,
        read: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - grpc's deadline, as Client.call's
    ) -> M:
        """One unary call by its full name; ``read``: it changes nothing, so
        it is retried after UNAVAILABLE."""
        raw: bytes = request.SerializeToString()
        attempts = _READ_ATTEMPTS if read else 1
        for attempt in range(attempts):
            channel = self._open()
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
            try:
                answer: bytes = await call(
                    raw,
                    timeout=self._timeout if timeout is None else timeout,
                    metadata=self._metadata,
                )
            except grpc.RpcError as exc:
                failure = await self._fail(exc, channel, method)
                if not isinstance(failure, errors.CoreUnavailable) or attempt + 1 == attempts:
                    raise failure from None
            else:
                return decode(response, answer, f"{method}: undecodable response")
        raise AssertionError("unreachable")  # pragma: no cover - returns or raises

    def stream(
        self, method: str, request: Any, response: type[M], *, timeout: float | None = None
    ) -> AsyncEvents[M]:
        """One server-streaming call by its full name; ``async for`` (or
        ``await next()``, None at its end) for its messages, ``cancel()``
        to end it."""
        channel = self._open()
        call: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)
        raw: bytes = request.SerializeToString()
        started: grpc.aio.UnaryStreamCall[bytes, bytes] = call(
            raw, timeout=timeout, metadata=self._metadata
        )

        async def failure(exc: grpc.RpcError) -> Exception:
            return await self._fail(exc, channel, method)

        return AsyncEvents(started, response, method, failure)

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._reset(self._channel)


class AsyncEvents(Generic[M]):
    """An open server stream of ``M`` messages."""

    def __init__(
        self,
        call: grpc.aio.UnaryStreamCall[bytes, bytes],
        message: type[M],
        method: str,
        failure: Callable[[grpc.RpcError], Awaitable[Exception]],
    ) -> None:
        self._call = call
        self._messages = aiter(call)
        self._message = message
        self._method = method
        self._failure = failure
        self._cancelled = False

    def cancel(self) -> None:
        """End the stream (as the synchronous one's ``cancel``)."""
        self._cancelled = True
        self._call.cancel()

    def __aiter__(self) -> AsyncIterator[M]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[M]:
        while (message := await self.next()) is not None:
            yield message

    async def next(self) -> M | None:
        """The next message, or None once the stream ended (or was cancelled)."""
        try:
            raw = await anext(self._messages)
        except StopAsyncIteration:
            return None
        except grpc.RpcError as exc:
            if self._cancelled:
                return None
            raise await self._failure(exc) from None
        return decode(self._message, raw, f"{self._method}: undecodable event")


__all__ = ["AsyncClient", "AsyncEvents"]
