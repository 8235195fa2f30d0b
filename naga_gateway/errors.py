"""Every exception the gateway raises on purpose, under one root.

``naga_gateway`` must not import ``naga_core`` (it runs sandboxed and talks
to the core only over gRPC), so :class:`GatewayError` mirrors
``naga_core.errors.NagaError`` instead of deriving from it.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""


class WebSocketError(GatewayError):
    """A peer broke RFC 6455; ``close_code`` is the close code that says how
    (1002 protocol error, 1007 bad UTF-8, 1009 too big)."""

    def __init__(self, message: str, close_code: int) -> None:
        super().__init__(message)
        self.close_code = close_code


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
    """The core refused or failed a call; ``code`` is the gRPC status name
    (``FAILED_PRECONDITION``, ``UNAVAILABLE``...)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


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
