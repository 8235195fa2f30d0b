"""The server side of the WebSocket opening handshake (RFC 6455 section 4.2);
the framing, which clients share, is :mod:`naga.websocket`, re-exported
here so the gateway reads ``ws.encode_frame`` as before.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from naga.websocket import (
    CLOSE_BAD_DATA,
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Close,
    Event,
    FrameReader,
    Message,
    Ping,
    Pong,
    accept_key,
    encode_close,
    encode_frame,
)
from naga_gateway.errors import HandshakeRefused


def check_upgrade(method: str, headers: Mapping[str, str]) -> str:
    """The accept key for a valid upgrade request; else
    :class:`HandshakeRefused` naming what is wrong. ``headers`` have
    lower-case names."""
    if method != "GET":
        raise HandshakeRefused(f"a WebSocket upgrade must be a GET, not {method}", 405)
    if headers.get("upgrade", "").lower() != "websocket":
        raise HandshakeRefused("missing 'Upgrade: websocket'", 426)
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if "upgrade" not in tokens:
        raise HandshakeRefused("'Connection' must include 'Upgrade'", 400)
    if headers.get("sec-websocket-version", "") != "13":
        raise HandshakeRefused("only WebSocket version 13 is spoken", 426)
    key = headers.get("sec-websocket-key", "")
    try:
        raw = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise HandshakeRefused("'Sec-WebSocket-Key' must be 16 bytes in base64", 400)
    return accept_key(key)


__all__ = [
    "CLOSE_BAD_DATA",
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL",
    "CLOSE_NORMAL",
    "CLOSE_POLICY",
    "CLOSE_PROTOCOL_ERROR",
    "CLOSE_TOO_BIG",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONTINUATION",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "Close",
    "Event",
    "FrameReader",
    "Message",
    "Ping",
    "Pong",
    "accept_key",
    "check_upgrade",
    "encode_close",
    "encode_frame",
]
