"""Every error the authorization package raises, and why a token was refused.

The gRPC server maps :class:`RejectReason` to status codes in one table; the
reasons are distinct causes, so that table never needs to read a message.
"""

from __future__ import annotations

import enum

from naga.v1 import authz_pb2 as pb
from naga_core.errors import ConfigError, NagaError


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


class AuthzError(NagaError):
    """Root of the authorization package's errors."""


class TokenRejected(AuthzError):
    """A token, request, spawn or debit was refused.

    ``reason`` is the cause. ``principal`` and ``token_id`` are set only when
    the token's HMAC chain verified (so they are the core's own words, safe to
    charge a violation to); they are None for a token that did not.
    """

    def __init__(
        self,
        reason: RejectReason,
        message: str,
        *,
        principal: str | None = None,
        token_id: bytes | None = None,
    ) -> None:
        super().__init__(f"token refused ({reason.name.lower()}): {message}")
        self.reason = reason
        self.detail = message
        self.principal = principal
        self.token_id = token_id


class InvalidCaveat(AuthzError):
    """A caveat cannot be built: a value out of range, a malformed name."""


class InvalidRequest(AuthzError):
    """A request to check cannot be built: a negative amount, a malformed name."""


class TokenKeyError(AuthzError, ConfigError):
    """The token root key file is missing, unreadable, too open or the wrong size."""


__all__ = [
    "AuthzError",
    "InvalidCaveat",
    "InvalidRequest",
    "RejectReason",
    "TokenKeyError",
    "TokenRejected",
]
