"""Why the egress proxy refused a connection: one class, a reason enum."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError


class RefusalReason(enum.Enum):
    #: The request was not ``CONNECT host:port HTTP/1.x`` with a sane head.
    BAD_REQUEST = "bad_request"
    #: The host is not one the plugin's manifest declares (and the owner enabled).
    HOST_NOT_ALLOWED = "host_not_allowed"
    #: The host is declared, but not on this port.
    PORT_NOT_ALLOWED = "port_not_allowed"
    #: The name resolved only to addresses a plugin may never reach
    #: (loopback, private, link-local, multicast, reserved, unspecified).
    ADDRESS_FORBIDDEN = "address_forbidden"
    #: The name did not resolve.
    RESOLVE_FAILED = "resolve_failed"
    #: Every allowed address refused or timed out.
    CONNECT_FAILED = "connect_failed"
    #: The plugin already holds as many connections as it may.
    TOO_MANY_CONNECTIONS = "too_many_connections"


#: The HTTP status the proxy answers each refusal with.
STATUS = {
    RefusalReason.BAD_REQUEST: 400,
    RefusalReason.HOST_NOT_ALLOWED: 403,
    RefusalReason.PORT_NOT_ALLOWED: 403,
    RefusalReason.ADDRESS_FORBIDDEN: 403,
    RefusalReason.RESOLVE_FAILED: 502,
    RefusalReason.CONNECT_FAILED: 502,
    RefusalReason.TOO_MANY_CONNECTIONS: 429,
}


class EgressError(NagaError):
    """Root of the egress proxy's errors."""


class EgressRefused(EgressError):
    """A connection the proxy will not make, and why."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(f"egress refused ({reason.value}): {detail}")
        self.reason = reason
        self.detail = detail


__all__ = ["STATUS", "EgressError", "EgressRefused", "RefusalReason"]
