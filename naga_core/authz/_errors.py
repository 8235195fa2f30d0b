"""Every error the authorization package raises, and why a token was refused.

:class:`RejectReason` and :class:`InvalidCaveat` are the contract's
(:mod:`naga.tokens`: holders build caveats and read reasons too);
:class:`TokenRejected` here is the core's refusal, which is both an
:class:`AuthzError` (a ``NagaError``) and a ``naga.tokens.TokenRejected``.
The gRPC server maps :class:`RejectReason` to status codes in one table; the
reasons are distinct causes, so that table never needs to read a message.
"""

from __future__ import annotations

from naga import tokens
from naga.tokens import InvalidCaveat, RejectReason
from naga.trust import TrustLevel
from naga_core.errors import ConfigError, NagaError


class AuthzError(NagaError):
    """Root of the authorization package's errors."""


class TokenRejected(AuthzError, tokens.TokenRejected):
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
        tokens.TokenRejected.__init__(self, reason, message)
        self.principal = principal
        self.token_id = token_id

    @classmethod
    def of(
        cls,
        refused: tokens.TokenRejected,
        *,
        principal: str | None = None,
        token_id: bytes | None = None,
    ) -> TokenRejected:
        """The core's refusal for a holder-side one (same reason and words)."""
        return cls(refused.reason, refused.detail, principal=principal, token_id=token_id)


class TrustLowered(AuthzError):
    """A principal's trust fell below what an open stream was admitted at
    (the trust table lowered it: by the owner, by the violation policy, by
    a rollback). Not a violation: the holder reached for nothing."""

    def __init__(self, message: str, *, principal: str, level: TrustLevel) -> None:
        super().__init__(message)
        self.principal = principal
        self.level = level


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
    "TrustLowered",
]
