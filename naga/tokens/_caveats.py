"""Caveats: the typed restrictions a capability token carries, their values'
rules, and their one wire encoding (``naga.v1.Caveat``).

Holders build caveats to narrow a token offline (:meth:`Token.attenuate`);
the core folds and checks them (``naga_core.authz``). Every value is checked
when a caveat is built, so a caveat that exists is one the core accepts.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from naga.constants import TOKEN_MAX_TOOL_NAME_CHARS, TOKEN_MAX_TOOLS
from naga.tokens._errors import InvalidCaveat
from naga.trust import TrustLevel
from naga.v1 import authz_pb2 as pb

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


def as_trust_level(value: object) -> TrustLevel:
    """``value`` as a :class:`TrustLevel`. A plain int or a member of another
    enum (a :class:`Risk`) is refused: levels are never guessed from numbers."""
    if isinstance(value, TrustLevel):
        return value
    raise InvalidCaveat(f"trust level {value!r} is not a TrustLevel")


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
    """The holder acts with at most this trust level.

    ``level`` must be a :class:`naga.trust.TrustLevel` (the one enum the
    kernel's trust table uses too); a bare int is refused.
    """

    level: TrustLevel

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", as_trust_level(self.level))


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


__all__ = [
    "MAX_INT64",
    "MAX_PEER_CHARS",
    "MAX_SESSION_CHARS",
    "BudgetCeiling",
    "Caveat",
    "ExpiresAt",
    "Risk",
    "RiskCeiling",
    "RoleIs",
    "SessionIs",
    "ToolsAllowed",
    "TrustCeiling",
    "TrustLevel",
    "as_trust_level",
    "caveat_bytes",
    "check_budget",
    "check_peer",
    "check_role",
    "check_session",
    "check_tool",
    "decode_caveat",
    "encode_caveat",
]
