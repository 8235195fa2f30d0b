"""``naga.v1.AuthzService``: minting, narrowing, revoking, spending and
inspecting capability tokens.

Who may call each RPC is the policy table's (naga_core.daemon._policy); by
the time a handler runs, a token holder's principal carries the grant the
authorizer settled on this same loop turn, so a debit or a spawn is checked
against exactly what the holder has now. Every token minted or spawned here
is a ``token.minted`` record (never the token itself), durable before the
token leaves; a revocation wakes the open streams so the revoked token's
end. ``check_*`` functions run on the server thread and look only at the
request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable

from naga import tokens
from naga.constants import TOKEN_ID_BYTES
from naga.tokens import MAX_INT64, Risk, Token, ToolsAllowed
from naga.v1 import authz_pb2 as zpb
from naga_core.authz import (
    BudgetAccount,
    Grant,
    RevocationList,
    TokenAuthority,
    TokenRejected,
    stage_minted,
)
from naga_core.daemon import _checks, _convert
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._credentials import CoreAuthorizer, own_role, own_session
from naga_core.daemon._errors import RequestRefused
from naga_core.daemon._policy import ROLES
from naga_core.kernel import TrustLevel

SERVICE = "naga.v1.AuthzService"
MAX_REASON_CHARS = 500


class AuthzServicer:
    def __init__(self, core: Core, authorizer: CoreAuthorizer) -> None:
        self._core = core
        self._authorizer = authorizer
        self._authority: TokenAuthority = authorizer.authority

    def methods(self) -> list[Method]:
        return [
            Unary("Mint", zpb.MintRequest, self.mint, check_mint),
            Unary("Spawn", zpb.SpawnRequest, self.spawn, check_spawn),
            Unary("Revoke", zpb.RevokeRequest, self.revoke, check_revoke),
            Unary("Spend", zpb.SpendRequest, self.spend, check_spend),
            Unary("Inspect", zpb.InspectRequest, self.inspect),
        ]

    def mint(self, p: Principal, req: zpb.MintRequest) -> zpb.MintResponse:
        with _caveat_errors():
            token = self._authority.mint(
                req.role,
                trust=_convert.trust_level_from("trust", req.trust),
                risk=risk_from("risk", req.risk),
                session=req.session if req.HasField("session") else None,
                principal=req.principal or None,
                tools=list(req.tools.names) if req.HasField("tools") else None,
                budget=req.budget if req.HasField("budget") else None,
                ttl_ns=req.ttl_ns if req.HasField("ttl_ns") else None,
            )
        grant = self._settle(token)
        self._record(token, by=p.name)
        return zpb.MintResponse(token=token.to_bytes(), grant=token_grant(grant))

    def spawn(self, p: Principal, req: zpb.SpawnRequest) -> zpb.SpawnResponse:
        parent = _grant_of(p)
        expires = None
        if req.HasField("ttl_ns"):
            expires = min(MAX_INT64, self._authority.now_ns() + req.ttl_ns)
        try:
            with _caveat_errors():
                child = self._authority.spawn(
                    parent,
                    budget=req.budget,
                    tools=list(req.tools.names) if req.HasField("tools") else None,
                    risk=_risk_or_none(req.risk),
                    trust=_trust_or_none(req.trust),
                    session=req.session if req.HasField("session") else None,
                    expires_at_ns=expires,
                )
        except TokenRejected as exc:
            self._authorizer.observe(exc)  # a widening is a violation (INV-6)
            raise
        grant = self._settle(child)
        self._record(child, by=p.name)
        return zpb.SpawnResponse(token=child.to_bytes(), grant=token_grant(grant))

    def revoke(self, p: Principal, req: zpb.RevokeRequest) -> zpb.RevokeResponse:
        revocations = RevocationList(self._core.kernel)
        reason = f"{req.reason} (by {p.name})"
        seq = self._authorizer.revoke(revocations, req.token_id, reason)
        response = zpb.RevokeResponse()
        if seq is not None:
            response.seq = seq
        return response

    def spend(self, p: Principal, req: zpb.SpendRequest) -> zpb.SpendResponse:
        grant = _grant_of(p)
        account = BudgetAccount(self._core.kernel)
        what = req.what or (f"tool {req.tool}" if req.HasField("tool") else "")
        seq = self._core.write(lambda: account.debit(grant, req.amount, what=what))
        response = zpb.SpendResponse(seq=seq or 0)
        remaining = self._authority.remaining(grant)
        if remaining is not None:
            response.remaining = remaining
        return response

    def inspect(self, p: Principal, req: zpb.InspectRequest) -> zpb.InspectResponse:
        if not req.token:
            if p.grant is None:
                raise RequestRefused.invalid(
                    "the owner credential is not a token: pass the token to inspect"
                )
            return zpb.InspectResponse(grant=token_grant(p.grant))
        try:
            grant = self._settle(self._authority.authenticate(req.token))
        except TokenRejected as exc:
            return zpb.InspectResponse(rejection=exc.reason.wire, detail=exc.detail)
        return zpb.InspectResponse(grant=token_grant(grant))

    def _record(self, token: Token, *, by: str) -> None:
        """The mint in the ledger (staged: durable before the response)."""
        self._core.write(lambda: stage_minted(self._core.ledger, token, by=by))

    def _settle(self, token: Token) -> Grant:
        """What ``token`` grants now, asked as its own role and session."""
        request = self._authority.request(own_role(token), session=own_session(token))
        return self._authority.settle(self._authority.check(token, request))


@contextlib.contextmanager
def _caveat_errors() -> Generator[None]:
    """Bad arguments found while building caveats are the caller's
    INVALID_ARGUMENT, not the core's failure."""
    try:
        yield
    except tokens.InvalidCaveat as exc:
        raise RequestRefused.invalid(str(exc)) from None


def _grant_of(p: Principal) -> Grant:
    if p.grant is None:  # the policy keeps the owner out; this is belt and braces
        raise RequestRefused.denied("this call acts on the caller's own token; it presented none")
    return p.grant


def _risk_or_none(level: int) -> Risk | None:
    if level == zpb.RISK_LEVEL_UNSPECIFIED:  # inherit
        return None
    return risk_from("risk", level)


def _trust_or_none(level: int) -> TrustLevel | None:
    if level == 0:  # TRUST_LEVEL_UNSPECIFIED: inherit
        return None
    return _convert.trust_level_from("trust", level)


# --- conversions ---------------------------------------------------------------------------


def risk_from(field: str, level: int) -> Risk:
    """A RiskLevel enum value (the risk + 1) as a Risk."""
    if not zpb.RISK_LEVEL_R0 <= level <= zpb.RISK_LEVEL_R4:
        names = ", ".join(zpb.RiskLevel.Name(risk_level(r)) for r in Risk)
        raise RequestRefused.invalid(f"{field} {level} is not a risk level (one of: {names})")
    return Risk(level - zpb.RISK_LEVEL_R0)


def risk_level(risk: Risk) -> zpb.RiskLevel.ValueType:
    return zpb.RiskLevel.ValueType(int(risk) + zpb.RISK_LEVEL_R0)


def token_grant(grant: Grant) -> zpb.TokenGrant:
    msg = zpb.TokenGrant(
        id=grant.token_id,
        role=grant.role,
        risk_ceiling=risk_level(grant.risk),
        trust=_convert.trust_level(grant.trust),
        principal=grant.principal or "",
        lineage=[a.id for a in grant.lineage],
    )
    if grant.session is not None:
        msg.session = grant.session
    if grant.tools is not None:
        msg.tools.names.extend(sorted(grant.tools))
    if grant.budget is not None:
        msg.budget_remaining = grant.budget
    if grant.budget_ceiling is not None:
        msg.budget_ceiling = grant.budget_ceiling
    if grant.expires_at_ns is not None:
        msg.expires_at_ns = grant.expires_at_ns
    return msg


# --- request checks (server thread) ------------------------------------------------------


def _check_caveat_args(
    *, session: str | None, tools: Iterable[str] | None, budget: int | None, ttl_ns: int | None
) -> None:
    with _caveat_errors():
        if session is not None:
            tokens.check_session(session)
        if tools is not None:
            ToolsAllowed.of(tools)
        if budget is not None:
            tokens.check_budget(budget, "budget")
    if ttl_ns is not None and not 0 < ttl_ns <= MAX_INT64:
        raise RequestRefused.invalid(f"ttl_ns {ttl_ns} must be in 1..2^63-1 nanoseconds")


def check_mint(req: zpb.MintRequest) -> None:
    if req.role not in ROLES:
        raise RequestRefused.invalid(
            f"role {_checks.shown(req.role)} is not a process role "
            f"(one of: {', '.join(sorted(ROLES))})"
        )
    if req.trust == 0:
        raise RequestRefused.invalid("trust is required (the token's trust ceiling)")
    _convert.trust_level_from("trust", req.trust)
    if req.risk == zpb.RISK_LEVEL_UNSPECIFIED:
        raise RequestRefused.invalid("risk is required (the token's risk ceiling)")
    risk_from("risk", req.risk)
    if req.principal:
        with _caveat_errors():
            tokens.check_peer(req.principal)
    _check_caveat_args(
        session=req.session if req.HasField("session") else None,
        tools=req.tools.names if req.HasField("tools") else None,
        budget=req.budget if req.HasField("budget") else None,
        ttl_ns=req.ttl_ns if req.HasField("ttl_ns") else None,
    )


def check_spawn(req: zpb.SpawnRequest) -> None:
    if req.risk != zpb.RISK_LEVEL_UNSPECIFIED:
        risk_from("risk", req.risk)
    if req.trust != 0:
        _convert.trust_level_from("trust", req.trust)
    _check_caveat_args(
        session=req.session if req.HasField("session") else None,
        tools=req.tools.names if req.HasField("tools") else None,
        budget=req.budget,
        ttl_ns=req.ttl_ns if req.HasField("ttl_ns") else None,
    )


def check_revoke(req: zpb.RevokeRequest) -> None:
    if len(req.token_id) != TOKEN_ID_BYTES:
        raise RequestRefused.invalid(
            f"token_id is {len(req.token_id)} bytes; a token id is {TOKEN_ID_BYTES}"
        )
    _checks.text("reason", req.reason, max_chars=MAX_REASON_CHARS)


def check_spend(req: zpb.SpendRequest) -> None:
    if not 0 < req.amount <= MAX_INT64:
        raise RequestRefused.invalid(f"amount {req.amount} must be in 1..2^63-1 budget units")
    _checks.text("what", req.what, max_chars=MAX_REASON_CHARS, required=False)


__all__ = ["SERVICE", "AuthzServicer", "risk_from", "risk_level", "token_grant"]
