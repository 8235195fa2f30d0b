"""RFC 6455 framing, sans I/O: frame encoding and an incremental frame
reader, for both ends of the console protocol (the gateway serves it,
``naga.console`` and the tests speak it as clients).

Naga adds no WebSocket dependency (the project's dependency set is fixed);
this module and the gateway's handshake are the whole of it. It does no I/O
so that property tests can feed it any split of a byte stream. Extensions
and subprotocols are not negotiated, so every RSV bit must be zero.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass

from naga.websocket.errors import WebSocketError

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
_DATA_OPS = frozenset({OP_TEXT, OP_BINARY})
_CONTROL_OPS = frozenset({OP_CLOSE, OP_PING, OP_PONG})

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED = 1003
CLOSE_NO_STATUS = 1005
CLOSE_BAD_DATA = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
# Codes a peer may send (RFC 6455 section 7.4): 1004-1006 and 1015 are
# reserved for reporting, never for the wire.
_SENDABLE = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014})
_MAX_CONTROL = 125


@dataclass(frozen=True, slots=True)
class Message:
    """A whole data message, its fragments joined."""

    text: bool
    data: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    data: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """The peer's close frame: ``code`` 1005 when it sent none."""

    code: int
    reason: str


Event = Message | Ping | Pong | Close


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1(key.encode("ascii") + _GUID, usedforsecurity=False).digest()
    return base64.b64encode(digest).decode("ascii")


def encode_frame(
    opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None
) -> bytes:
    """One frame. The server never masks; clients (tests, the bench) pass a
    4-byte ``mask``."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    mask_bit = 0x80 if mask is not None else 0
    n = len(payload)
    if n < 126:
        head.append(mask_bit | n)
    elif n < 1 << 16:
        head.append(mask_bit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(mask_bit | 127)
        head += struct.pack("!Q", n)
    if mask is None:
        return bytes(head) + payload
    if len(mask) != 4:
        raise ValueError("a mask is 4 bytes")
    return bytes(head) + mask + _unmask(payload, mask)


def encode_close(code: int, reason: str = "") -> bytes:
    """A server close frame; the reason is cut to fit a control frame."""
    body = struct.pack("!H", code) + reason.encode()[: _MAX_CONTROL - 2]
    return encode_frame(OP_CLOSE, _utf8_prefix(body))


def _utf8_prefix(body: bytes) -> bytes:
    # Cutting the reason may split a character; drop the partial one.
    reason = body[2:]
    while reason:
        try:
            reason.decode()
            break
        except UnicodeDecodeError:
            reason = reason[:-1]
    return body[:2] + reason


def _unmask(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if n == 0:
        return b""
    # One big-integer XOR is far faster in CPython than a byte loop.
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


class FrameReader:
    """Turns received bytes into events, whatever the split.

    ``max_message`` bounds a whole message (all its fragments); a longer one
    is refused with close code 1009 as soon as its header says so, before
    its body is buffered. ``require_mask`` is the server's rule that every
    client frame be masked (RFC 6455 section 5.1).
    """

    def __init__(self, max_message: int, *, require_mask: bool = True) -> None:
        self._max = max_message
        self._require_mask = require_mask
        self._buf = bytearray()
        self._parts: list[bytes] = []
        self._size = 0
        self._text: bool | None = None

    def feed(self, data: bytes) -> list[Event]:
        """Every event completed by ``data``; raises :class:`WebSocketError`
        on a protocol violation (the connection must then close)."""
        self._buf += data
        events: list[Event] = []
        while (step := self._next()) is not None:
            events.extend(step)
        return events

    def _next(self) -> list[Event] | None:
        """The events of the next whole frame (none for a non-final
        fragment); ``None`` until the buffer holds one."""
        buf = self._buf
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        fin = bool(b0 & 0x80)
        if b0 & 0x70:
            raise WebSocketError("RSV bits set but no extension was agreed", CLOSE_PROTOCOL_ERROR)
        opcode = b0 & 0x0F
        masked = bool(b1 & 0x80)
        length = b1 & 0x7F
        pos = 2
        if length == 126:
            if len(buf) < 4:
                return None
            (length,) = struct.unpack_from("!H", buf, 2)
            pos = 4
        elif length == 127:
            if len(buf) < 10:
                return None
            (length,) = struct.unpack_from("!Q", buf, 2)
            if length >> 63:
                raise WebSocketError("frame length has its top bit set", CLOSE_PROTOCOL_ERROR)
            pos = 10
        self._check_header(opcode, fin, masked, length)
        mask = b""
        if masked:
            if len(buf) < pos + 4:
                return None
            mask = bytes(buf[pos : pos + 4])
            pos += 4
        if len(buf) < pos + length:
            return None
        payload = bytes(buf[pos : pos + length])
        del buf[: pos + length]
        if masked:
            payload = _unmask(payload, mask)
        return self._complete(opcode, fin, payload)

    def _check_header(self, opcode: int, fin: bool, masked: bool, length: int) -> None:
        if self._require_mask and not masked:
            raise WebSocketError("client frames must be masked", CLOSE_PROTOCOL_ERROR)
        if opcode in _CONTROL_OPS:
            if not fin:
                raise WebSocketError("a control frame cannot be fragmented", CLOSE_PROTOCOL_ERROR)
            if length > _MAX_CONTROL:
                raise WebSocketError(
                    f"a control frame carries at most {_MAX_CONTROL} bytes", CLOSE_PROTOCOL_ERROR
                )
            return
        if opcode == OP_CONTINUATION:
            if self._text is None:
                raise WebSocketError(
                    "continuation frame with no message started", CLOSE_PROTOCOL_ERROR
                )
        elif opcode in _DATA_OPS:
            if self._text is not None:
                raise WebSocketError(
                    "new message started before the last one ended", CLOSE_PROTOCOL_ERROR
                )
        else:
            raise WebSocketError(f"unknown opcode {opcode:#x}", CLOSE_PROTOCOL_ERROR)
        if self._size + length > self._max:
            raise WebSocketError(f"message larger than the {self._max}-byte limit", CLOSE_TOO_BIG)

    def _complete(self, opcode: int, fin: bool, payload: bytes) -> list[Event]:
        if opcode == OP_PING:
            return [Ping(payload)]
        if opcode == OP_PONG:
            return [Pong(payload)]
        if opcode == OP_CLOSE:
            return [_parse_close(payload)]
        if opcode != OP_CONTINUATION:
            self._text = opcode == OP_TEXT
        self._parts.append(payload)
        self._size += len(payload)
        if not fin:
            return []
        data = b"".join(self._parts)
        text = bool(self._text)
        self._parts, self._size, self._text = [], 0, None
        if text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise WebSocketError("text message is not UTF-8", CLOSE_BAD_DATA) from None
        return [Message(text, data)]


def _parse_close(payload: bytes) -> Close:
    if not payload:
        return Close(CLOSE_NO_STATUS, "")
    if len(payload) == 1:
        raise WebSocketError("close frame with a 1-byte body", CLOSE_PROTOCOL_ERROR)
    (code,) = struct.unpack_from("!H", payload)
    if code not in _SENDABLE and not 3000 <= code <= 4999:
        raise WebSocketError(f"close code {code} may not be sent", CLOSE_PROTOCOL_ERROR)
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise WebSocketError("close reason is not UTF-8", CLOSE_BAD_DATA) from None
    return Close(code, reason)


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
    "encode_close",
    "encode_frame",
]
