"""The WebSocket protocol's frames (docs/protocol/websocket.md), validated
with pydantic here and nowhere else.

A client frame is a request ``{"type": "req", "id", "method", "params"}``;
the server answers each with a response of the same ``id`` and pushes
events with a per-stream sequence number. Everything the client sends is
checked against these models before the gateway acts on it; anything else
gets an error frame naming the problem.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, cast

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from naga.constants import (
    CONSOLE_PROTOCOL_VERSION,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_MESSAGE_BYTES,
    SESSION_PATTERN,
)
from naga_gateway.errors import FrameInvalid

PROTOCOL_VERSION = CONSOLE_PROTOCOL_VERSION

# Error codes of error responses (the document lists them).
BAD_FRAME = "bad_frame"
UNKNOWN_METHOD = "unknown_method"
INVALID_PARAMS = "invalid_params"
NOT_CONNECTED = "not_connected"
FORBIDDEN = "forbidden"
CORE = "core_error"
RATE_LIMITED = "rate_limited"
BUSY = "busy"
UNSUPPORTED_VERSION = "unsupported_version"

_SESSION = f"^{SESSION_PATTERN}$"
Session = Annotated[str, Field(pattern=_SESSION)]
RequestId = Annotated[str, Field(min_length=1, max_length=64)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Request(_Strict):
    type: Literal["req"]
    id: RequestId
    method: Annotated[str, Field(min_length=1, max_length=64)]
    params: dict[str, Any] = Field(default_factory=dict[str, Any])


class Resume(_Strict):
    stream: Annotated[str, Field(min_length=1, max_length=64)]
    after: Annotated[int, Field(ge=0)]


class ConnectParams(_Strict):
    protocol: int
    client: Annotated[str, Field(max_length=64)] = ""
    # A peer's name on this channel, without the owner's proof (at most a guest).
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")] | None = None
    resume: Resume | None = None


class SendParams(_Strict):
    session: Session
    # Characters; the core checks the UTF-8 size (MAX_MESSAGE_BYTES).
    text: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_BYTES)]
    key: Annotated[str, Field(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS)]
    #: None: the core's ``lanes.queue_mode`` setting.
    mode: Literal["followup", "collect", "steer", "interrupt"] | None = None


class SessionParams(_Strict):
    session: Session


class HistoryParams(_Strict):
    session: Session
    limit: Annotated[int, Field(ge=0, le=1000)] = 0
    #: Also tool calls, errors and aborts, and each reply's usage (owner only).
    detail: bool = False


class ListParams(_Strict):
    limit: Annotated[int, Field(ge=0, le=1000)] = 0
    #: Archived sessions too (the owner's sessions page).
    include_archived: bool = False


class RollbackParams(_Strict):
    to_seq: Annotated[int, Field(ge=-1)]


class NoParams(_Strict):
    pass


class ApprovalParams(_Strict):
    id: Annotated[str, Field(pattern=r"ap-[0-9a-f]{1,32}")]
    allow: bool


class LedgerParams(_Strict):
    limit: Annotated[int, Field(ge=0, le=1000)] = 0
    before_seq: Annotated[int, Field(ge=0)] | None = None


# The owner's changes (docs/adr/0029-console-owner-changes.md). Names and
# texts are bounded here; the core checks each against its own rules.
_Name = Annotated[str, Field(min_length=1, max_length=64)]


class RenameParams(_Strict):
    session: Session
    title: Annotated[str, Field(max_length=200)]


class ArchiveParams(_Strict):
    session: Session
    archived: bool


class LogParams(_Strict):
    level: Literal["debug", "info", "warning", "error", "critical"] | None = None
    component: Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z0-9_.:-]*$")] = ""
    before: Annotated[int, Field(ge=1)] | None = None
    limit: Annotated[int, Field(ge=0, le=500)] = 0


class SettingParams(_Strict):
    name: _Name
    value: Annotated[str, Field(max_length=1024)] = ""
    reset: bool = False


class PluginParams(_Strict):
    name: _Name
    enabled: bool


class ProviderParams(_Strict):
    #: A providers.json name, or "local"; "" goes back to the file's default.
    name: Annotated[str, Field(max_length=64)]


class PreviewParams(_Strict):
    #: A folder or archive on the gateway's machine; the core reads it.
    source: Annotated[str, Field(min_length=1, max_length=4096)]


class InstallParams(_Strict):
    source: Annotated[str, Field(min_length=1, max_length=4096)]
    code_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class WechatBindParams(_Strict):
    login_id: Annotated[str, Field(max_length=256)] = ""
    verify_code: Annotated[str, Field(max_length=16, pattern=r"^[0-9]*$")] = ""
    wait_ms: Annotated[int, Field(ge=0, le=30000)] = 0


class TrustParams(_Strict):
    #: "<channel>:<id>"; the core checks its shape.
    peer: Annotated[str, Field(min_length=1, max_length=200)]
    level: Literal["untrusted", "guest", "known", "owner"]
    reason: Annotated[str, Field(max_length=500)] = ""


class SkillListParams(_Strict):
    #: "global", "peer/<id>", "session/<id>"; "" every scope (the core checks it).
    scope: Annotated[str, Field(max_length=300)] = ""
    archived: bool = False


class SkillParams(_Strict):
    name: _Name
    scope: Annotated[str, Field(max_length=300)] = ""
    #: A version (hex, or a unique prefix); "" the current one.
    version: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-f]*$")] = ""


class MemoryListParams(_Strict):
    #: A subject (a peer id); "" for every subject's items. The core checks it.
    subject: Annotated[str, Field(max_length=200)] = ""


class MemoryDeleteParams(_Strict):
    id: Annotated[str, Field(pattern=r"^mi-[0-9a-f]{16}$")]


#: method -> the model of its params.
METHODS: dict[str, type[_Strict]] = {
    "connect": ConnectParams,
    "send": SendParams,
    "abort": SessionParams,
    "sessions": ListParams,
    "history": HistoryParams,
    "tools": NoParams,
    "rollback.preview": RollbackParams,
    "rollback": RollbackParams,
    "ping": NoParams,
    "approval.decide": ApprovalParams,
    # The console's read-only pages (owner only).
    "settings": NoParams,
    "plugins": NoParams,
    "trust": NoParams,
    "ledger": LedgerParams,
    # The owner's changes and owner-only pages (the core checks the login again).
    "session.rename": RenameParams,
    "session.archive": ArchiveParams,
    "log": LogParams,
    "setting.set": SettingParams,
    "plugin.enable": PluginParams,
    "providers": NoParams,
    "provider.default": ProviderParams,
    "wechat.bind": WechatBindParams,
    "wechat.list": NoParams,
    "plugin.preview": PreviewParams,
    "plugin.install": InstallParams,
    "trust.set": TrustParams,
    # skills17: the skills view (read-only; the core checks the login too).
    "skills": SkillListParams,
    "skill.show": SkillParams,
    "skill.log": SkillParams,
    # Memory browsed and deleted (docs/adr/0045-console-memory-delete.md).
    "memory": MemoryListParams,
    "memory.delete": MemoryDeleteParams,
}


def parse_request(raw: bytes | str) -> tuple[Request, _Strict]:
    """A request and its validated params; else :class:`FrameInvalid`."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameInvalid(f"frame is not JSON: {exc}", BAD_FRAME) from None
    except RecursionError:
        raise FrameInvalid("frame is not JSON we read: nested too deeply", BAD_FRAME) from None
    if not isinstance(obj, dict):
        raise FrameInvalid("frame must be a JSON object", BAD_FRAME)
    fields = cast(dict[str, Any], obj)
    raw_id = fields.get("id")
    rid = raw_id if isinstance(raw_id, str) else None
    try:
        req = Request.model_validate(obj)
    except pydantic.ValidationError as exc:
        raise FrameInvalid(f"bad request frame: {_explain(exc)}", BAD_FRAME, rid) from None
    model = METHODS.get(req.method)
    if model is None:
        known = ", ".join(sorted(METHODS))
        raise FrameInvalid(
            f"unknown method {req.method!r} (one of: {known})", UNKNOWN_METHOD, req.id
        )
    try:
        params = model.model_validate(req.params)
    except pydantic.ValidationError as exc:
        raise FrameInvalid(
            f"bad params for {req.method}: {_explain(exc)}", INVALID_PARAMS, req.id
        ) from None
    return req, params


def _explain(exc: pydantic.ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "frame"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def response(rid: str, result: dict[str, Any]) -> bytes:
    return dump({"type": "res", "id": rid, "ok": True, "result": result})


def error(rid: str | None, code: str, message: str) -> bytes:
    return dump(
        {"type": "res", "id": rid, "ok": False, "error": {"code": code, "message": message}}
    )


__all__ = [
    "METHODS",
    "PROTOCOL_VERSION",
    "ConnectParams",
    "HistoryParams",
    "LedgerParams",
    "ListParams",
    "NoParams",
    "Request",
    "RollbackParams",
    "ApprovalParams",
    "SendParams",
    "SessionParams",
    "dump",
    "error",
    "parse_request",
    "response",
]
