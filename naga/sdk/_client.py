"""The typed client of naga-core (docs/sdk.md)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from naga.constants import RPC_DEADLINE_S
from naga.sdk import errors
from naga.sdk._address import CoreAddress, read_credential
from naga.sdk._transport import StreamCall, Transport, unavailable
from naga.tokens import CAPABILITY_SCHEME, Risk, Token, TokenError, TrustLevel
from naga.v1 import agent_pb2 as agpb
from naga.v1 import authz_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import turn_pb2 as tpb
from naga.values import Scalar, to_value

R = TypeVar("R", bound=Message)

_KERNEL = "/naga.v1.KernelService/"
_LEDGER = "/naga.v1.LedgerService/"
_SUPERVISOR = "/naga.v1.SupervisorService/"
_AUTHZ = "/naga.v1.AuthzService/"
_PLUGIN = "/naga.v1.PluginService/"
_TURN = "/naga.v1.TurnService/"
_MODEL = "/naga.v1.ModelService/"
_TOOL = "/naga.v1.ToolService/"
# What a plugin call's gRPC deadline adds to the call's own timeout, so the
# core's clear answer (hung, timed out) arrives before grpcio's bare one.
_INVOKE_SLACK_S = 2.0
# A read that met UNAVAILABLE is retried this many times on a fresh channel
# (the core may have restarted under it); writes never are: they may have
# been applied before the connection broke.
_READ_ATTEMPTS = 3

_TRUST_LEVELS = {
    "untrusted": cpb.TRUST_LEVEL_UNTRUSTED,
    "guest": cpb.TRUST_LEVEL_GUEST,
    "known": cpb.TRUST_LEVEL_KNOWN,
    "owner": cpb.TRUST_LEVEL_OWNER,
}


@dataclass(frozen=True, slots=True)
class Issued:
    """A token the core minted or spawned: hand ``token`` to the process it
    is for; ``grant`` is what it grants now."""

    token: Token
    grant: apb.TokenGrant


class Client:
    """A connection to one naga-core. Build with :meth:`connect`.

    Every method is one RPC with a deadline (``timeout``, default
    ``RPC_DEADLINE_S``) and raises only :class:`naga.sdk.errors.SdkError`
    subclasses. After UNAVAILABLE the client reconnects on the next call
    (re-reading the owner credential file, which a restarted core rewrote);
    reads are retried on a fresh connection, writes are not. Safe to share
    between threads.
    """

    def __init__(self, transport: Transport, timeout: float) -> None:
        self._t = transport
        self._timeout = timeout

    @classmethod
    def connect(
        cls,
        target: str | os.PathLike[str] | None = None,
        credential: bytes | Token | None = None,
        *,
        timeout: float = RPC_DEADLINE_S,
    ) -> Client:
        """Connect to the core of a home directory (default ``$NAGA_HOME``,
        else ``~/.naga``) or at a socket path.

        ``credential`` is the owner credential's bytes or a capability
        token (a :class:`naga.tokens.Token`, e.g. one narrowed offline with
        ``attenuate``); by default the owner credential in the run directory
        beside the socket, read again at every reconnect. Raises
        :class:`~naga.sdk.errors.CoreUnavailable` (with how to start the
        core) when no core listens there.
        """
        address = CoreAddress.resolve(target)
        if not address.socket_exists():
            raise unavailable(address, "no socket")
        if credential is None:
            path = address.credential_file
            transport = Transport(address, lambda: _owner_value(read_credential(path)))
        elif isinstance(credential, Token):
            value = f"{CAPABILITY_SCHEME} {_b64(credential.to_bytes())}"
            transport = Transport(address, lambda: value)
        else:
            value = _owner_value(bytes(credential))
            transport = Transport(address, lambda: value)
        return cls(transport, timeout)

    @property
    def socket(self) -> str:
        return self._t.address.socket

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------

    def _call(
        self,
        method: str,
        request: Message,
        response: type[R],
        *,
        read: bool,
        timeout: float | None,
    ) -> R:
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
        try:
            return response.FromString(answer)
        except DecodeError as exc:
            raise errors.CoreFailure(f"{method}: undecodable response: {exc}") from None

    # --- ledger -------------------------------------------------------------------

    def head(self, *, timeout: float | None = None) -> lpb.Head:
        """The ledger's size and root, with a checkpoint signed for them."""
        return self._call(
            _LEDGER + "GetHead", lpb.GetHeadRequest(), lpb.Head, read=True, timeout=timeout
        )

    def records(
        self, from_seq: int = 0, limit: int = 0, *, timeout: float | None = None
    ) -> list[lpb.Record]:
        """A page of records from ``from_seq`` (empty past the end); page on
        from the last seq + 1."""
        req = lpb.GetRecordsRequest(from_seq=from_seq, limit=limit)
        resp = self._call(
            _LEDGER + "GetRecords", req, lpb.GetRecordsResponse, read=True, timeout=timeout
        )
        return list(resp.records)

    def prove_inclusion(self, seq: int, *, timeout: float | None = None) -> lpb.InclusionProof:
        req = lpb.ProveInclusionRequest(seq=seq)
        return self._call(
            _LEDGER + "ProveInclusion", req, lpb.InclusionProof, read=True, timeout=timeout
        )

    def prove_consistency(
        self, old_size: int, new_size: int, *, timeout: float | None = None
    ) -> lpb.ConsistencyProof:
        req = lpb.ProveConsistencyRequest(old_size=old_size, new_size=new_size)
        return self._call(
            _LEDGER + "ProveConsistency", req, lpb.ConsistencyProof, read=True, timeout=timeout
        )

    def subscribe(
        self, from_seq: int = 0, kinds: Iterable[str] = (), *, timeout: float | None = None
    ) -> Subscription:
        """Records from ``from_seq`` on, then new ones as they are appended,
        of the given kinds only (all when empty). Iterate it; ``cancel()``
        ends it from another thread."""
        req = lpb.SubscribeRequest(from_seq=from_seq, kinds=list(kinds))
        return Subscription(self._t.stream(_LEDGER + "Subscribe", req.SerializeToString(), timeout))

    # --- kernel -------------------------------------------------------------------

    def history(
        self, limit: int = 0, before_seq: int | None = None, *, timeout: float | None = None
    ) -> cpb.HistoryResponse:
        """Recent entries, newest first (``limit`` 0: the core's default of 50)."""
        req = cpb.HistoryRequest(limit=limit)
        if before_seq is not None:
            req.before_seq = before_seq
        return self._call(_KERNEL + "History", req, cpb.HistoryResponse, read=True, timeout=timeout)

    def rollback(
        self,
        to_seq: int,
        *,
        dry_run: bool = False,
        by_owner: bool = False,
        timeout: float | None = None,
    ) -> cpb.RollbackResponse:
        """Keep entry ``to_seq`` and undo every later effect (-1: all), or
        with ``dry_run`` only preview it. ``by_owner`` asserts the owner's
        authority, which a rollback that raises a privilege needs."""
        req = cpb.RollbackRequest(to_seq=to_seq, dry_run=dry_run, by_owner=by_owner)
        return self._call(
            _KERNEL + "Rollback", req, cpb.RollbackResponse, read=dry_run, timeout=timeout
        )

    def get_setting(self, name: str, *, timeout: float | None = None) -> cpb.Setting:
        req = cpb.GetSettingRequest(name=name)
        return self._call(_KERNEL + "GetSetting", req, cpb.Setting, read=True, timeout=timeout)

    def list_settings(self, *, timeout: float | None = None) -> list[cpb.Setting]:
        resp = self._call(
            _KERNEL + "ListSettings",
            cpb.ListSettingsRequest(),
            cpb.ListSettingsResponse,
            read=True,
            timeout=timeout,
        )
        return list(resp.settings)

    def set_setting(
        self, name: str, value: Scalar, *, timeout: float | None = None
    ) -> cpb.SetSettingResponse:
        """Set a typed value (it must be of the setting's kind)."""
        req = cpb.SetSettingRequest(name=name, value=to_value(value))
        return self._set(req, timeout)

    def set_setting_text(
        self, name: str, text: str, *, timeout: float | None = None
    ) -> cpb.SetSettingResponse:
        """Set from text, parsed by the setting's kind (as ``naga config set``)."""
        return self._set(cpb.SetSettingRequest(name=name, text=text), timeout)

    def reset_setting(self, name: str, *, timeout: float | None = None) -> cpb.SetSettingResponse:
        """Remove the registered value; the default applies again."""
        return self._set(cpb.SetSettingRequest(name=name, reset=True), timeout)

    def _set(self, req: cpb.SetSettingRequest, timeout: float | None) -> cpb.SetSettingResponse:
        return self._call(
            _KERNEL + "SetSetting", req, cpb.SetSettingResponse, read=False, timeout=timeout
        )

    def get_trust(self, peer: str, *, timeout: float | None = None) -> cpb.TrustEntry:
        req = cpb.GetTrustRequest(peer=peer)
        return self._call(_KERNEL + "GetTrust", req, cpb.TrustEntry, read=True, timeout=timeout)

    def set_trust(
        self,
        peer: str,
        level: str | cpb.TrustLevel.ValueType,
        *,
        by_owner: bool = False,
        reason: str = "",
        timeout: float | None = None,
    ) -> cpb.SetTrustResponse:
        """Set a peer's level (a label such as ``"known"``, or the enum).
        Raising needs ``by_owner`` (INV-6)."""
        req = cpb.SetTrustRequest(
            peer=peer, level=_trust_level(level), by_owner=by_owner, reason=reason
        )
        return self._call(
            _KERNEL + "SetTrust", req, cpb.SetTrustResponse, read=False, timeout=timeout
        )

    def list_trust(self, *, timeout: float | None = None) -> list[cpb.TrustEntry]:
        resp = self._call(
            _KERNEL + "ListTrust",
            cpb.ListTrustRequest(),
            cpb.ListTrustResponse,
            read=True,
            timeout=timeout,
        )
        return list(resp.entries)

    # --- supervisor ---------------------------------------------------------------

    def status(self, *, timeout: float | None = None) -> cpb.StatusResponse:
        """The processes the core supervises (the core first)."""
        return self._call(
            _SUPERVISOR + "Status",
            cpb.StatusRequest(),
            cpb.StatusResponse,
            read=True,
            timeout=timeout,
        )

    def shutdown(self, reason: str = "", *, timeout: float | None = None) -> None:
        """Ask the core to stop gracefully (returns once it accepted)."""
        try:
            self._call(
                _SUPERVISOR + "Shutdown",
                cpb.ShutdownRequest(reason=reason),
                cpb.ShutdownResponse,
                read=False,
                timeout=timeout,
            )
        except errors.CoreUnavailable as exc:
            # The core may cancel this very call as it stops (it began to
            # stop because of it): that is the answer asked for.
            if exc.code != "CANCELLED":
                raise

    # --- capability tokens ----------------------------------------------------------

    def mint(
        self,
        role: str,
        *,
        trust: TrustLevel | str,
        risk: Risk,
        session: str | None = None,
        principal: str | None = None,
        tools: Iterable[str] | None = None,
        budget: int | None = None,
        ttl_ns: int | None = None,
        timeout: float | None = None,
    ) -> Issued:
        """Mint a root token for a process of ``role`` (owner only). Trust and
        risk ceilings are required; without ``tools`` any tool, without
        ``budget`` unlimited, without ``ttl_ns`` until revoked."""
        req = apb.MintRequest(
            role=role,
            trust=_trust_level(trust),
            risk=_risk_level(risk),
            principal=principal or "",
        )
        if session is not None:
            req.session = session
        if tools is not None:
            req.tools.names.extend(tools)
        if budget is not None:
            req.budget = budget
        if ttl_ns is not None:
            req.ttl_ns = ttl_ns
        resp = self._call(_AUTHZ + "Mint", req, apb.MintResponse, read=False, timeout=timeout)
        return _issued("Mint", resp.token, resp.grant)

    def spawn(
        self,
        budget: int,
        *,
        tools: Iterable[str] | None = None,
        risk: Risk | None = None,
        trust: TrustLevel | str | None = None,
        session: str | None = None,
        ttl_ns: int | None = None,
        timeout: float | None = None,
    ) -> Issued:
        """A sub-task's token under the one this client presents, strictly
        narrower (INV-3); unset arguments inherit. A widening is refused
        (:class:`~naga.sdk.errors.TokenDenied`, reason WIDENING)."""
        req = apb.SpawnRequest(budget=budget)
        if tools is not None:
            req.tools.names.extend(tools)
        if risk is not None:
            req.risk = _risk_level(risk)
        if trust is not None:
            req.trust = _trust_level(trust)
        if session is not None:
            req.session = session
        if ttl_ns is not None:
            req.ttl_ns = ttl_ns
        resp = self._call(_AUTHZ + "Spawn", req, apb.SpawnResponse, read=False, timeout=timeout)
        return _issued("Spawn", resp.token, resp.grant)

    def revoke(
        self, token: Token | bytes, reason: str, *, timeout: float | None = None
    ) -> int | None:
        """Revoke a token (or its 16-byte id), its attenuations and its
        sub-tasks' tokens (owner only). Returns the ledger seq, None if it
        already was revoked."""
        token_id = token.id if isinstance(token, Token) else bytes(token)
        req = apb.RevokeRequest(token_id=token_id, reason=reason)
        resp = self._call(_AUTHZ + "Revoke", req, apb.RevokeResponse, read=False, timeout=timeout)
        return resp.seq if resp.HasField("seq") else None

    def spend(
        self,
        amount: int,
        *,
        session: str | None = None,
        tool: str | None = None,
        what: str = "",
        timeout: float | None = None,
    ) -> apb.SpendResponse:
        """Debit this client's token (and its ancestors) through the ledger;
        :class:`~naga.sdk.errors.BudgetExhausted` and nothing debited if any
        budget would be overspent."""
        req = apb.SpendRequest(amount=amount, what=what)
        if session is not None:
            req.session = session
        if tool is not None:
            req.tool = tool
        return self._call(_AUTHZ + "Spend", req, apb.SpendResponse, read=False, timeout=timeout)

    def inspect(
        self, token: Token | None = None, *, timeout: float | None = None
    ) -> apb.InspectResponse:
        """What ``token`` (default: the one this client presents) grants now,
        or why it grants nothing."""
        req = apb.InspectRequest(token=b"" if token is None else token.to_bytes())
        return self._call(_AUTHZ + "Inspect", req, apb.InspectResponse, read=True, timeout=timeout)

    # --- plugins ------------------------------------------------------------------

    def plugins(self, *, timeout: float | None = None) -> list[spb.PluginInfo]:
        """Every installed plugin, enabled or not, by name."""
        resp = self._call(
            _PLUGIN + "List",
            spb.ListPluginsRequest(),
            spb.ListPluginsResponse,
            read=True,
            timeout=timeout,
        )
        return list(resp.plugins)

    def enable_plugin(
        self, name: str, *, wait: float = 10.0, timeout: float | None = None
    ) -> spb.EnablePluginResponse:
        """Enable ``name`` (retry it, if it failed); wait up to ``wait``
        seconds for its worker to run. The answer's state says how far it got."""
        req = spb.EnablePluginRequest(name=name, wait_ms=round(wait * 1000))
        return self._call(
            _PLUGIN + "Enable",
            req,
            spb.EnablePluginResponse,
            read=False,
            timeout=timeout or wait + self._timeout,
        )

    def disable_plugin(
        self, name: str, *, timeout: float | None = None
    ) -> spb.DisablePluginResponse:
        """Disable ``name``: its worker stops; nothing else restarts."""
        req = spb.DisablePluginRequest(name=name)
        return self._call(
            _PLUGIN + "Disable", req, spb.DisablePluginResponse, read=False, timeout=timeout
        )

    def replace_plugin(
        self, name: str, version: str, *, wait: float = 10.0, timeout: float | None = None
    ) -> spb.ReplacePluginResponse:
        """Run installed ``version`` of ``name`` from now on."""
        req = spb.ReplacePluginRequest(name=name, version=version, wait_ms=round(wait * 1000))
        return self._call(
            _PLUGIN + "Replace",
            req,
            spb.ReplacePluginResponse,
            read=False,
            timeout=timeout or wait + self._timeout,
        )

    def invoke(
        self,
        plugin: str,
        tool: str,
        arguments: object = None,
        *,
        timeout: float | None = None,
    ) -> object:
        """Call ``tool`` of ``plugin`` with ``arguments`` (a JSON-able
        mapping, or JSON text); the tool's result, decoded. ``timeout`` (the
        client's default if None) bounds this call; the plugin's own call
        timeout bounds how long its worker may take before it counts as hung."""
        return json.loads(self.invoke_raw(plugin, tool, arguments, timeout=timeout).result_json)

    def invoke_raw(
        self,
        plugin: str,
        tool: str,
        arguments: object = None,
        *,
        timeout: float | None = None,
    ) -> spb.InvokeToolResponse:
        """As :meth:`invoke`, returning the response (result JSON text, pid)."""
        if arguments is None:
            text = ""
        elif isinstance(arguments, str):
            text = arguments
        else:
            try:
                text = json.dumps(arguments, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise errors.InvalidArgument(f"arguments are not JSON-able: {exc}") from None
        wait = self._timeout if timeout is None else timeout
        req = spb.InvokeToolRequest(
            plugin=plugin, tool=tool, arguments_json=text, timeout_ms=max(1, round(wait * 1000))
        )
        return self._call(
            _PLUGIN + "Invoke",
            req,
            spb.InvokeToolResponse,
            read=False,
            timeout=wait + _INVOKE_SLACK_S,
        )

    # --- turns (the owner's CLI, the gateway) --------------------------------------

    def run_turn(
        self,
        session: str,
        text: str,
        idempotency_key: str,
        *,
        peer: str = "",
        timeout: float | None = None,
    ) -> TurnEvents:
        """Run one turn; iterate the result for its events (``accepted``
        first, ``final`` or ``error`` last). ``timeout`` bounds the whole
        stream (None: no bound)."""
        req = tpb.RunTurnRequest(
            session=session, text=text, idempotency_key=idempotency_key, peer=peer
        )
        return TurnEvents(self._t.stream(_TURN + "Run", req.SerializeToString(), timeout))

    def abort_turn(self, session: str, *, timeout: float | None = None) -> str:
        """Stop the session's running turn; its id."""
        req = tpb.AbortTurnRequest(session=session)
        return self._call(
            _TURN + "Abort", req, tpb.AbortTurnResponse, read=False, timeout=timeout
        ).turn_id

    def sessions(self, limit: int = 0, *, timeout: float | None = None) -> list[tpb.SessionSummary]:
        """The sessions, most recent first (``limit`` 0: the core's default)."""
        req = tpb.ListSessionsRequest(limit=limit)
        answer = self._call(
            _TURN + "ListSessions", req, tpb.ListSessionsResponse, read=True, timeout=timeout
        )
        return list(answer.sessions)

    def session_history(
        self, session: str, limit: int = 0, *, timeout: float | None = None
    ) -> list[tpb.SessionEntry]:
        """One session's messages and replies, oldest first."""
        req = tpb.SessionHistoryRequest(session=session, limit=limit)
        answer = self._call(
            _TURN + "History", req, tpb.SessionHistoryResponse, read=True, timeout=timeout
        )
        return list(answer.entries)

    # --- the agent executor's calls ------------------------------------------------

    def complete(
        self, request: agpb.ModelCallRequest, *, timeout: float | None = None
    ) -> agpb.ModelCallResponse:
        """One model call through the core (an executor's token)."""
        return self._call(
            _MODEL + "Complete", request, agpb.ModelCallResponse, read=False, timeout=timeout
        )

    def call_tool(
        self, request: agpb.ToolCallRequest, *, timeout: float | None = None
    ) -> agpb.ToolCallResponse:
        """One tool call through the core (an executor's token)."""
        return self._call(
            _TOOL + "Call", request, agpb.ToolCallResponse, read=False, timeout=timeout
        )


class TurnEvents:
    """An open Run stream: iterate for :class:`naga.v1.turn_pb2.TurnEvent`s."""

    def __init__(self, call: StreamCall) -> None:
        self._call = call

    def cancel(self) -> None:
        """End the stream (the turn goes on in the core)."""
        self._call.cancel()

    def __iter__(self) -> Iterator[tpb.TurnEvent]:
        for raw in self._call:
            try:
                yield tpb.TurnEvent.FromString(raw)
            except DecodeError as exc:
                raise errors.CoreFailure(f"Run: undecodable event: {exc}") from None


class Subscription:
    """An open Subscribe stream: iterate for :class:`SubscribeEvent`s."""

    def __init__(self, call: StreamCall) -> None:
        self._call = call

    def cancel(self) -> None:
        """End the stream; iteration stops without an error."""
        self._call.cancel()

    def __iter__(self) -> Iterator[lpb.SubscribeEvent]:
        for raw in self._call:
            try:
                yield lpb.SubscribeEvent.FromString(raw)
            except DecodeError as exc:
                raise errors.CoreFailure(f"Subscribe: undecodable event: {exc}") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _owner_value(secret: bytes) -> str:
    return "Naga " + _b64(secret)


def _issued(method: str, raw: bytes, grant: apb.TokenGrant) -> Issued:
    try:
        return Issued(Token.from_bytes(raw), grant)
    except TokenError as exc:
        raise errors.CoreFailure(
            f"{method}: the core answered with no usable token: {exc}"
        ) from None


def _risk_level(risk: Risk) -> apb.RiskLevel.ValueType:
    if not isinstance(risk, Risk):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise errors.InvalidArgument(f"{risk!r} is not a Risk (naga.tokens.Risk.R0 .. R4)")
    return apb.RiskLevel.ValueType(int(risk) + apb.RISK_LEVEL_R0)


def _trust_level(
    level: str | TrustLevel | cpb.TrustLevel.ValueType,
) -> cpb.TrustLevel.ValueType:
    if isinstance(level, TrustLevel):
        return cpb.TrustLevel.ValueType(int(level) + cpb.TRUST_LEVEL_UNTRUSTED)
    if isinstance(level, str):
        found = _TRUST_LEVELS.get(level)
        if found is None:
            labels = ", ".join(_TRUST_LEVELS)
            raise errors.InvalidArgument(f"{level!r} is not a trust level (one of: {labels})")
        return found
    return level


__all__ = ["Client", "Issued", "Subscription", "TurnEvents"]
