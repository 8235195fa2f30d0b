"""Caveats, requests, and the pure semantics of the first ones on the second.

A token grants a :class:`Request` iff every caveat admits it. Caveats of one
kind intersect, so each kind folds to its tightest value (:class:`Scope`):
the earliest expiry, the intersection of tool allowlists, the lowest risk and
trust ceilings, the smallest budget. Roles and sessions are equalities: every
role caveat must name the caller's role, so two different ones admit nothing.
With no caveat of a kind, that dimension is unrestricted (the identity of the
fold), which is why adding a caveat can only narrow.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from naga.constants import TOKEN_MAX_TOOL_NAME_CHARS, TOKEN_MAX_TOOLS
from naga.v1 import authz_pb2 as pb
from naga_core.authz._errors import InvalidCaveat, InvalidRequest, RejectReason
from naga_core.kernel import TrustLevel

#: Budgets and times travel as 64-bit integers and are journaled as kernel
#: integers (signed 64-bit).
MAX_INT64 = (1 << 63) - 1
MAX_SESSION_CHARS = 128
MAX_PEER_CHARS = 200

_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_NAME = re.compile(r"\S+")
# The kernel trust table's peer id rule (naga_core.kernel._trust).
_PEER = re.compile(r"[a-z][a-z0-9_-]{0,31}:\S+")


class Risk(enum.IntEnum):
    """Tool risk levels, ordered: R0 (read-only) .. R4 (destructive)."""

    R0 = 0
    R1 = 1
    R2 = 2
    R3 = 3
    R4 = 4


def _is_int(value: object) -> bool:
    # bool is an int subclass; True is not a budget.
    return isinstance(value, int) and not isinstance(value, bool)


def check_role(role: str) -> str:
    if not isinstance(role, str) or not _ROLE.fullmatch(role):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidCaveat(
            f"role {role!r} is not a lowercase name of at most 32 characters ([a-z][a-z0-9_-]*)"
        )
    return role


def check_session(session: str) -> str:
    if (
        not isinstance(session, str)  # pyright: ignore[reportUnnecessaryIsInstance]
        or not 0 < len(session) <= MAX_SESSION_CHARS
        or not session.isprintable()
        or not _NAME.fullmatch(session)
    ):
        raise InvalidCaveat(
            f"session id {session!r} is not 1..{MAX_SESSION_CHARS} printable characters "
            "without whitespace"
        )
    return session


def check_tool(name: str) -> str:
    if (
        not isinstance(name, str)  # pyright: ignore[reportUnnecessaryIsInstance]
        or not 0 < len(name) <= TOKEN_MAX_TOOL_NAME_CHARS
        or not name.isprintable()
        or not _NAME.fullmatch(name)
    ):
        raise InvalidCaveat(
            f"tool name {name!r} is not 1..{TOKEN_MAX_TOOL_NAME_CHARS} printable characters "
            "without whitespace"
        )
    return name


def check_peer(peer: str) -> str:
    if (
        not isinstance(peer, str)  # pyright: ignore[reportUnnecessaryIsInstance]
        or len(peer) > MAX_PEER_CHARS
        or not peer.isprintable()
        or not _PEER.fullmatch(peer)
    ):
        raise InvalidCaveat(
            f"principal {peer!r} is not a peer id (<channel>:<id>, at most {MAX_PEER_CHARS} "
            "printable characters without whitespace)"
        )
    return peer


def check_budget(amount: int, what: str = "budget") -> int:
    if not _is_int(amount) or not 0 <= amount <= MAX_INT64:
        raise InvalidCaveat(f"{what} {amount!r} is not an integer in 0..2^63-1")
    return amount


# --- the caveats ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpiresAt:
    """Not valid at or after ``ns`` (Unix epoch nanoseconds)."""

    ns: int

    def __post_init__(self) -> None:
        if not _is_int(self.ns) or not 0 <= self.ns <= MAX_INT64:
            raise InvalidCaveat(f"expiry {self.ns!r} is not a time in ns in 0..2^63-1")


@dataclass(frozen=True, slots=True)
class RoleIs:
    """Only a caller of this process role."""

    role: str

    def __post_init__(self) -> None:
        check_role(self.role)


@dataclass(frozen=True, slots=True)
class SessionIs:
    """Only for requests in this session."""

    session: str

    def __post_init__(self) -> None:
        check_session(self.session)


@dataclass(frozen=True, slots=True)
class ToolsAllowed:
    """Tool calls only to these tools (sorted, distinct). Build with :meth:`of`."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> ToolsAllowed:
        return cls(tuple(sorted(set(names))))

    def __post_init__(self) -> None:
        if not isinstance(self.names, tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidCaveat("tool names must be a tuple (use ToolsAllowed.of)")
        if len(self.names) > TOKEN_MAX_TOOLS:
            raise InvalidCaveat(
                f"an allowlist of {len(self.names)} tools (at most {TOKEN_MAX_TOOLS})"
            )
        for name in self.names:
            check_tool(name)
        if list(self.names) != sorted(set(self.names)):
            # One encoding per set, so equal allowlists are equal bytes.
            raise InvalidCaveat(f"tool names {list(self.names)!r} are not sorted and distinct")


@dataclass(frozen=True, slots=True)
class RiskCeiling:
    """Operations up to this risk level."""

    level: Risk

    def __post_init__(self) -> None:
        if not isinstance(self.level, Risk):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidCaveat(f"risk ceiling {self.level!r} is not a Risk")


@dataclass(frozen=True, slots=True)
class TrustCeiling:
    """The holder acts with at most this trust level."""

    level: TrustLevel

    def __post_init__(self) -> None:
        if not isinstance(self.level, TrustLevel):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidCaveat(f"trust ceiling {self.level!r} is not a TrustLevel")


@dataclass(frozen=True, slots=True)
class BudgetCeiling:
    """Total spending under the token's id, in budget units."""

    amount: int

    def __post_init__(self) -> None:
        check_budget(self.amount, "budget ceiling")


Caveat = ExpiresAt | RoleIs | SessionIs | ToolsAllowed | RiskCeiling | TrustCeiling | BudgetCeiling


def encode_caveat(caveat: Caveat) -> pb.Caveat:
    match caveat:
        case ExpiresAt(ns):
            return pb.Caveat(expires_at_ns=ns)
        case RoleIs(role):
            return pb.Caveat(role=role)
        case SessionIs(session):
            return pb.Caveat(session=session)
        case ToolsAllowed(names):
            return pb.Caveat(tools=pb.ToolAllowlist(names=names))
        case RiskCeiling(level):
            return pb.Caveat(risk_ceiling=int(level))
        case TrustCeiling(level):
            return pb.Caveat(trust_ceiling=int(level))
        case BudgetCeiling(amount):
            return pb.Caveat(budget_ceiling=amount)


def caveat_bytes(caveat: Caveat) -> bytes:
    """The bytes one link of the HMAC chain covers."""
    return encode_caveat(caveat).SerializeToString(deterministic=True)


def decode_caveat(msg: pb.Caveat) -> Caveat:
    """The caveat ``msg`` carries; :class:`InvalidCaveat` for none or a bad value."""
    kind = msg.WhichOneof("kind")
    if kind == "expires_at_ns":
        return ExpiresAt(msg.expires_at_ns)
    if kind == "role":
        return RoleIs(msg.role)
    if kind == "session":
        return SessionIs(msg.session)
    if kind == "tools":
        return ToolsAllowed(tuple(msg.tools.names))
    if kind == "risk_ceiling":
        if msg.risk_ceiling > Risk.R4:
            raise InvalidCaveat(f"risk ceiling {msg.risk_ceiling} is not a level (0..4)")
        return RiskCeiling(Risk(msg.risk_ceiling))
    if kind == "trust_ceiling":
        if msg.trust_ceiling > TrustLevel.OWNER:
            raise InvalidCaveat(f"trust ceiling {msg.trust_ceiling} is not a level (0..3)")
        return TrustCeiling(TrustLevel(msg.trust_ceiling))
    if kind == "budget_ceiling":
        return BudgetCeiling(msg.budget_ceiling)
    raise InvalidCaveat("a caveat of no known kind")


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
        if not _is_int(self.now_ns) or not 0 <= self.now_ns <= MAX_INT64:
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
                    trust = min(trust, level)
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


__all__ = [
    "MAX_INT64",
    "BudgetCeiling",
    "Caveat",
    "ExpiresAt",
    "Request",
    "Risk",
    "RiskCeiling",
    "RoleIs",
    "Scope",
    "SessionIs",
    "ToolsAllowed",
    "TrustCeiling",
    "caveat_bytes",
    "check_budget",
    "check_peer",
    "check_role",
    "check_session",
    "check_tool",
    "decode_caveat",
    "encode_caveat",
]
