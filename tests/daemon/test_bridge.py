"""The grpc/trio bridge on its own, with handlers made for the test, over a
real Unix socket: a call in flight when the server stops completes, new ones
are refused; errors map through the one table; a bug costs one call."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence

import grpc
import pytest
import trio
import trio.testing
from google.protobuf.message import Message

from naga.constants import REFUSAL_KEY
from naga.trust import TrustLevel
from naga.v1 import ledger_pb2 as lpb
from naga_core.authz import TrustLowered
from naga_core.daemon import (
    AsyncUnary,
    Bridge,
    OwnerCredential,
    Principal,
    Stream,
    Unary,
    status_of,
)
from naga_core.daemon._errors import CoreStopping, CredentialMissing, RequestRefused
from naga_core.errors import LedgerCorrupt, LedgerFailed, NagaError, NotFound
from naga_core.kernel import KernelError, OwnerRequired
from naga_core.kernel._settings import InvalidSetting, UnknownSetting
from naga_core.kernel._trust import InvalidPeer, TrustRaiseRefused

SECRET = b"s" * 32
METADATA = (("authorization", "Naga " + base64.b64encode(SECRET).decode()),)
Code = grpc.StatusCode


@pytest.fixture
def address() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="naga-b-")
    try:
        yield "unix:" + os.path.join(root, "s.sock")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _call(address: str, method: str) -> tuple[Code, list[lpb.Head]]:
    got: list[lpb.Head] = []
    with grpc.insecure_channel(address) as ch:
        fn: grpc.UnaryStreamMultiCallable[bytes, bytes] = ch.unary_stream(method)
        try:
            got.extend(lpb.Head.FromString(raw) for raw in fn(b"", timeout=30, metadata=METADATA))
        except grpc.RpcError as exc:
            return exc.code(), got  # type: ignore[attr-defined]
    return Code.OK, got


def _unary(address: str, method: str) -> tuple[Code, str]:
    with grpc.insecure_channel(address) as ch:
        fn: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(method)
        try:
            fn(b"", timeout=30, metadata=METADATA)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()  # type: ignore[attr-defined]
    return Code.OK, ""


def _bridge(fatal: list[NagaError]) -> Bridge:
    return Bridge(
        authorizer=OwnerCredential(SECRET),
        on_fatal=fatal.append,
        threads=4,
        max_request_bytes=1024,
        max_response_bytes=1 << 20,
    )


def test_a_call_in_flight_when_the_server_stops_completes(address: str) -> None:
    async def main() -> tuple[Code, list[lpb.Head], Code]:
        entered, release = trio.Event(), trio.Event()

        class Slow:
            def __init__(self) -> None:
                self.sent = False

            async def next(self) -> Sequence[Message] | None:
                if self.sent:
                    return None
                entered.set()
                await release.wait()
                self.sent = True
                return [lpb.Head(size=7)]

        bridge = _bridge([])
        bridge.add("test.Slow", [Stream("Wait", lpb.GetHeadRequest, lambda p, r: Slow(), 2)])
        stop = trio.Event()
        in_flight: list[tuple[Code, list[lpb.Head]]] = []

        async def serve(*, task_status: trio.TaskStatus[None]) -> None:
            async with bridge.serving(address, grace=30):
                task_status.started()
                await stop.wait()

        async def call() -> None:
            in_flight.append(await trio.to_thread.run_sync(_call, address, "/test.Slow/Wait"))

        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            nursery.start_soon(call)
            await entered.wait()
            stop.set()
            # The serving block has called server.stop and waits for the grace.
            await trio.testing.wait_all_tasks_blocked()
            refused = (await trio.to_thread.run_sync(_call, address, "/test.Slow/Wait"))[0]
            release.set()
        (done,) = in_flight
        return done[0], done[1], refused

    code, got, refused = trio.run(main)
    assert code is Code.OK
    assert [h.size for h in got] == [7]
    # Refused by grpcio's stopped server: UNAVAILABLE, or CANCELLED when its
    # stop caught the call accepted but not started (grpc/grpc issue 41785;
    # ADR 0004; 1 run in 40 here, before the drain as after). The SDK reads
    # both as CoreUnavailable. A call refused by the drain itself is always
    # UNAVAILABLE with the stopping refusal (the next test).
    assert refused in (Code.UNAVAILABLE, Code.CANCELLED)


def _serve_unary(
    address: str, handle: Callable[[Principal, lpb.GetHeadRequest], Message]
) -> tuple[Code, str, list[NagaError], Code]:
    async def main() -> tuple[Code, str, list[NagaError], Code]:
        fatal: list[NagaError] = []
        bridge = _bridge(fatal)
        ok = Unary("Ok", lpb.GetHeadRequest, lambda p, r: lpb.Head(size=1))
        bridge.add("test.T", [Unary("Call", lpb.GetHeadRequest, handle), ok])
        async with bridge.serving(address, grace=5):
            code, detail = await trio.to_thread.run_sync(_unary, address, "/test.T/Call")
            after, _ = await trio.to_thread.run_sync(_unary, address, "/test.T/Ok")
        return code, detail, fatal, after

    return trio.run(main)


def _unary_refusal(address: str, method: str) -> tuple[Code, str]:
    """The status code and the refusal trailer of a unary call."""
    with grpc.insecure_channel(address) as ch:
        fn: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(method)
        try:
            fn(b"", timeout=30, metadata=METADATA)
        except grpc.RpcError as exc:
            trailers = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
            return exc.code(), str(trailers.get(REFUSAL_KEY, ""))  # type: ignore[attr-defined]
    return Code.OK, ""


def test_a_stopping_server_answers_its_unary_calls_before_it_stops_accepting(
    address: str,
) -> None:
    """While a unary call is still running, a stop first refuses new calls
    itself, before admitting them (so certainly unapplied), and only once the
    running call has answered does grpcio's stop begin: its GOAWAY must not
    overtake an applied call's answer (naga_core.daemon._drain)."""

    async def main() -> tuple[Code, tuple[Code, str], int]:
        entered, release = trio.Event(), trio.Event()
        handled: list[int] = []

        async def wait(_p: Principal, _r: lpb.GetHeadRequest) -> Message:
            handled.append(1)
            entered.set()
            await release.wait()
            return lpb.Head(size=7)

        bridge = _bridge([])
        bridge.add("test.Slow", [AsyncUnary("Wait", lpb.GetHeadRequest, wait)])
        stop = trio.Event()
        in_flight: list[tuple[Code, str]] = []

        async def serve(*, task_status: trio.TaskStatus[None]) -> None:
            async with bridge.serving(address, grace=30):
                task_status.started()
                await stop.wait()

        async def call() -> None:
            in_flight.append(await trio.to_thread.run_sync(_unary, address, "/test.Slow/Wait"))

        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            nursery.start_soon(call)
            await entered.wait()
            stop.set()
            # The serving block has closed the drain and waits for the call.
            await trio.testing.wait_all_tasks_blocked()
            refused = await trio.to_thread.run_sync(_unary_refusal, address, "/test.Slow/Wait")
            release.set()
        ((code, _),) = in_flight
        return code, refused, len(handled)

    code, refused, handled = trio.run(main)
    assert code is Code.OK
    assert refused == (Code.UNAVAILABLE, "REFUSAL_CORE_STOPPING")
    assert handled == 1  # the refused call never reached its handler


def test_a_bug_in_a_handler_costs_one_call(address: str) -> None:
    def buggy(_p: Principal, _r: lpb.GetHeadRequest) -> Message:
        raise ZeroDivisionError("oops")

    code, detail, fatal, after = _serve_unary(address, buggy)
    assert code is Code.INTERNAL
    assert "internal error in /test.T/Call" in detail
    assert fatal == []
    assert after is Code.OK


def test_a_failed_ledger_is_fatal_and_reported_as_unavailable(address: str) -> None:
    def failing(_p: Principal, _r: lpb.GetHeadRequest) -> Message:
        raise LedgerFailed("fdatasync failed")

    code, detail, fatal, _ = _serve_unary(address, failing)
    assert code is Code.UNAVAILABLE
    assert detail == "fdatasync failed"
    assert [str(e) for e in fatal] == ["fdatasync failed"]


def test_handlers_run_on_the_trio_thread(address: str) -> None:
    seen: list[bool] = []

    def where(_p: Principal, _r: lpb.GetHeadRequest) -> Message:
        seen.append(trio.lowlevel.in_trio_run())
        return lpb.Head()

    code, _, _, _ = _serve_unary(address, where)
    assert code is Code.OK
    assert seen == [True]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (CredentialMissing("x"), Code.UNAUTHENTICATED),
        (RequestRefused.out_of_range("x"), Code.OUT_OF_RANGE),
        (RequestRefused.invalid("x"), Code.INVALID_ARGUMENT),
        (UnknownSetting("a.b", "x"), Code.NOT_FOUND),
        (InvalidSetting("a.b", 1, "rule"), Code.INVALID_ARGUMENT),
        (InvalidPeer("x"), Code.INVALID_ARGUMENT),
        (TrustRaiseRefused("x"), Code.PERMISSION_DENIED),
        (TrustLowered("x", principal="wechat:bob", level=TrustLevel.GUEST), Code.PERMISSION_DENIED),
        (OwnerRequired("x"), Code.PERMISSION_DENIED),
        (KernelError("x"), Code.FAILED_PRECONDITION),
        (NotFound("x"), Code.NOT_FOUND),
        (CoreStopping("x"), Code.UNAVAILABLE),
        (LedgerCorrupt("p", 1, "r"), Code.DATA_LOSS),
        (NagaError("x"), Code.INTERNAL),  # no row: the core did not say what it is
    ],
)
def test_each_error_has_one_status(error: NagaError, code: Code) -> None:
    assert status_of(error)[0] is code
    assert status_of(error)[1] == str(error)


def test_a_new_error_class_inherits_its_parents_status() -> None:
    class ActionRefused(KernelError):
        pass

    assert status_of(ActionRefused("no"))[0] is Code.FAILED_PRECONDITION
