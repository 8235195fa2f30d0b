"""The SDK's exceptions: every gRPC failure becomes one of these, once, at
the client's boundary; callers never see ``grpc.RpcError``.

``SdkError`` is the root. Each class corresponds to the status codes named
in its docstring; ``code`` keeps the gRPC status name and ``detail`` the
core's message (which names the field and the rule that was broken).
"""

from __future__ import annotations


class SdkError(Exception):
    """Root of every error the Naga client SDK raises."""

    def __init__(self, message: str, *, code: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail


class CoreUnavailable(SdkError):
    """UNAVAILABLE (or a call the stopping core CANCELLED), or no socket at
    all: the core is not running, is stopping, or restarted under the call.
    A write that fails so may or may not have been applied: read back before
    repeating one that is not idempotent. ``hint`` says how to start it."""

    def __init__(self, message: str, *, hint: str, code: str = "UNAVAILABLE") -> None:
        super().__init__(f"{message}; {hint}", code=code, detail=message)
        self.hint = hint


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


class DeadlineExceeded(SdkError):
    """DEADLINE_EXCEEDED: no answer within the call's deadline."""


class CoreFailure(SdkError):
    """INTERNAL, DATA_LOSS, UNKNOWN and anything else: the core failed; its
    log says more."""


__all__ = [
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
    "Unauthenticated",
]
