"""The SDK's exceptions: every gRPC failure becomes one of these, once, at
the client's boundary; callers never see ``grpc.RpcError``.

``SdkError`` is the root. Each class corresponds to the status codes named
in its docstring; ``code`` keeps the gRPC status name and ``detail`` the
core's message (which names the field and the rule that was broken), both
for people; ``refusal`` (a ``naga.v1.Refusal``) says why the core refused,
for programs: decide on it or on the class, never on ``code`` or the words.

A refused capability token raises a :class:`TokenRefused` carrying the
core's ``reason`` (a :class:`naga.tokens.RejectReason`); each such class is
also the class of its status code, so ``except PermissionDenied`` still
catches a revoked token, and ``except TokenRefused as e: e.reason`` tells
why.
"""

from __future__ import annotations

from naga.tokens import RejectReason
from naga.v1.status_pb2 import Refusal


class SdkError(Exception):
    """Root of every error the Naga client SDK raises."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        detail: str = "",
        refusal: Refusal.ValueType = Refusal.REFUSAL_UNSPECIFIED,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail
        self.refusal = refusal


class CoreUnavailable(SdkError):
    """UNAVAILABLE (or a call the stopping core CANCELLED), or no socket at
    all: the core is not running, is stopping, or restarted under the call.
    A write that fails so may or may not have been applied: read back before
    repeating one that is not idempotent. ``hint`` says how to start it."""

    def __init__(
        self,
        message: str,
        *,
        hint: str,
        code: str = "UNAVAILABLE",
        refusal: Refusal.ValueType = Refusal.REFUSAL_UNSPECIFIED,
    ) -> None:
        super().__init__(f"{message}; {hint}", code=code, detail=message, refusal=refusal)
        self.hint = hint


class CoreCancelled(CoreUnavailable):
    """CANCELLED: the stopping core cancelled a call it had not started (or
    was answering). Like UNAVAILABLE, a write may or may not have been applied."""


class PluginUnavailable(SdkError):
    """UNAVAILABLE from a plugin's worker, not from the core: it died during
    the call or is being rebuilt and was not ready in time. The core serves
    on; the next call goes to the rebuilt worker."""


class CredentialUnreadable(SdkError):
    """The owner credential file is missing, unreadable or malformed."""


class Unauthenticated(SdkError):
    """UNAUTHENTICATED: the call carried no credential."""


class PermissionDenied(SdkError):
    """PERMISSION_DENIED: the credential is not accepted, or the caller may
    not do this (raise trust without the owner)."""


class InvalidArgument(SdkError):
    """INVALID_ARGUMENT: a field breaks its rule; the message names it."""


class OutOfRange(SdkError):
    """OUT_OF_RANGE: a seq or size past the ledger's end."""


class NotFound(SdkError):
    """NOT_FOUND: no such setting (or record)."""


class FailedPrecondition(SdkError):
    """FAILED_PRECONDITION: the kernel refused in its current state."""


class ResourceExhausted(SdkError):
    """RESOURCE_EXHAUSTED: a message too large, or too many streams open."""


class TokenRefused(SdkError):
    """The core refused the call's capability token (or a spawn or debit
    under it); ``reason`` says why. Never raised itself: its subclasses are
    also the class of the status code the core answered with."""

    def __init__(self, message: str, *, reason: RejectReason, code: str, detail: str) -> None:
        super().__init__(message, code=code, detail=detail, refusal=Refusal.REFUSAL_TOKEN)
        self.reason = reason


class TokenUnauthenticated(Unauthenticated, TokenRefused):
    """UNAUTHENTICATED with a reason: not a token of this core (MALFORMED,
    UNSUPPORTED_VERSION, BAD_TAG, INVALID_CAVEAT) or EXPIRED: get a new one."""


class TokenDenied(PermissionDenied, TokenRefused):
    """PERMISSION_DENIED with a reason: the token is authentic but does not
    reach (REVOKED, WRONG_ROLE, WRONG_SESSION, TOOL_NOT_ALLOWED,
    RISK_TOO_HIGH, WIDENING, SPAWN_TOO_DEEP)."""


class TokenInvalid(InvalidArgument, TokenRefused):
    """INVALID_ARGUMENT with a reason: OVERSIZE."""


class BudgetExhausted(ResourceExhausted, TokenRefused):
    """RESOURCE_EXHAUSTED with a reason: BUDGET_EXHAUSTED, the token's or an
    ancestor's budget would be overspent; nothing was debited."""


class Unimplemented(SdkError):
    """UNIMPLEMENTED: this core does not serve the method (an older core)."""


class DeadlineExceeded(SdkError):
    """DEADLINE_EXCEEDED: no answer within the call's deadline."""


class CoreFailure(SdkError):
    """INTERNAL, DATA_LOSS, UNKNOWN and anything else: the core failed; its
    log says more."""


__all__ = [
    "BudgetExhausted",
    "CoreCancelled",
    "CoreFailure",
    "CoreUnavailable",
    "CredentialUnreadable",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "PluginUnavailable",
    "ResourceExhausted",
    "SdkError",
    "TokenDenied",
    "TokenInvalid",
    "TokenRefused",
    "TokenUnauthenticated",
    "Unauthenticated",
    "Unimplemented",
]
