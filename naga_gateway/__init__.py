"""naga-gateway: the sandboxed access plane (SPEC section 4, L0.5).

It serves the WebChat console and a versioned WebSocket protocol
(docs/protocol/websocket.md) on 127.0.0.1:18789, derives each peer's trust,
shows it only what the trust policy (``naga.policy``) allows, and runs
messages through per-session lanes into the core's TurnService. It talks to
the core only over gRPC (:class:`GrpcCore`), never by importing naga_core.

    core = GrpcCore(socket, authorization)
    await Gateway(core, GatewayConfig(port=18789)).serve()
"""

from naga_gateway import errors
from naga_gateway._conn import Limits
from naga_gateway._core import CorePort, GrpcCore, OnEvent, OnLedgerEvent
from naga_gateway._hub import Hub, Peer
from naga_gateway._lanes import Ack, Inbound, Lanes, Mode, Ticket
from naga_gateway._owner import CODE_REFUSED, LOGIN_COMMAND, NOT_LOGGED_IN, SESSION_ENDED
from naga_gateway._protocol import PROTOCOL_VERSION
from naga_gateway._server import DEFAULT_PORT, Gateway, GatewayConfig
from naga_gateway._settings import LaneSettings

__all__ = [
    "CODE_REFUSED",
    "LOGIN_COMMAND",
    "NOT_LOGGED_IN",
    "SESSION_ENDED",
    "DEFAULT_PORT",
    "PROTOCOL_VERSION",
    "Ack",
    "CorePort",
    "Gateway",
    "GatewayConfig",
    "GrpcCore",
    "Hub",
    "Inbound",
    "LaneSettings",
    "Lanes",
    "Limits",
    "Mode",
    "OnEvent",
    "OnLedgerEvent",
    "Peer",
    "Ticket",
    "errors",
]
