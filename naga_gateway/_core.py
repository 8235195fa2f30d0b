"""The gateway's one contact with naga-core: a narrow async interface
(:class:`CorePort`) and its gRPC implementation (:class:`GrpcCore`).

Everything the gateway needs from the core is here, as proto messages. The
lanes and the connections see only :class:`CorePort`, so a test's fake core
(a real gRPC server) and the real one plug in the same way. The calls go
through the SDK (its grpc.aio client, :class:`naga.sdk.AsyncClient`), as
every sandboxed process's do; its errors are translated once, here, into
:class:`CoreCallFailed`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from google.protobuf.message import Message

from naga.sdk import AsyncClient
from naga.sdk.errors import (
    CoreUnavailable,
    NotFound,
    PermissionDenied,
    SdkError,
    Unauthenticated,
    Unimplemented,
)
from naga.trust import TrustLevel
from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import tools_pb2 as tlpb
from naga.v1 import turn_pb2 as tpb
from naga_gateway._loop import AsyncioThread
from naga_gateway.errors import CoreCallFailed

OnEvent = Callable[[tpb.TurnEvent], Awaitable[None]]
OnLedgerEvent = Callable[[lpb.SubscribeEvent], Awaitable[None]]

#: Longest wait for one unary answer of the core.
_CALL_TIMEOUT_S = 30.0
_TURN = "/naga.v1.TurnService/"
_KERNEL = "/naga.v1.KernelService/"
_PLUGIN = "/naga.v1.PluginService/"
_LEDGER = "/naga.v1.LedgerService/"
_APPROVAL = "/naga.v1.ApprovalService/"
_CONSOLE = "/naga.v1.ConsoleService/"
_ADMIN = "/naga.v1.ConsoleAdminService/"
M = TypeVar("M", bound=Message)
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

    async def list_sessions(
        self, limit: int, include_archived: bool = False
    ) -> tpb.ListSessionsResponse: ...

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

    async def decide_approval(self, approval_id: str, allow: bool) -> int:
        """The owner's answer to a waiting tool call; the decision's seq."""
        ...

    async def entries(self, before_seq: int, limit: int) -> cpb.HistoryResponse:
        """Ledger entries before ``before_seq``, newest first (the undo preview)."""
        ...

    async def redeem_login(self, code: str) -> cnpb.RedeemLoginResponse:
        """Trade a one-time console login code for the owner's session
        credential (the verdict says whether it was one)."""
        ...

    async def check_session(self, session: str) -> cnpb.ConsoleVerdict.ValueType:
        """Whether a session credential (a cookie's value) is the owner's now."""
        ...

    # The console's read-only pages (docs/console.md).

    async def list_settings(self) -> cpb.ListSettingsResponse: ...

    async def list_trust(self) -> cpb.ListTrustResponse: ...

    async def list_plugins(self) -> spb.ListPluginsResponse: ...

    async def ledger_history(self, limit: int, before_seq: int | None) -> cpb.HistoryResponse: ...

    async def records(self, from_seq: int, limit: int) -> list[lpb.Record]:
        """Consecutive ledger records from ``from_seq`` (fewer near the end)."""
        ...

    async def admin(self, method: str, request: Message, response: type[M]) -> M:
        """One ConsoleAdminService call (``method``: its name, ``RenameSession``);
        ``request`` carries the owner's console session, which the core checks."""
        ...


class GrpcCore:
    """:class:`CorePort` over the core's Unix socket; ``authorization`` is
    the header value the gateway presents (``Capability <base64 token>``).
    The calls are grpc.aio coroutines on one asyncio thread
    (:class:`AsyncioThread`), so an open stream holds no thread (ADR 0038):
    every waiting message holds one."""

    def __init__(self, socket: str, authorization: str) -> None:
        self._loop = AsyncioThread("naga-gateway-grpc")
        self._client = AsyncClient.presenting(socket, authorization, timeout=_CALL_TIMEOUT_S)

    def close(self) -> None:
        """Close the channel and stop its thread (after the trio run)."""
        self._loop.close(self._client.aclose)

    async def _unary(self, method: str, request: Message, response: type[Any]) -> Any:
        try:
            return await self._loop.run(self._client.call(method, request, response))
        except SdkError as exc:
            raise _translate(exc, method) from None
        except concurrent.futures.CancelledError:
            raise _stopped(method) from None

    async def _stream(
        self,
        method: str,
        request: Message,
        response: type[Any],
        on_event: Callable[[Any], Awaitable[None]],
    ) -> None:
        async def events() -> AsyncIterator[Any]:
            stream = self._client.stream(method, request, response, timeout=None)
            try:
                async for event in stream:
                    yield event
            finally:
                stream.cancel()

        try:
            await self._loop.each(events, on_event)
        except SdkError as exc:
            raise _translate(exc, method) from None
        except concurrent.futures.CancelledError:
            raise _stopped(method) from None

    async def run(self, request: tpb.RunTurnRequest, on_event: OnEvent) -> None:
        await self._stream(_TURN + "Run", request, tpb.TurnEvent, on_event)

    async def subscribe(self, request: lpb.SubscribeRequest, on_event: OnLedgerEvent) -> None:
        await self._stream(_LEDGER + "Subscribe", request, lpb.SubscribeEvent, on_event)

    async def redeem_login(self, code: str) -> cnpb.RedeemLoginResponse:
        req = cnpb.RedeemLoginRequest(code=code)
        return await self._unary(_CONSOLE + "RedeemLogin", req, cnpb.RedeemLoginResponse)

    async def check_session(self, session: str) -> cnpb.ConsoleVerdict.ValueType:
        req = cnpb.CheckSessionRequest(session=session)
        resp: cnpb.CheckSessionResponse = await self._unary(
            _CONSOLE + "CheckSession", req, cnpb.CheckSessionResponse
        )
        return resp.verdict

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

    async def list_sessions(
        self, limit: int, include_archived: bool = False
    ) -> tpb.ListSessionsResponse:
        req = tpb.ListSessionsRequest(limit=limit, include_archived=include_archived)
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

    async def decide_approval(self, approval_id: str, allow: bool) -> int:
        decision = tlpb.APPROVAL_DECISION_ALLOW if allow else tlpb.APPROVAL_DECISION_DENY
        req = tlpb.DecideApprovalRequest(id=approval_id, decision=decision)
        resp: tlpb.DecideApprovalResponse = await self._unary(
            _APPROVAL + "Decide", req, tlpb.DecideApprovalResponse
        )
        return resp.seq

    async def entries(self, before_seq: int, limit: int) -> cpb.HistoryResponse:
        req = cpb.HistoryRequest(limit=limit, before_seq=before_seq)
        return await self._unary(_KERNEL + "History", req, cpb.HistoryResponse)

    async def list_settings(self) -> cpb.ListSettingsResponse:
        req = cpb.ListSettingsRequest()
        return await self._unary(_KERNEL + "ListSettings", req, cpb.ListSettingsResponse)

    async def list_trust(self) -> cpb.ListTrustResponse:
        req = cpb.ListTrustRequest()
        return await self._unary(_KERNEL + "ListTrust", req, cpb.ListTrustResponse)

    async def list_plugins(self) -> spb.ListPluginsResponse:
        req = spb.ListPluginsRequest()
        return await self._unary(_PLUGIN + "List", req, spb.ListPluginsResponse)

    async def ledger_history(self, limit: int, before_seq: int | None) -> cpb.HistoryResponse:
        req = cpb.HistoryRequest(limit=limit)
        if before_seq is not None:
            req.before_seq = before_seq
        return await self._unary(_KERNEL + "History", req, cpb.HistoryResponse)

    async def records(self, from_seq: int, limit: int) -> list[lpb.Record]:
        req = lpb.GetRecordsRequest(from_seq=from_seq, limit=limit)
        resp: lpb.GetRecordsResponse = await self._unary(
            _LEDGER + "GetRecords", req, lpb.GetRecordsResponse
        )
        return list(resp.records)

    async def admin(self, method: str, request: Message, response: type[M]) -> M:
        answer: M = await self._unary(_ADMIN + method, request, response)
        return answer

    async def tool_risks(self) -> dict[str, int]:
        resp = await self.list_plugins()
        # ToolRisk numbers are the level plus one (0 stays "unspecified",
        # which counts as the worst).
        return {t.name: (t.risk - 1 if t.risk else 4) for p in resp.plugins for t in p.tools}


#: Errors after which asking again cannot help.
_FINAL = (PermissionDenied, Unauthenticated, NotFound, Unimplemented)


def _stopped(method: str) -> CoreCallFailed:
    """A call cut because the gateway's asyncio thread is stopping."""
    name = method.rsplit("/", 1)[-1]
    return CoreCallFailed(f"{name}: the gateway is stopping", "CANCELLED", unavailable=True)


def _translate(exc: SdkError, method: str) -> CoreCallFailed:
    """The SDK's error as the gateway's (the SDK read the status, once)."""
    name = method.rsplit("/", 1)[-1]
    return CoreCallFailed(
        f"{name}: {exc.detail or exc.code}",
        exc.code,
        refusal=exc.refusal,
        unavailable=isinstance(exc, CoreUnavailable),
        final=isinstance(exc, _FINAL),
    )


__all__ = ["CorePort", "GrpcCore", "OnEvent", "OnLedgerEvent"]
