"""Requests, and the pure semantics of caveats on them.

The caveats themselves (their values' rules and wire encoding) are the
contract's, :mod:`naga.tokens`, because holders build them to narrow their
tokens offline; this module is the core's reading of them. A token grants a
:class:`Request` iff every caveat admits it. Caveats of one kind intersect,
so each kind folds to its tightest value (:class:`Scope`): the earliest
expiry, the intersection of tool allowlists, the lowest risk and trust
ceilings, the smallest budget. Roles and sessions are equalities: every role
caveat must name the caller's role, so two different ones admit nothing.
With no caveat of a kind, that dimension is unrestricted (the identity of the
fold), which is why adding a caveat can only narrow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from naga.tokens import (
    MAX_INT64,
    BudgetCeiling,
    Caveat,
    ExpiresAt,
    InvalidCaveat,
    Risk,
    RiskCeiling,
    RoleIs,
    SessionIs,
    ToolsAllowed,
    TrustCeiling,
    check_budget,
    check_role,
    check_session,
    check_tool,
)
from naga_core.authz._errors import InvalidRequest, RejectReason
from naga_core.kernel import TrustLevel

# --- requests and the fold ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One call to check: who calls (process role), for which session, which
    tool (None: no tool call), at what risk, spending how much, and when."""

    role: str
    session: str | None
    tool: str | None
    risk: Risk
    budget: int
    now_ns: int

    def __post_init__(self) -> None:
        try:
            check_role(self.role)
            if self.session is not None:
                check_session(self.session)
            if self.tool is not None:
                check_tool(self.tool)
            check_budget(self.budget, "amount to spend")
        except InvalidCaveat as exc:
            raise InvalidRequest(f"bad request: {exc}") from None
        if type(self.now_ns) is not int or not 0 <= self.now_ns <= MAX_INT64:  # not a bool
            raise InvalidRequest(f"bad request: time {self.now_ns!r} is not ns in 0..2^63-1")
        if not isinstance(self.risk, Risk):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidRequest(f"bad request: risk {self.risk!r} is not a Risk")


@dataclass(frozen=True, slots=True)
class Scope:
    """What a list of caveats allows, each kind folded to its tightest value."""

    expires_at_ns: int | None = None
    roles: frozenset[str] = frozenset()
    sessions: frozenset[str] = frozenset()
    tools: frozenset[str] | None = None
    risk: Risk = Risk.R4
    trust: TrustLevel = TrustLevel.OWNER
    budget: int | None = None

    @classmethod
    def of(cls, caveats: Iterable[Caveat]) -> Scope:
        # A plain loop over locals: this runs on every call the core checks.
        expires: int | None = None
        roles: set[str] = set()
        sessions: set[str] = set()
        tools: frozenset[str] | None = None
        risk, trust, budget = Risk.R4, TrustLevel.OWNER, None
        for caveat in caveats:
            match caveat:
                case ExpiresAt(ns):
                    expires = ns if expires is None else min(expires, ns)
                case RoleIs(role):
                    roles.add(role)
                case SessionIs(session):
                    sessions.add(session)
                case ToolsAllowed(names):
                    tools = frozenset(names) if tools is None else tools.intersection(names)
                case RiskCeiling(level):
                    risk = min(risk, level)
                case TrustCeiling(level):
                    trust = min(trust, TrustLevel(level))
                case BudgetCeiling(amount):
                    budget = amount if budget is None else min(budget, amount)
        return cls(expires, frozenset(roles), frozenset(sessions), tools, risk, trust, budget)

    def refusal(self, request: Request) -> tuple[RejectReason, str] | None:
        """The first reason the scope does not admit ``request`` (budget
        aside: that needs what was spent), or None."""
        if self.expires_at_ns is not None and request.now_ns >= self.expires_at_ns:
            return RejectReason.EXPIRED, (
                f"expired at {self.expires_at_ns} ns, {request.now_ns - self.expires_at_ns} ns ago"
            )
        if self.roles - {request.role}:
            return RejectReason.WRONG_ROLE, (
                f"for role {_one(self.roles)}, presented by a {request.role!r} process"
            )
        if self.sessions and (request.session is None or self.sessions - {request.session}):
            return RejectReason.WRONG_SESSION, (
                f"for session {_one(self.sessions)}, used for session {request.session!r}"
            )
        if request.tool is not None and self.tools is not None and request.tool not in self.tools:
            return RejectReason.TOOL_NOT_ALLOWED, (
                f"tool {request.tool!r} is not in the allowlist {sorted(self.tools)!r}"
            )
        if request.risk > self.risk:
            return RejectReason.RISK_TOO_HIGH, (
                f"risk {request.risk.name} is above the ceiling {self.risk.name}"
            )
        return None


def _one(names: frozenset[str]) -> str:
    if len(names) == 1:
        return repr(next(iter(names)))
    return " and ".join(repr(n) for n in sorted(names)) + " at once (no caller can be both)"


__all__ = ["Request", "Scope"]
