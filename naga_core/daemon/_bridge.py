"""The one place where grpcio's server threads meet the core's trio loop.

grpcio has no trio support (docs/adr/0004-grpc-trio-bridge.md). The core
runs grpcio's synchronous server on a thread pool; each call is
authenticated, decoded and checked on its server thread, then handed to the
trio loop with ``trio.from_thread.run_sync``, so every handler (and so every
ledger and kernel access) runs on the trio thread, one at a time: the single
writer (INV-4) needs no lock. The authorizer's last step (what reads kernel
state: a token's revocation, budget, trust) runs there too, just before the
handler (naga_core.daemon._auth). Server-streaming calls fetch each batch the
same way with ``trio.from_thread.run`` and wait on the loop, not in the
thread; before each batch leaves the loop the caller's standing is checked
again, and a waiting stream is woken to check it when its token is revoked
or expires (naga_core.daemon._standing), so such a stream ends then.

Requests arrive as raw bytes (no grpcio deserializer), so a message that
does not decode is this module's INVALID_ARGUMENT with a message, not
grpcio's generic INTERNAL. Errors are mapped to status codes by
:mod:`naga_core.daemon._status` only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import grpc
import trio
from google.protobuf.message import DecodeError, Message

from naga_core.daemon._auth import Admission, Authorizer, Principal, Standing
from naga_core.daemon._drain import Drain
from naga_core.daemon._errors import CoreStopping, RequestRefused, RunDirError
from naga_core.daemon._rundir import binding_path
from naga_core.daemon._slots import StreamSlots
from naga_core.daemon._status import is_fatal, status_of, trailers_of
from naga_core.errors import NagaError

log = logging.getLogger("naga.core")

Req = TypeVar("Req", bound=Message)


def _no_check(_request: Message) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Unary(Generic[Req]):
    """A unary RPC: ``check`` runs on the server thread (pure validation),
    ``handle`` on the trio loop, serially with every other handler."""

    name: str
    request: type[Req]
    handle: Callable[[Principal, Req], Message]
    check: Callable[[Req], None] = _no_check


class Cursor(Protocol):
    """The trio side of one server-streaming call."""

    async def next(self) -> Sequence[Message] | None:
        """The next batch (maybe empty), or None when the stream is over.
        Raise a NagaError to end the stream with its status. Cancel-safe:
        cancelled while it waits, it has taken nothing, and the bridge may
        call it again (it does, after a revocation that was not its
        caller's)."""
        ...


@dataclass(frozen=True, slots=True)
class Stream(Generic[Req]):
    """A server-streaming RPC: ``open`` runs on the trio loop and returns the
    cursor the stream pulls from. At most ``max_open`` at once (each holds a
    server thread), shared fairly between callers (naga_core.daemon._slots)."""

    name: str
    request: type[Req]
    open: Callable[[Principal, Req], Cursor]
    max_open: int
    check: Callable[[Req], None] = _no_check


@dataclass(frozen=True, slots=True)
class AsyncUnary(Generic[Req]):
    """A unary RPC whose handler must wait for something (a plugin's
    answer): ``handle`` runs as a task on the trio loop, other handlers run
    while it waits, and it is cancelled if the caller goes away. Kernel
    writes it makes are settled before the response, as for :class:`Unary`,
    unless ``settled_later``: the handler's records are then made durable by
    a later commit that comes before anything depending on them leaves the
    core (ModelService.Complete: its trace and debit are settled with the
    turn's next tool call's intent or its end, before the final event;
    docs/adr/0043)."""

    name: str
    request: type[Req]
    handle: Callable[[Principal, Req], Awaitable[Message]]
    check: Callable[[Req], None] = _no_check
    settled_later: bool = False


Method = Unary[Any] | Stream[Any] | AsyncUnary[Any]


class _StreamCall:
    """One stream's pulls on the loop: its caller's standing checked before
    each batch leaves, the wait for a batch woken when the standing may have
    changed (and cancelled for good when the caller leaves)."""

    def __init__(self, standing: Standing) -> None:
        self._standing = standing
        self._scope: trio.CancelScope | None = None
        self._done = False

    async def next(self, cursor: Cursor) -> Sequence[Message] | None:
        standing = self._standing
        while not self._done:
            standing.check()
            batch: Sequence[Message] | None = None
            with trio.CancelScope(deadline=standing.deadline()) as scope:
                self._scope = scope
                try:
                    with standing.waking(scope):
                        batch = await cursor.next()
                finally:
                    self._scope = None
            if not scope.cancelled_caught:
                # Checked again: the batch may have waited for the very
                # record that revoked the token.
                standing.check()
                return batch
            # Woken (a revocation, the expiry) or the caller left: look again.
        return None  # the caller went away

    def cancel(self) -> None:  # on the trio thread
        self._done = True
        if self._scope is not None:
            self._scope.cancel()


class _Awaited:
    """One async handler call on the loop, cancellable from grpcio's thread
    when the caller goes away."""

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None
        self._done = False

    async def run(self, handle: Callable[[], Awaitable[Message]]) -> Message | None:
        if self._done:
            return None
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                return await handle()
            finally:
                self._scope = None
        return None  # cancelled: the caller went away

    def cancel(self) -> None:  # on the trio thread
        self._done = True
        if self._scope is not None:
            self._scope.cancel()


class Bridge:
    """A gRPC server whose handlers run on the trio loop that built it."""

    def __init__(
        self,
        *,
        authorizer: Authorizer,
        on_fatal: Callable[[NagaError], None],
        settle: Callable[[], bool] | None = None,
        on_settled: Callable[[], None] | None = None,
        threads: int,
        max_request_bytes: int,
        max_response_bytes: int,
    ) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._authorizer = authorizer
        self._on_fatal = on_fatal
        self._settle = settle
        self._on_settled = on_settled
        self._threads = threads
        self._options = [
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", max_response_bytes),
        ]
        self._handlers: list[grpc.GenericRpcHandler] = []
        self._served: list[str] = []
        self._slots = StreamSlots()
        self._drain = Drain()

    def add(self, service: str, methods: Sequence[Method]) -> None:
        """Serve ``methods`` under the full service name (``naga.v1.X``)."""
        table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for m in methods:
            full = f"/{service}/{m.name}"
            self._served.append(full)
            if isinstance(m, Unary):
                table[m.name] = grpc.unary_unary_rpc_method_handler(self._unary(m, full))
            elif isinstance(m, AsyncUnary):
                table[m.name] = grpc.unary_unary_rpc_method_handler(self._async_unary(m, full))
            else:
                table[m.name] = grpc.unary_stream_rpc_method_handler(self._stream(m, full))
        self._handlers.append(grpc.method_handlers_generic_handler(service, table))

    @property
    def served(self) -> tuple[str, ...]:
        """The full names of the methods added so far."""
        return tuple(self._served)

    # --- serving -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self, address: str, *, grace: float) -> AsyncGenerator[None]:
        """Serve on ``address`` (``unix:/path``) until the block exits, then
        stop accepting, give calls in flight ``grace`` seconds, and join every
        server thread."""
        executor = futures.ThreadPoolExecutor(
            max_workers=self._threads, thread_name_prefix="naga-rpc"
        )
        server = grpc.server(
            executor,
            handlers=self._handlers,
            options=self._options,
            maximum_concurrent_rpcs=self._threads * 4,
        )
        try:
            _bind(server, address)
            server.start()
            yield
        finally:
            # Shielded: in-flight calls still need this loop to finish, and
            # the server threads must be joined whatever cancelled us.
            with trio.CancelScope(shield=True):
                # First every applied call's answer, then grpcio's GOAWAY
                # (naga_core.daemon._drain says why the order matters).
                begun = time.monotonic()
                self._drain.close()
                if not self._drain.idle and not await trio.to_thread.run_sync(
                    self._drain.wait, grace
                ):
                    log.warning("naga-core: calls still running after %.1f s of grace", grace)
                stopped = server.stop(max(0.0, grace - (time.monotonic() - begun)))
                await trio.to_thread.run_sync(stopped.wait)
                await trio.to_thread.run_sync(executor.shutdown)

    # --- one call ------------------------------------------------------------------

    def _enter(self, context: grpc.ServicerContext) -> None:
        """Count a unary call until it terminates, or refuse it: the core is
        stopping (refused before admission, so certainly not applied)."""
        if not self._drain.enter():
            raise CoreStopping("naga-core is shutting down")
        if not context.add_callback(self._drain.leave):
            self._drain.leave()  # it terminated already

    def _refuse_if_stopping(self) -> None:
        """A stream opened once the stop began is refused like a unary call."""
        if self._drain.closed:
            raise CoreStopping("naga-core is shutting down")

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except NagaError as exc:
            if is_fatal(exc):
                self._on_fatal(exc)
            raise

    async def _on_loop_async(self, call: _StreamCall, cursor: Cursor) -> Any:
        try:
            return await call.next(cursor)
        except NagaError as exc:
            if is_fatal(exc):
                self._on_fatal(exc)
            raise

    def _hop(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return trio.from_thread.run_sync(self._on_loop, fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise CoreStopping("naga-core is shutting down") from None

    def _settle_ledger(self) -> None:
        """Group commit, on this server thread: nothing leaves before what the
        loop staged for it (and for anyone else) is durable."""
        if self._settle is None:
            return
        try:
            grew = self._settle()
        except NagaError as exc:
            if is_fatal(exc):
                self._hop(self._on_fatal, exc)
            raise
        if grew and self._on_settled is not None:
            self._hop(self._on_settled)

    def _admit(
        self,
        context: grpc.ServicerContext,
        full: str,
        m: Unary[Any] | AsyncUnary[Any] | Stream[Any],
        raw: bytes,
    ) -> tuple[Admission, Any]:
        """The server thread's part: who calls (before decoding, so garbage
        from a stranger is UNAUTHENTICATED, not INVALID_ARGUMENT), the
        request, its field rules, and the pure checks of the caller against it."""
        caller = self._authorizer.authorize(context.invocation_metadata(), full)
        request = _decode(m.request, raw)
        m.check(request)
        return caller.check(request), request

    @staticmethod
    def _admitted(admission: Admission, fn: Callable[[Principal, Req], Any], request: Req) -> Any:
        # On the loop: the checks that read kernel state, then the handler.
        return fn(admission.admit(), request)

    def _opened(
        self, admission: Admission, m: Stream[Any], request: Message
    ) -> tuple[Cursor, _StreamCall, Callable[[], None]]:
        # On the loop: admitted, given a slot of its caller's share, opened,
        # and how it stays admitted.
        principal = admission.admit()
        release = self._slots.take(m.name, m.max_open, principal)
        try:
            cursor = m.open(principal, request)
            return cursor, _StreamCall(admission.standing(principal)), release
        except BaseException:
            release()
            raise

    def _unary(self, m: Unary[Any], full: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def behave(raw: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                self._enter(context)
                admission, request = self._admit(context, full, m, raw)
                response: Message = self._hop(self._admitted, admission, m.handle, request)
                self._settle_ledger()
                return response.SerializeToString()
            except Exception as exc:  # noqa: BLE001 - answered with a status; see _answer
                _answer(context, full, exc)
            raise AssertionError("unreachable: abort raises")

        return behave

    def _async_unary(
        self, m: AsyncUnary[Any], full: str
    ) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def behave(raw: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                self._enter(context)
                admission, request = self._admit(context, full, m, raw)
                awaited = _Awaited()
                context.add_callback(lambda: self._cancel_on_loop(awaited.cancel))
                try:
                    response: Message = trio.from_thread.run(
                        self._on_loop_awaited,
                        awaited,
                        # On the loop: the kernel-state checks, then the handler.
                        lambda: m.handle(admission.admit(), request),
                        trio_token=self._token,
                    )
                except trio.RunFinishedError:
                    raise CoreStopping("naga-core is shutting down") from None
                finally:
                    # What the handler journaled is durable before any answer
                    # leaves, an error included (it may fail after a write).
                    if not m.settled_later:
                        self._settle_ledger()
                return response.SerializeToString()
            except Exception as exc:  # noqa: BLE001 - answered with a status; see _answer
                _answer(context, full, exc)
            raise AssertionError("unreachable: abort raises")

        return behave

    async def _on_loop_awaited(
        self, awaited: _Awaited, handle: Callable[[], Awaitable[Message]]
    ) -> Message:
        try:
            response = await awaited.run(handle)
        except NagaError as exc:
            if is_fatal(exc):
                self._on_fatal(exc)
            raise
        if response is None:
            raise RequestRefused(grpc.StatusCode.CANCELLED, "the caller went away")
        return response

    def _cancel_on_loop(self, cancel: Callable[[], None]) -> None:
        # grpcio runs this on its own thread when the call ends for any reason.
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(cancel, trio_token=self._token)

    def _stream(
        self, m: Stream[Any], full: str
    ) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        def behave(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            release: Callable[[], None] | None = None
            try:
                self._refuse_if_stopping()
                admission, request = self._admit(context, full, m, raw)
                opened: tuple[Cursor, _StreamCall, Callable[[], None]] = self._hop(
                    self._opened, admission, m, request
                )
                cursor, call, release = opened
                context.add_callback(lambda: self._cancel_on_loop(call.cancel))
                while True:
                    try:
                        batch: Sequence[Message] | None = trio.from_thread.run(
                            self._on_loop_async, call, cursor, trio_token=self._token
                        )
                    except trio.RunFinishedError:
                        raise CoreStopping("naga-core is shutting down") from None
                    if batch is None:
                        return
                    for message in batch:
                        yield message.SerializeToString()
            except Exception as exc:  # noqa: BLE001 - answered with a status; see _answer
                _answer(context, full, exc)
            finally:
                if release is not None:
                    release()

        return behave


def _decode(cls: type[Req], raw: bytes) -> Req:
    message = cls()
    try:
        message.ParseFromString(raw)
    except DecodeError as exc:
        raise RequestRefused.invalid(
            f"the request is not a valid {cls.DESCRIPTOR.full_name} message: {exc}"
        ) from None
    return message


def _answer(context: grpc.ServicerContext, full: str, exc: Exception) -> None:
    """End a failed call with its status: a NagaError's own, and INTERNAL for
    anything else (a bug must cost one call, not the core). Raises, as
    ``context.abort`` does."""
    if isinstance(exc, NagaError):
        _abort(context, exc)
    log.error("internal error in %s", full, exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {full}; see the core log")


def _abort(context: grpc.ServicerContext, exc: NagaError) -> None:
    code, message = status_of(exc)
    trailers = trailers_of(exc)
    if trailers:
        context.set_trailing_metadata(trailers)
    context.abort(code, message)


def _bind(server: grpc.Server, address: str) -> None:
    # The socket must be 0600 from the moment it has its public name. Not
    # with a umask: that is process-wide, and a thread creating a directory
    # meanwhile would get it without its x bits. gRPC binds in
    # add_insecure_port, so bind a private name, narrow it, then rename it
    # into place (the run directory, 0700, keeps others out in between).
    if not address.startswith("unix:"):
        raise RunDirError(f"the core listens on a Unix socket only, not {address}")
    path = address.removeprefix("unix:")
    binding = binding_path(path)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(binding)  # left by a core killed while binding
        server.add_insecure_port("unix:" + binding)
        os.chmod(binding, 0o600)
        os.rename(binding, path)
    except RuntimeError as exc:
        raise RunDirError(f"cannot listen on {address}: {exc}") from None
    except OSError as exc:
        raise RunDirError(f"cannot listen on {address}: {exc}") from None


__all__ = ["AsyncUnary", "Bridge", "Cursor", "Method", "Stream", "Unary"]
