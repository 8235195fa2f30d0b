"""Frames on the plugin wire: a 4-byte big-endian length, then one message.

:class:`FrameReader` is incremental (feed it what a socket gave, take whole
frames out), so the core's trio side and the SDK's blocking side share it.
A length over the limit is refused as soon as the 4 header bytes are in,
before any body is buffered.
"""

from __future__ import annotations

import struct
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from naga.constants import PLUGIN_MAX_FRAME_BYTES
from naga.plugin.errors import FrameError
from naga.v1 import plugin_pb2 as pb

HEADER = struct.Struct(">I")
M = TypeVar("M", bound=Message)


def encode_frame(message: Message, *, limit: int = PLUGIN_MAX_FRAME_BYTES) -> bytes:
    """The frame for ``message``; :class:`FrameError` if it exceeds ``limit``."""
    body = message.SerializeToString()
    if len(body) > limit:
        raise FrameError(
            f"a {type(message).__name__} frame of {len(body)} bytes exceeds the {limit}-byte limit"
        )
    return HEADER.pack(len(body)) + body


class FrameReader:
    """Splits a byte stream into frame bodies."""

    def __init__(self, *, limit: int = PLUGIN_MAX_FRAME_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._want: int | None = None  # the current frame's body size, once known

    def feed(self, data: bytes) -> None:
        self._buffer += data
        self._check_header()

    def _check_header(self) -> None:
        if self._want is None and len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self._limit:
                raise FrameError(f"a frame announces {size} bytes; the limit is {self._limit}")
            self._want = size

    def next_body(self) -> bytes | None:
        """The next whole frame's body, or None until more bytes arrive."""
        if self._want is None or len(self._buffer) < HEADER.size + self._want:
            return None
        end = HEADER.size + self._want
        body = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        self._want = None
        self._check_header()
        return body

    @property
    def pending(self) -> int:
        """Bytes received that are not yet a whole frame (a cut-off tail at EOF)."""
        return len(self._buffer)


def decode_from_plugin(body: bytes) -> pb.PluginToCore:
    """A frame body from a plugin; :class:`FrameError` unless it is a
    PluginToCore carrying one message."""
    return _decode(pb.PluginToCore(), body)


def decode_from_core(body: bytes) -> pb.CoreToPlugin:
    return _decode(pb.CoreToPlugin(), body)


def _decode(message: M, body: bytes) -> M:
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        name = type(message).__name__
        raise FrameError(f"a frame is not a valid {name} message: {exc}") from None
    if message.WhichOneof("frame") is None:
        raise FrameError(f"a {type(message).__name__} frame carries no message")
    return message


__all__ = ["HEADER", "FrameReader", "decode_from_core", "decode_from_plugin", "encode_frame"]
