"""The gateway's one contact with naga-core: a narrow async interface
(:class:`CorePort`) and its gRPC implementation (:class:`GrpcCore`).

Everything the gateway needs from the core is here, as proto messages. The
lanes and the connections see only :class:`CorePort`, so a test's fake core
(a real gRPC server) and the real one plug in the same way. grpcio's
errors are translated once, here, into :class:`CoreCallFailed`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import grpc
import trio
from google.protobuf.message import Message

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import turn_pb2 as tpb
from naga_gateway.errors import CoreCallFailed

OnEvent = Callable[[tpb.TurnEvent], Awaitable[None]]
OnLedgerEvent = Callable[[lpb.SubscribeEvent], Awaitable[None]]

_TURN = "/naga.v1.TurnService/"
_KERNEL = "/naga.v1.KernelService/"
_PLUGIN = "/naga.v1.PluginService/"
_LEDGER = "/naga.v1.LedgerService/"
_TRUST = {
    cpb.TRUST_LEVEL_UNTRUSTED: TrustLevel.UNTRUSTED,
    cpb.TRUST_LEVEL_GUEST: TrustLevel.GUEST,
    cpb.TRUST_LEVEL_KNOWN: TrustLevel.KNOWN,
    cpb.TRUST_LEVEL_OWNER: TrustLevel.OWNER,
}


class CorePort(Protocol):
    """What the gateway asks of the core. Every method raises only
    :class:`CoreCallFailed`."""

    async def run(self, request: tpb.RunTurnRequest, on_event: OnEvent) -> None:
        """Run one turn, awaiting ``on_event`` for each event in order."""
        ...

    async def steer(self, request: tpb.SteerTurnRequest) -> tpb.SteerTurnResponse: ...

    async def abort(self, session: str) -> tpb.AbortTurnResponse: ...

    async def list_sessions(self, limit: int) -> tpb.ListSessionsResponse: ...

    async def history(self, session: str, limit: int) -> tpb.SessionHistoryResponse: ...

    async def trust(self, peer: str) -> TrustLevel:
        """The trust table's level for ``peer`` (UNTRUSTED when unknown)."""
        ...

    async def rollback(self, to_seq: int, *, dry_run: bool) -> cpb.RollbackResponse: ...

    async def tool_risks(self) -> dict[str, int]:
        """Every installed tool's risk level (0 for R0 .. 4 for R4)."""
        ...

    async def setting(self, name: str) -> cpb.Setting:
        """One of the core's settings, as in effect now."""
        ...

    async def ledger_size(self) -> int:
        """How many records the core's ledger holds (its head's size)."""
        ...

    async def subscribe(self, request: lpb.SubscribeRequest, on_event: OnLedgerEvent) -> None:
        """Follow the ledger from ``request.from_seq``, awaiting ``on_event``
        for each event, until cancelled or the stream breaks."""
        ...


class GrpcCore:
    """:class:`CorePort` over the core's Unix socket; ``authorization`` is
    the header value the gateway presents (``Capability <base64 token>``).
    grpcio is synchronous here: each call runs on a worker thread so the
    trio loop never blocks."""

    def __init__(self, socket: str, authorization: str) -> None:
        self._channel = grpc.insecure_channel(
            f"unix:{socket}", options=[("grpc.enable_retries", 0)]
        )
        self._metadata = (("authorization", authorization),)

    def close(self) -> None:
        self._channel.close()

    async def _unary(self, method: str, request: Message, response: type[Any]) -> Any:
        call: grpc.UnaryUnaryMultiCallable[Message, Any] = self._channel.unary_unary(
            method, request_serializer=_serialize, response_deserializer=response.FromString
        )

        def invoke() -> Any:
            try:
                return call(request, metadata=self._metadata, timeout=30.0)
            except grpc.RpcError as exc:
                raise _translate(exc, method) from None

        return await trio.to_thread.run_sync(invoke, abandon_on_cancel=True)

    async def _stream(
        self,
        method: str,
        request: Message,
        response: type[Any],
        on_event: Callable[[Any], Awaitable[None]],
    ) -> None:
        stream: grpc.UnaryStreamMultiCallable[Message, Any] = self._channel.unary_stream(
            method, request_serializer=_serialize, response_deserializer=response.FromString
        )
        call = stream(request, metadata=self._metadata)
        it: Iterator[Any] = iter(call)  # type: ignore[arg-type]

        def pull() -> Any:
            try:
                return next(it)
            except StopIteration:
                return None
            except grpc.RpcError as exc:
                raise _translate(exc, method) from None

        try:
            while (
                event := await trio.to_thread.run_sync(pull, abandon_on_cancel=True)
            ) is not None:
                await on_event(event)
        finally:
            call.cancel()  # type: ignore[attr-defined]

    async def run(self, request: tpb.RunTurnRequest, on_event: OnEvent) -> None:
        await self._stream(_TURN + "Run", request, tpb.TurnEvent, on_event)

    async def subscribe(self, request: lpb.SubscribeRequest, on_event: OnLedgerEvent) -> None:
        await self._stream(_LEDGER + "Subscribe", request, lpb.SubscribeEvent, on_event)

    async def setting(self, name: str) -> cpb.Setting:
        req = cpb.GetSettingRequest(name=name)
        return await self._unary(_KERNEL + "GetSetting", req, cpb.Setting)

    async def ledger_size(self) -> int:
        head: lpb.Head = await self._unary(_LEDGER + "GetHead", lpb.GetHeadRequest(), lpb.Head)
        return head.size

    async def steer(self, request: tpb.SteerTurnRequest) -> tpb.SteerTurnResponse:
        return await self._unary(_TURN + "Steer", request, tpb.SteerTurnResponse)

    async def abort(self, session: str) -> tpb.AbortTurnResponse:
        req = tpb.AbortTurnRequest(session=session)
        return await self._unary(_TURN + "Abort", req, tpb.AbortTurnResponse)

    async def list_sessions(self, limit: int) -> tpb.ListSessionsResponse:
        req = tpb.ListSessionsRequest(limit=limit)
        return await self._unary(_TURN + "ListSessions", req, tpb.ListSessionsResponse)

    async def history(self, session: str, limit: int) -> tpb.SessionHistoryResponse:
        req = tpb.SessionHistoryRequest(session=session, limit=limit)
        return await self._unary(_TURN + "History", req, tpb.SessionHistoryResponse)

    async def trust(self, peer: str) -> TrustLevel:
        entry: cpb.TrustEntry = await self._unary(
            _KERNEL + "GetTrust", cpb.GetTrustRequest(peer=peer), cpb.TrustEntry
        )
        return _TRUST.get(entry.level, TrustLevel.UNTRUSTED)

    async def rollback(self, to_seq: int, *, dry_run: bool) -> cpb.RollbackResponse:
        # by_owner is the owner's CLI's to assert, never the gateway's: a
        # rollback that would raise a privilege is refused (OwnerRequired)
        # and the console says so (INV-6).
        req = cpb.RollbackRequest(to_seq=to_seq, dry_run=dry_run)
        return await self._unary(_KERNEL + "Rollback", req, cpb.RollbackResponse)

    async def tool_risks(self) -> dict[str, int]:
        resp: spb.ListPluginsResponse = await self._unary(
            _PLUGIN + "List", spb.ListPluginsRequest(), spb.ListPluginsResponse
        )
        # ToolRisk numbers are the level plus one (0 stays "unspecified",
        # which counts as the worst).
        return {t.name: (t.risk - 1 if t.risk else 4) for p in resp.plugins for t in p.tools}


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _translate(exc: grpc.RpcError, method: str) -> CoreCallFailed:
    code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
    detail: str = exc.details() or ""  # type: ignore[attr-defined]
    name = method.rsplit("/", 1)[-1]
    return CoreCallFailed(f"{name}: {detail or code.name}", code.name)


__all__ = ["CorePort", "GrpcCore", "OnEvent", "OnLedgerEvent"]
