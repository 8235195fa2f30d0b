"""Why a token was refused, and the errors of the holder-side token code.

:class:`RejectReason` is the contract between the core and every holder: the
core refuses a call with one reason (``naga.v1.TokenRejection``, sent back
in the ``naga-reject-reason`` trailing metadata entry), and the SDK raises
an error carrying it.
"""

from __future__ import annotations

import enum

from naga.v1 import authz_pb2 as pb


class RejectReason(enum.Enum):
    """Why a token, a request, a spawn or a debit was refused. The values are
    the numbers of ``naga.v1.TokenRejection``, which carries them to callers."""

    MALFORMED = pb.TOKEN_REJECTION_MALFORMED
    OVERSIZE = pb.TOKEN_REJECTION_OVERSIZE
    UNSUPPORTED_VERSION = pb.TOKEN_REJECTION_UNSUPPORTED_VERSION
    BAD_TAG = pb.TOKEN_REJECTION_BAD_TAG
    INVALID_CAVEAT = pb.TOKEN_REJECTION_INVALID_CAVEAT
    EXPIRED = pb.TOKEN_REJECTION_EXPIRED
    REVOKED = pb.TOKEN_REJECTION_REVOKED
    WRONG_ROLE = pb.TOKEN_REJECTION_WRONG_ROLE
    WRONG_SESSION = pb.TOKEN_REJECTION_WRONG_SESSION
    TOOL_NOT_ALLOWED = pb.TOKEN_REJECTION_TOOL_NOT_ALLOWED
    RISK_TOO_HIGH = pb.TOKEN_REJECTION_RISK_TOO_HIGH
    BUDGET_EXHAUSTED = pb.TOKEN_REJECTION_BUDGET_EXHAUSTED
    WIDENING = pb.TOKEN_REJECTION_WIDENING
    SPAWN_TOO_DEEP = pb.TOKEN_REJECTION_SPAWN_TOO_DEEP

    @property
    def wire(self) -> pb.TokenRejection.ValueType:
        """The ``naga.v1.TokenRejection`` value to send."""
        return pb.TokenRejection.ValueType(self.value)

    @classmethod
    def from_wire(cls, value: int) -> RejectReason | None:
        """The reason a ``naga.v1.TokenRejection`` value names; None for
        UNSPECIFIED or a number this side does not know (a newer peer)."""
        try:
            return cls(value)
        except ValueError:
            return None

    @classmethod
    def named(cls, name: str) -> RejectReason | None:
        """The reason called ``name`` (``"REVOKED"``), or None if there is none."""
        return cls.__members__.get(name)

    @property
    def is_violation(self) -> bool:
        """True for an authenticated holder reaching past its grant (a policy
        violation the ratchet counts), False for a token that is merely
        unusable (garbage, expired, revoked, out of budget)."""
        return self in _VIOLATIONS


_VIOLATIONS = frozenset(
    {
        RejectReason.WRONG_ROLE,
        RejectReason.WRONG_SESSION,
        RejectReason.TOOL_NOT_ALLOWED,
        RejectReason.RISK_TOO_HIGH,
        RejectReason.WIDENING,
        RejectReason.SPAWN_TOO_DEEP,
    }
)


class TokenError(Exception):
    """Root of the errors of :mod:`naga.tokens` (the contracts package has no
    ``NagaError``: that is the core's)."""


class InvalidCaveat(TokenError):
    """A caveat cannot be built: a value out of range, a malformed name."""


class TokenRejected(TokenError):
    """A token was refused: not a token, too large, or (in the core) not
    granting a request. ``reason`` is the cause, ``detail`` the words."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(f"token refused ({reason.name.lower()}): {message}")
        self.reason = reason
        self.detail = message


__all__ = ["InvalidCaveat", "RejectReason", "TokenError", "TokenRejected"]
