"""The one table from the core's errors to gRPC status codes and refusals.

Handlers raise :class:`~naga_core.errors.NagaError` subclasses and never
pick a status code themselves (except :class:`RequestRefused`, whose code
is part of the refusal). An error maps to the entry of the most specific
class on its MRO, so a new subclass inherits its parent's row until it is
given its own here. Every failed call names its refusal
(``naga.v1.Refusal``) in the ``naga-refusal`` trailer, so that callers
decide on it, never on the code's name or the message's words. A refused
capability token maps by its reason (:data:`REJECTION_STATUS`: every
reason has its row) and names the reason in ``naga-reject-reason`` too
(:func:`trailers_of`), so the SDK can raise an error that carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

from naga.constants import REFUSAL_KEY
from naga.tokens import REJECT_REASON_KEY, RejectReason
from naga.v1.status_pb2 import Refusal
from naga_core._localmodel_assets import LocalModelError
from naga_core._modules import PackageMissing
from naga_core._sdnotify import NotifyFailed
from naga_core.agent import (
    AgentError,
    AgentUnavailable,
    BadImages,
    NoExecutor,
    NoTurnRunning,
    SessionNotFound,
    TurnConflict,
)
from naga_core.approvals import ApprovalError
from naga_core.authz import AuthzError, InvalidRequest, TokenRejected, TrustLowered
from naga_core.constitution import ConstitutionError, ConstitutionRefused
from naga_core.daemon._errors import (
    ConsoleProofRequired,
    CoreStopping,
    CredentialMissing,
    CredentialRefused,
    DaemonError,
    RequestRefused,
)
from naga_core.daemon._gateway import GatewayError
from naga_core.egress import EgressError, EgressRefused
from naga_core.errors import (
    BlobCorrupt,
    BlobError,
    CommandRefused,
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
from naga_core.kernel import (
    ComponentError,
    InvalidPeer,
    InvalidSetting,
    KernelError,
    OwnerRequired,
    SettingError,
    TrustError,
    TrustRaiseRefused,
    UnknownSetting,
)
from naga_core.memory import ItemNotFound, MemoryStoreError, WriteRefused
from naga_core.plugins import (
    CallTimedOut,
    PluginError,
    PluginNotFound,
    PluginUnavailable,
    ToolArgumentsInvalid,
    ToolFailed,
    WorkerHung,
    WorkerUnavailable,
)
from naga_core.scheduler import (
    InvalidSchedule,
    JobRefused,
    ScheduleNotUnderstood,
    SchedulerError,
)
from naga_core.skills import SkillError, SkillForgotten, SkillNotFound, SkillRefused
from naga_core.supervisor import SupervisorError
from naga_core.wechat import (
    CredentialsInvalid,
    PluginCallFailed,
    WechatError,
    WechatPeerUnknown,
    WechatSendRefused,
)
from naga_core.workspace import PathRefused, WorkspaceError

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

R = Refusal

#: Every error class the core answers a call with: its status code and the
#: refusal it names (the ``naga-refusal`` trailer). An error maps to the row
#: of the most specific class on its MRO. There is no catch-all row: a
#: NagaError whose class (and parents up to NagaError) has none answers
#: INTERNAL, as a bug does (tests/daemon/test_status_table.py requires a
#: row for every error class a call can meet).
STATUS_OF: Mapping[type[BaseException], tuple[Code, Refusal.ValueType]] = {
    # the caller: who it is, what it sent
    CredentialMissing: (Code.UNAUTHENTICATED, R.REFUSAL_CREDENTIAL),
    CredentialRefused: (Code.PERMISSION_DENIED, R.REFUSAL_CREDENTIAL),
    # a console change asked through the gateway without the owner's console login
    ConsoleProofRequired: (Code.PERMISSION_DENIED, R.REFUSAL_OWNER_REQUIRED),
    InvalidRecord: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    InvalidRequest: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    CommandRefused: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),  # the CLI's, in kind
    # an open stream whose principal's trust fell below what it was admitted at
    TrustLowered: (Code.PERMISSION_DENIED, R.REFUSAL_TRUST_LOWERED),
    AuthzError: (Code.FAILED_PRECONDITION, R.REFUSAL_TOKEN),
    # the kernel's refusals
    UnknownSetting: (Code.NOT_FOUND, R.REFUSAL_UNKNOWN_SETTING),
    InvalidSetting: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_SETTING),
    SettingError: (Code.FAILED_PRECONDITION, R.REFUSAL_INVALID_SETTING),
    InvalidPeer: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_PEER),
    TrustRaiseRefused: (Code.PERMISSION_DENIED, R.REFUSAL_TRUST_RAISE),
    TrustError: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_PEER),
    OwnerRequired: (Code.PERMISSION_DENIED, R.REFUSAL_OWNER_REQUIRED),
    KernelError: (Code.FAILED_PRECONDITION, R.REFUSAL_KERNEL_STATE),
    ComponentError: (Code.FAILED_PRECONDITION, R.REFUSAL_COMPONENT),
    NotFound: (Code.NOT_FOUND, R.REFUSAL_NOT_FOUND),
    # plugins: the caller's mistakes, the plugin's state, the worker's fate
    PluginNotFound: (Code.NOT_FOUND, R.REFUSAL_PLUGIN_NOT_FOUND),
    ToolArgumentsInvalid: (Code.INVALID_ARGUMENT, R.REFUSAL_TOOL_ARGUMENTS),
    PluginUnavailable: (Code.FAILED_PRECONDITION, R.REFUSAL_PLUGIN_UNAVAILABLE),
    ToolFailed: (Code.FAILED_PRECONDITION, R.REFUSAL_TOOL_FAILED),
    WorkerUnavailable: (Code.UNAVAILABLE, R.REFUSAL_WORKER_UNAVAILABLE),
    WorkerHung: (Code.DEADLINE_EXCEEDED, R.REFUSAL_TIMED_OUT),
    CallTimedOut: (Code.DEADLINE_EXCEEDED, R.REFUSAL_TIMED_OUT),
    PluginError: (Code.FAILED_PRECONDITION, R.REFUSAL_PLUGIN_UNAVAILABLE),
    SupervisorError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    # the constitution file does not match its anchor, or a text it cannot be
    ConstitutionRefused: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    ConstitutionError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    # turns
    SessionNotFound: (Code.NOT_FOUND, R.REFUSAL_SESSION_NOT_FOUND),
    BadImages: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    NoTurnRunning: (Code.FAILED_PRECONDITION, R.REFUSAL_NO_TURN_RUNNING),
    TurnConflict: (Code.FAILED_PRECONDITION, R.REFUSAL_TURN_CONFLICT),
    AgentUnavailable: (Code.UNAVAILABLE, R.REFUSAL_AGENT_UNAVAILABLE),
    NoExecutor: (Code.UNAVAILABLE, R.REFUSAL_AGENT_UNAVAILABLE),
    AgentError: (Code.FAILED_PRECONDITION, R.REFUSAL_AGENT_UNAVAILABLE),
    LocalModelError: (Code.FAILED_PRECONDITION, R.REFUSAL_LOCAL_MODEL),
    # the core's own state
    CoreStopping: (Code.UNAVAILABLE, R.REFUSAL_CORE_STOPPING),
    LedgerFailed: (Code.UNAVAILABLE, R.REFUSAL_CORE_STOPPING),  # the next core recovers
    LedgerClosed: (Code.UNAVAILABLE, R.REFUSAL_CORE_STOPPING),
    LedgerCorrupt: (Code.DATA_LOSS, R.REFUSAL_CORRUPT),
    BlobCorrupt: (Code.DATA_LOSS, R.REFUSAL_CORRUPT),
    LedgerError: (Code.FAILED_PRECONDITION, R.REFUSAL_KERNEL_STATE),
    BlobError: (Code.FAILED_PRECONDITION, R.REFUSAL_NOT_FOUND),
    ProofError: (Code.FAILED_PRECONDITION, R.REFUSAL_PROOF),
    ConfigError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    PackageMissing: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    NotifyFailed: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    GatewayError: (Code.FAILED_PRECONDITION, R.REFUSAL_GATEWAY),
    DaemonError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    # tools, approvals, egress and WeChat
    PathRefused: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    WorkspaceError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    ApprovalError: (Code.FAILED_PRECONDITION, R.REFUSAL_INVALID_REQUEST),
    EgressRefused: (Code.PERMISSION_DENIED, R.REFUSAL_INVALID_REQUEST),
    EgressError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    PluginCallFailed: (Code.UNAVAILABLE, R.REFUSAL_WORKER_UNAVAILABLE),
    CredentialsInvalid: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    # a file WeChat would not carry now (no context token, the CDN refused it)
    WechatSendRefused: (Code.FAILED_PRECONDITION, R.REFUSAL_TOOL_FAILED),
    WechatPeerUnknown: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    WechatError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
    # the skill library
    SkillForgotten: (Code.NOT_FOUND, R.REFUSAL_NOT_FOUND),
    SkillNotFound: (Code.NOT_FOUND, R.REFUSAL_NOT_FOUND),
    SkillRefused: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    SkillError: (Code.FAILED_PRECONDITION, R.REFUSAL_KERNEL_STATE),
    # scheduled jobs (a JobNotFound is a NotFound)
    InvalidSchedule: (Code.INVALID_ARGUMENT, R.REFUSAL_INVALID_REQUEST),
    # the model's one answer was no schedule: nothing was saved
    ScheduleNotUnderstood: (Code.FAILED_PRECONDITION, R.REFUSAL_INVALID_REQUEST),
    JobRefused: (Code.FAILED_PRECONDITION, R.REFUSAL_KERNEL_STATE),
    SchedulerError: (Code.FAILED_PRECONDITION, R.REFUSAL_KERNEL_STATE),
    # memory
    ItemNotFound: (Code.NOT_FOUND, R.REFUSAL_NOT_FOUND),
    WriteRefused: (Code.PERMISSION_DENIED, R.REFUSAL_INVALID_REQUEST),
    MemoryStoreError: (Code.FAILED_PRECONDITION, R.REFUSAL_CONFIG),
}

#: A RequestRefused's refusal, by the code its named constructor chose.
_REQUEST_REFUSAL: Mapping[Code, Refusal.ValueType] = {
    Code.INVALID_ARGUMENT: R.REFUSAL_INVALID_REQUEST,
    Code.OUT_OF_RANGE: R.REFUSAL_INVALID_REQUEST,
    Code.PERMISSION_DENIED: R.REFUSAL_CREDENTIAL,
    Code.RESOURCE_EXHAUSTED: R.REFUSAL_LIMIT,
}


def _row(exc: NagaError) -> tuple[Code, Refusal.ValueType] | None:
    if isinstance(exc, RequestRefused):
        return exc.code, _REQUEST_REFUSAL.get(exc.code, R.REFUSAL_INVALID_REQUEST)
    if isinstance(exc, TokenRejected):
        return REJECTION_STATUS[exc.reason], R.REFUSAL_TOKEN
    for cls in type(exc).__mro__:
        row = STATUS_OF.get(cls)
        if row is not None:
            return row
    return None


def status_of(exc: NagaError) -> tuple[Code, str]:
    """The status code and message a caller gets for ``exc``."""
    row = _row(exc)
    if row is None:  # no row: the core did not say what this is, as with a bug
        return Code.INTERNAL, str(exc) or type(exc).__name__
    return row[0], str(exc) or type(exc).__name__


def refusal_of(exc: NagaError) -> Refusal.ValueType:
    """The refusal ``exc`` names (REFUSAL_UNSPECIFIED without a row)."""
    row = _row(exc)
    return R.REFUSAL_UNSPECIFIED if row is None else row[1]


def trailers_of(exc: NagaError) -> tuple[tuple[str, str], ...]:
    """Trailing metadata a caller gets with ``exc``: its refusal, and a
    refused token's reason."""
    out = ((REFUSAL_KEY, Refusal.Name(refusal_of(exc))),)
    if isinstance(exc, TokenRejected):
        out += ((REJECT_REASON_KEY, exc.reason.name),)
    return out


def is_fatal(exc: NagaError) -> bool:
    """The core cannot go on after ``exc``: it stops, and the next start recovers."""
    return isinstance(exc, LedgerFailed | LedgerCorrupt)


__all__ = ["REJECTION_STATUS", "STATUS_OF", "is_fatal", "refusal_of", "status_of", "trailers_of"]
