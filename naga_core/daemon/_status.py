"""The one table from the core's errors to gRPC status codes.

Handlers raise :class:`~naga_core.errors.NagaError` subclasses and never
pick a status code themselves (except :class:`RequestRefused`, whose code
is part of the refusal). An error maps to the entry of the most specific
class on its MRO, so a new subclass inherits its parent's code until it is
given its own row here. A refused capability token maps by its reason
(:data:`REJECTION_STATUS`: every reason has its row) and names the reason
in the trailing metadata (:func:`trailers_of`), so the SDK can raise an
error that carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

from naga.tokens import REJECT_REASON_KEY, RejectReason
from naga_core.agent import AgentUnavailable, NoExecutor, SessionNotFound, TurnConflict
from naga_core.authz import AuthzError, InvalidRequest, TokenRejected, TrustLowered
from naga_core.daemon._errors import (
    CoreStopping,
    CredentialMissing,
    CredentialRefused,
    DaemonError,
    RequestRefused,
)
from naga_core.errors import (
    BlobCorrupt,
    BlobError,
    ConfigError,
    InvalidRecord,
    LedgerClosed,
    LedgerCorrupt,
    LedgerError,
    LedgerFailed,
    NagaError,
    NotFound,
    ProofError,
)
from naga_core.kernel import KernelError, OwnerRequired

# The settings and trust errors are not re-exported by naga_core.kernel
# (yet); they are part of what callers must be able to tell apart.
from naga_core.kernel._settings import InvalidSetting, SettingError, UnknownSetting
from naga_core.kernel._trust import InvalidPeer, TrustError, TrustRaiseRefused
from naga_core.plugins import (
    CallTimedOut,
    PluginNotFound,
    PluginUnavailable,
    ToolArgumentsInvalid,
    ToolFailed,
    WorkerHung,
    WorkerUnavailable,
)

Code = grpc.StatusCode

#: The status of a refused token, by reason. Authentication failures (not a
#: token, not ours, no longer valid) are UNAUTHENTICATED: the holder needs a
#: new token. An authentic token that does not reach (revoked by the owner,
#: another role, session, tool or risk, a widening spawn) is
#: PERMISSION_DENIED: retrying with it is pointless. Too large a token is
#: INVALID_ARGUMENT (read before anything is authenticated); an exhausted
#: budget is RESOURCE_EXHAUSTED, like any other quota.
REJECTION_STATUS: Mapping[RejectReason, Code] = {
    RejectReason.MALFORMED: Code.UNAUTHENTICATED,
    RejectReason.OVERSIZE: Code.INVALID_ARGUMENT,
    RejectReason.UNSUPPORTED_VERSION: Code.UNAUTHENTICATED,
    RejectReason.BAD_TAG: Code.UNAUTHENTICATED,
    RejectReason.INVALID_CAVEAT: Code.UNAUTHENTICATED,
    RejectReason.EXPIRED: Code.UNAUTHENTICATED,
    RejectReason.REVOKED: Code.PERMISSION_DENIED,
    RejectReason.WRONG_ROLE: Code.PERMISSION_DENIED,
    RejectReason.WRONG_SESSION: Code.PERMISSION_DENIED,
    RejectReason.TOOL_NOT_ALLOWED: Code.PERMISSION_DENIED,
    RejectReason.RISK_TOO_HIGH: Code.PERMISSION_DENIED,
    RejectReason.BUDGET_EXHAUSTED: Code.RESOURCE_EXHAUSTED,
    RejectReason.WIDENING: Code.PERMISSION_DENIED,
    RejectReason.SPAWN_TOO_DEEP: Code.PERMISSION_DENIED,
}

STATUS_OF: Mapping[type[BaseException], Code] = {
    # the caller: who it is, what it sent
    CredentialMissing: Code.UNAUTHENTICATED,
    CredentialRefused: Code.PERMISSION_DENIED,
    InvalidRecord: Code.INVALID_ARGUMENT,
    InvalidRequest: Code.INVALID_ARGUMENT,
    # an open stream whose principal's trust fell below what it was admitted at
    TrustLowered: Code.PERMISSION_DENIED,
    # the kernel's refusals
    UnknownSetting: Code.NOT_FOUND,
    InvalidSetting: Code.INVALID_ARGUMENT,
    SettingError: Code.FAILED_PRECONDITION,
    InvalidPeer: Code.INVALID_ARGUMENT,
    TrustRaiseRefused: Code.PERMISSION_DENIED,
    TrustError: Code.INVALID_ARGUMENT,
    OwnerRequired: Code.PERMISSION_DENIED,
    KernelError: Code.FAILED_PRECONDITION,
    NotFound: Code.NOT_FOUND,
    # plugins: the caller's mistakes, the plugin's state, the worker's fate
    PluginNotFound: Code.NOT_FOUND,
    ToolArgumentsInvalid: Code.INVALID_ARGUMENT,
    PluginUnavailable: Code.FAILED_PRECONDITION,
    ToolFailed: Code.FAILED_PRECONDITION,
    WorkerUnavailable: Code.UNAVAILABLE,  # messages start "plugin NAME" (the SDK tells it apart)
    WorkerHung: Code.DEADLINE_EXCEEDED,
    CallTimedOut: Code.DEADLINE_EXCEEDED,
    # turns
    SessionNotFound: Code.NOT_FOUND,
    TurnConflict: Code.FAILED_PRECONDITION,
    AgentUnavailable: Code.UNAVAILABLE,
    NoExecutor: Code.UNAVAILABLE,
    # the core's own state
    CoreStopping: Code.UNAVAILABLE,
    LedgerFailed: Code.UNAVAILABLE,  # the core stops; the next one recovers
    LedgerClosed: Code.UNAVAILABLE,
    LedgerCorrupt: Code.DATA_LOSS,
    BlobCorrupt: Code.DATA_LOSS,
    LedgerError: Code.FAILED_PRECONDITION,
    BlobError: Code.FAILED_PRECONDITION,
    ProofError: Code.FAILED_PRECONDITION,
    ConfigError: Code.FAILED_PRECONDITION,
    DaemonError: Code.FAILED_PRECONDITION,
    AuthzError: Code.FAILED_PRECONDITION,
    NagaError: Code.FAILED_PRECONDITION,
}


def status_of(exc: NagaError) -> tuple[Code, str]:
    """The status code and message a caller gets for ``exc``."""
    if isinstance(exc, RequestRefused):
        return exc.code, str(exc)
    if isinstance(exc, TokenRejected):
        return REJECTION_STATUS[exc.reason], str(exc)
    for cls in type(exc).__mro__:
        code = STATUS_OF.get(cls)
        if code is not None:
            return code, str(exc) or cls.__name__
    return Code.FAILED_PRECONDITION, str(exc)  # unreachable: NagaError is in the table


def trailers_of(exc: NagaError) -> tuple[tuple[str, str], ...]:
    """Trailing metadata a caller gets with ``exc``: a refused token's reason."""
    if isinstance(exc, TokenRejected):
        return ((REJECT_REASON_KEY, exc.reason.name),)
    return ()


def is_fatal(exc: NagaError) -> bool:
    """The core cannot go on after ``exc``: it stops, and the next start recovers."""
    return isinstance(exc, LedgerFailed | LedgerCorrupt)


__all__ = ["REJECTION_STATUS", "STATUS_OF", "is_fatal", "status_of", "trailers_of"]
