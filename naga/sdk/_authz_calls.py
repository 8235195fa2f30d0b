"""The client's calls of the AuthzService: capability tokens and budgets."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from naga.sdk import errors
from naga.sdk._kernel_calls import trust_level
from naga.sdk._rpc import Rpc
from naga.tokens import Risk, Token, TokenError, TrustLevel
from naga.v1 import authz_pb2 as zpb

_AUTHZ = "/naga.v1.AuthzService/"


@dataclass(frozen=True, slots=True)
class Issued:
    """A token the core minted or spawned: hand ``token`` to the process it
    is for; ``grant`` is what it grants now."""

    token: Token
    grant: zpb.TokenGrant


def _issued(method: str, raw: bytes, grant: zpb.TokenGrant) -> Issued:
    try:
        return Issued(Token.from_bytes(raw), grant)
    except TokenError as exc:
        raise errors.CoreFailure(
            f"{method}: the core answered with no usable token: {exc}"
        ) from None


def _risk_level(risk: Risk) -> zpb.RiskLevel.ValueType:
    if not isinstance(risk, Risk):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise errors.InvalidArgument(f"{risk!r} is not a Risk (naga.tokens.Risk.R0 .. R4)")
    return zpb.RiskLevel.ValueType(int(risk) + zpb.RISK_LEVEL_R0)


def _narrow(
    req: zpb.MintRequest | zpb.SpawnRequest,
    tools: Iterable[str] | None,
    session: str | None,
    ttl_ns: int | None,
) -> None:
    """The limits a minted and a spawned token share; None leaves one unset
    (for a spawn: inherited)."""
    if tools is not None:
        req.tools.names.extend(tools)
    if session is not None:
        req.session = session
    if ttl_ns is not None:
        req.ttl_ns = ttl_ns


class AuthzCalls(Rpc):
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
        req = zpb.MintRequest(
            role=role,
            trust=trust_level(trust),
            risk=_risk_level(risk),
            principal=principal or "",
        )
        if budget is not None:
            req.budget = budget
        _narrow(req, tools, session, ttl_ns)
        resp = self._write(_AUTHZ + "Mint", req, zpb.MintResponse, timeout)
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
        req = zpb.SpawnRequest(budget=budget)
        if risk is not None:
            req.risk = _risk_level(risk)
        if trust is not None:
            req.trust = trust_level(trust)
        _narrow(req, tools, session, ttl_ns)
        resp = self._write(_AUTHZ + "Spawn", req, zpb.SpawnResponse, timeout)
        return _issued("Spawn", resp.token, resp.grant)

    def revoke(
        self, token: Token | bytes, reason: str, *, timeout: float | None = None
    ) -> int | None:
        """Revoke a token (or its 16-byte id), its attenuations and its
        sub-tasks' tokens (owner only). Returns the ledger seq, None if it
        already was revoked."""
        token_id = token.id if isinstance(token, Token) else bytes(token)
        req = zpb.RevokeRequest(token_id=token_id, reason=reason)
        resp = self._write(_AUTHZ + "Revoke", req, zpb.RevokeResponse, timeout)
        return resp.seq if resp.HasField("seq") else None

    def spend(
        self,
        amount: int,
        *,
        session: str | None = None,
        tool: str | None = None,
        what: str = "",
        timeout: float | None = None,
    ) -> zpb.SpendResponse:
        """Debit this client's token (and its ancestors) through the ledger;
        :class:`~naga.sdk.errors.BudgetExhausted` and nothing debited if any
        budget would be overspent."""
        req = zpb.SpendRequest(amount=amount, what=what)
        if session is not None:
            req.session = session
        if tool is not None:
            req.tool = tool
        return self._write(_AUTHZ + "Spend", req, zpb.SpendResponse, timeout)

    def inspect(
        self, token: Token | None = None, *, timeout: float | None = None
    ) -> zpb.InspectResponse:
        """What ``token`` (default: the one this client presents) grants now,
        or why it grants nothing."""
        req = zpb.InspectRequest(token=b"" if token is None else token.to_bytes())
        return self._read(_AUTHZ + "Inspect", req, zpb.InspectResponse, timeout)


__all__ = ["AuthzCalls", "Issued"]
