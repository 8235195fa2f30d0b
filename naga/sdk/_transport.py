"""The SDK's one contact with grpcio: a channel to the core, raw calls, and
the translation of ``grpc.RpcError`` into :mod:`naga.sdk.errors`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from naga.constants import MAX_RPC_RESPONSE_BYTES, REFUSAL_KEY
from naga.sdk import errors
from naga.sdk._address import START_HINT, CoreAddress
from naga.tokens import REJECT_REASON_KEY, RejectReason
from naga.v1.status_pb2 import Refusal

OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_RPC_RESPONSE_BYTES),
    # The SDK decides what is retried (reads only), not grpcio.
    ("grpc.enable_retries", 0),
    # A fresh channel after UNAVAILABLE must really reconnect, not reuse a
    # subchannel of the global pool that is still backing off.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Despite its name, grpc core reads this as the minimum *connect
    # timeout*: the time a new connection gets to finish its HTTP/2
    # handshake. At 100 ms, a core busy on a loaded box (or starting its
    # children) that sent its SETTINGS frame later than that was reported
    # as not running ("connection attempt timed out before receiving SETTINGS
    # frame"), 10 tests at once in one loaded run. A dead core still fails at
    # once (the connect is refused); a call's own deadline bounds the wait.
    ("grpc.min_reconnect_backoff_ms", 20_000),
]

_BY_CODE: dict[grpc.StatusCode, type[errors.SdkError]] = {
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: errors.OutOfRange,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: errors.Unimplemented,
}
#: The class of a refused token, by the status code its reason maps to.
_TOKEN_BY_CODE: dict[grpc.StatusCode, type[errors.TokenRefused]] = {
    grpc.StatusCode.UNAUTHENTICATED: errors.TokenUnauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: errors.TokenDenied,
    grpc.StatusCode.INVALID_ARGUMENT: errors.TokenInvalid,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.BudgetExhausted,
}


def unavailable(
    address: CoreAddress,
    why: str = "",
    *,
    code: str = "UNAVAILABLE",
    refusal: Refusal.ValueType = Refusal.REFUSAL_UNSPECIFIED,
) -> errors.CoreUnavailable:
    detail = f": {why}" if why else ""
    return errors.CoreUnavailable(
        f"naga-core is not running (no answer on {address.socket}{detail})",
        hint=START_HINT,
        code=code,
        refusal=refusal,
    )


def translate(exc: grpc.RpcError, address: CoreAddress, method: str) -> errors.SdkError:
    """The SDK error for a failed call (the only place RpcError is read):
    its class by the status code and the core's refusal, never by words."""
    code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
    detail: str = exc.details() or ""  # type: ignore[attr-defined]
    trailers = _trailers(exc)
    refusal = _refusal(trailers)
    name = code.name
    message = f"{method.rsplit('/', 1)[-1]}: {detail} ({name})"
    if refusal == Refusal.REFUSAL_WORKER_UNAVAILABLE:
        # The core answered: one of its plugin workers is down, not the core.
        return errors.PluginUnavailable(message, code=name, detail=detail, refusal=refusal)
    if code is grpc.StatusCode.UNAVAILABLE:
        return unavailable(address, detail, refusal=refusal)
    if code is grpc.StatusCode.CANCELLED:
        # The SDK never cancels a unary call, and a stream it cancelled ends
        # quietly: this is the core cancelling calls it had not started as it
        # stops. Like UNAVAILABLE, a write may or may not have been applied.
        return errors.CoreCancelled(
            f"naga-core is not running (no answer on {address.socket}: "
            "the core cancelled the call; it is stopping)",
            hint=START_HINT,
            code=name,
            refusal=refusal,
        )
    reason = _reject_reason(trailers)
    token_cls = _TOKEN_BY_CODE.get(code)
    if reason is not None and token_cls is not None:
        return token_cls(message, reason=reason, code=name, detail=detail)
    cls = _BY_CODE.get(code, errors.CoreFailure)
    return cls(message, code=name, detail=detail, refusal=refusal)


def _trailers(exc: grpc.RpcError) -> dict[str, str]:
    """The string trailers of a failed call: a synchronous call's
    (``grpc.Call``) or a ``grpc.aio`` one's (``AioRpcError``, not a
    ``grpc.Call``); both iterate as (key, value) pairs."""
    read: Any = getattr(exc, "trailing_metadata", None)
    trailers: Any = read() if callable(read) else None
    out: dict[str, str] = {}
    for key, value in trailers or ():
        if isinstance(key, str) and isinstance(value, str):
            out[key] = value
    return out


def _refusal(trailers: dict[str, str]) -> Refusal.ValueType:
    """The refusal the core named (UNSPECIFIED if none, or one this SDK
    does not know: a newer core's new value)."""
    try:
        return Refusal.Value(trailers.get(REFUSAL_KEY, "REFUSAL_UNSPECIFIED"))
    except ValueError:
        return Refusal.REFUSAL_UNSPECIFIED


def _reject_reason(trailers: dict[str, str]) -> RejectReason | None:
    """The reason the core named in the trailing metadata, if it named one
    this SDK knows (a newer core's new reason falls back to the code)."""
    value = trailers.get(REJECT_REASON_KEY)
    return RejectReason.named(value) if value is not None else None


Metadata = tuple[tuple[str, str], ...]


class SharedChannel:
    """The one grpc channel of a client and of the clients derived from it
    (:meth:`Transport.derive`); replaced after UNAVAILABLE. Each channel it
    opens has a new generation number, so that a failure reported on an old
    channel does not drop the fresh one another thread already opened."""

    def __init__(self, address: CoreAddress) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._generation = 0

    def open(self) -> tuple[grpc.Channel, int]:
        with self._lock:
            if self._channel is None:
                if not self.address.socket_exists():
                    raise unavailable(self.address, "no socket")
                self._channel = grpc.insecure_channel(self.address.target, options=OPTIONS)
                self._generation += 1
            return self._channel, self._generation

    def reset(self, generation: int | None = None) -> None:
        """Drop the channel (only if it is still ``generation``'s, when given);
        the next call connects afresh."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


class Transport:
    """Calls over a :class:`SharedChannel` with one credential.
    ``authorization`` gives the ``authorization`` metadata value, asked again
    whenever the channel was replaced (the core writes a new owner credential
    at every start). A transport made by :meth:`derive` shares its maker's
    channel with another credential; only the maker's :meth:`close` closes it."""

    def __init__(
        self,
        address: CoreAddress,
        authorization: Callable[[], str],
        *,
        channel: SharedChannel | None = None,
    ) -> None:
        self.address = address
        self._authorization = authorization
        self._owns_channel = channel is None
        self._channel = SharedChannel(address) if channel is None else channel
        self._lock = threading.Lock()
        # (generation, metadata): the credential as read for that channel.
        self._metadata: tuple[int, Metadata] = (0, ())

    def derive(self, authorization: Callable[[], str]) -> Transport:
        """A transport over this one's channel presenting another credential."""
        return Transport(self.address, authorization, channel=self._channel)

    def _open(self) -> tuple[grpc.Channel, int, Metadata]:
        channel, generation = self._channel.open()
        with self._lock:
            if self._metadata[0] != generation:
                self._metadata = (generation, (("authorization", self._authorization()),))
            return channel, generation, self._metadata[1]

    def reset(self, generation: int | None = None) -> None:
        """Drop the channel (shared: every client on it reconnects at its next call)."""
        self._channel.reset(generation)

    def close(self) -> None:
        if self._owns_channel:
            self._channel.reset()

    def unary(self, method: str, request: bytes, timeout: float) -> bytes:
        channel, generation, metadata = self._open()
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
        try:
            answer: bytes = call(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as exc:
            failure = translate(exc, self.address, method)
        else:
            return answer
        if isinstance(failure, errors.CoreUnavailable):
            self.reset(generation)
        raise failure

    def stream(self, method: str, request: bytes, timeout: float | None) -> StreamCall:
        channel, generation, metadata = self._open()
        call: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)
        return StreamCall(
            self, method, call(request, timeout=timeout, metadata=metadata), generation
        )


class StreamCall:
    """A server stream of raw messages; errors translated, cancellable."""

    def __init__(
        self, transport: Transport, method: str, call: Any, generation: int | None = None
    ) -> None:
        self._transport = transport
        self._generation = generation
        self._method = method
        self._call = call
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    def __iter__(self) -> Iterator[bytes]:
        iterator: Iterator[bytes] = iter(self._call)
        while True:
            try:
                raw = next(iterator)
            except StopIteration:
                return
            except grpc.RpcError as exc:
                if self._cancelled:
                    return
                failure = translate(exc, self._transport.address, self._method)
                if isinstance(failure, errors.CoreUnavailable):
                    self._transport.reset(self._generation)
                raise failure from None
            yield raw


__all__ = ["OPTIONS", "SharedChannel", "StreamCall", "Transport", "translate", "unavailable"]
