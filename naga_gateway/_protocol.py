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

from naga_gateway.errors import FrameInvalid

PROTOCOL_VERSION = 1

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

_SESSION = r"^[a-z0-9][a-z0-9_.:-]{0,127}$"
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
    # A remote peer's name on this channel (loopback is always the owner).
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")] | None = None
    resume: Resume | None = None


class SendParams(_Strict):
    session: Session
    text: Annotated[str, Field(min_length=1, max_length=32000)]
    key: Annotated[str, Field(min_length=1, max_length=128)]
    #: None: the core's ``lanes.queue_mode`` setting.
    mode: Literal["followup", "collect", "steer", "interrupt"] | None = None


class SessionParams(_Strict):
    session: Session


class HistoryParams(_Strict):
    session: Session
    limit: Annotated[int, Field(ge=0, le=1000)] = 0


class ListParams(_Strict):
    limit: Annotated[int, Field(ge=0, le=1000)] = 0


class RollbackParams(_Strict):
    to_seq: Annotated[int, Field(ge=-1)]


class NoParams(_Strict):
    pass


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
    "ListParams",
    "NoParams",
    "Request",
    "RollbackParams",
    "SendParams",
    "SessionParams",
    "dump",
    "error",
    "parse_request",
    "response",
]
