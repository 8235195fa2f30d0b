"""Every exception the gateway raises on purpose, under one root.

``naga_gateway`` must not import ``naga_core`` (it runs sandboxed and talks
to the core only over gRPC), so :class:`GatewayError` mirrors
``naga_core.errors.NagaError`` instead of deriving from it.
"""

from __future__ import annotations

# The framing's error: the framing is shared with clients (naga.websocket).
from naga.v1.status_pb2 import Refusal
from naga.websocket import WebSocketError


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""


class HandshakeRefused(GatewayError):
    """An HTTP request that cannot become a WebSocket; ``status`` is the
    HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class FrameInvalid(GatewayError):
    """A protocol frame that is not JSON, or breaks the frame schema;
    ``code`` is the error code sent back (docs/protocol/websocket.md)."""

    def __init__(self, message: str, code: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


class CoreCallFailed(GatewayError):
    """The core refused or failed a call. Decide on ``refusal`` (the core's
    ``naga.v1.Refusal``), ``unavailable`` (the core did not answer or is
    stopping: a retry may reach it) and ``final`` (asking again cannot help:
    not allowed, not served, no such thing); ``code``, the gRPC status name,
    is for people (the console shows it), never to branch on."""

    def __init__(
        self,
        message: str,
        code: str,
        *,
        refusal: Refusal.ValueType = Refusal.REFUSAL_UNSPECIFIED,
        unavailable: bool = False,
        final: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.refusal = refusal
        self.unavailable = unavailable
        self.final = final


class LaneRefused(GatewayError):
    """A message the lanes cannot take (queue full, bad mode)."""


__all__ = [
    "CoreCallFailed",
    "FrameInvalid",
    "GatewayError",
    "HandshakeRefused",
    "LaneRefused",
    "WebSocketError",
]
