"""What every group of the client's calls shares: one unary call with its
retry rule, and the decoding of answers and streamed events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

from naga.sdk import errors
from naga.sdk._transport import StreamCall, Transport

M = TypeVar("M", bound=Message)

# A read that met UNAVAILABLE is retried this many times on a fresh channel
# (the core may have restarted under it); writes never are: they may have
# been applied before the connection broke.
_READ_ATTEMPTS = 3


def decode(message: type[M], raw: bytes, what: str) -> M:
    """``raw`` as a ``message``; an undecodable one is the core's failure."""
    try:
        return message.FromString(raw)
    except DecodeError as exc:
        raise errors.CoreFailure(f"{what}: {exc}") from None


class Rpc:
    """The transport and default deadline the call groups of ``Client`` use."""

    def __init__(self, transport: Transport, timeout: float) -> None:
        self._t = transport
        self._timeout = timeout

    def _call(
        self,
        method: str,
        request: Message,
        response: type[M],
        *,
        read: bool,
        timeout: float | None,
    ) -> M:
        raw = request.SerializeToString()
        attempts = _READ_ATTEMPTS if read else 1
        for attempt in range(attempts):
            try:
                answer = self._t.unary(method, raw, self._timeout if timeout is None else timeout)
                break
            except errors.CoreUnavailable:
                if attempt + 1 == attempts:
                    raise
        else:  # pragma: no cover - the loop breaks or raises
            raise AssertionError("unreachable")
        return decode(response, answer, f"{method}: undecodable response")

    def _read(self, method: str, request: Message, response: type[M], timeout: float | None) -> M:
        """A call that changes nothing, so is retried after UNAVAILABLE."""
        return self._call(method, request, response, read=True, timeout=timeout)

    def _write(self, method: str, request: Message, response: type[M], timeout: float | None) -> M:
        """A call that may change state, so is never retried."""
        return self._call(method, request, response, read=False, timeout=timeout)

    def _stream(self, method: str, request: Message, timeout: float | None) -> StreamCall:
        return self._t.stream(method, request.SerializeToString(), timeout)


class Events(Generic[M]):
    """An open server stream: iterate for its ``M`` messages."""

    def __init__(self, call: StreamCall, message: type[M], name: str) -> None:
        self._call = call
        self._message = message
        self._name = name

    def cancel(self) -> None:
        """End the stream (the class says what that leaves running)."""
        self._call.cancel()

    def __iter__(self) -> Iterator[M]:
        for raw in self._call:
            yield decode(self._message, raw, f"{self._name}: undecodable event")


__all__ = ["Events", "Rpc", "decode"]
