"""The launcher-child handshake on the wire: length-prefixed
``naga.v1.sandbox_pb2`` messages on pipes, and the layer names.

Each message is a 4-byte big-endian length and the serialized bytes. The
parent reads with a deadline (a child that never answers must not hang the
supervisor); the child reads its spec blocking, since the parent has written
it in full before it waits.
"""

from __future__ import annotations

import enum
import os
import select
import struct
import time
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from naga.v1 import sandbox_pb2
from sandbox._policy import Action, Compare, SeccompPolicy
from sandbox.errors import ProtocolError

#: The largest handshake message either side accepts.
MAX_MESSAGE_BYTES = 1 << 20
_HEADER = struct.Struct(">I")

M = TypeVar("M", bound=Message)


class Layer(enum.Enum):
    """An isolation layer, in the order the child applies them."""

    RLIMITS = "rlimits"
    NO_NEW_PRIVS = "no_new_privs"
    USER_NAMESPACE = "user_namespace"
    NET_NAMESPACE = "net_namespace"
    MOUNT_NAMESPACE = "mount_namespace"
    CAPABILITIES = "capabilities"
    LANDLOCK_FS = "landlock_fs"
    LANDLOCK_NET = "landlock_net"
    LANDLOCK_SCOPE = "landlock_scope"
    TARGET = "target"
    SECCOMP = "seccomp"
    SECCOMP_TSYNC = "seccomp_tsync"

    def to_proto(self) -> sandbox_pb2.SandboxLayer.ValueType:
        return sandbox_pb2.SandboxLayer.Value("SANDBOX_LAYER_" + self.name)

    @classmethod
    def from_proto(cls, value: sandbox_pb2.SandboxLayer.ValueType) -> Layer | None:
        name = sandbox_pb2.SandboxLayer.Name(value).removeprefix("SANDBOX_LAYER_")
        return cls.__members__.get(name)


_ACTIONS = {
    Action.ALLOW: sandbox_pb2.SECCOMP_ACTION_ALLOW,
    Action.ERRNO: sandbox_pb2.SECCOMP_ACTION_ERRNO,
    Action.KILL_PROCESS: sandbox_pb2.SECCOMP_ACTION_KILL_PROCESS,
}
_COMPARES = {
    Compare.EQ: sandbox_pb2.SECCOMP_COMPARE_EQ,
    Compare.NE: sandbox_pb2.SECCOMP_COMPARE_NE,
    Compare.MASKED_EQ: sandbox_pb2.SECCOMP_COMPARE_MASKED_EQ,
}


def seccomp_to_proto(policy: SeccompPolicy, *, tsync: bool) -> sandbox_pb2.SeccompSpec:
    spec = sandbox_pb2.SeccompSpec(default_errno=policy.default_errno, tsync=tsync)
    for rule in policy.rules:
        spec.rules.append(
            sandbox_pb2.SeccompRule(
                syscall=rule.syscall,
                action=_ACTIONS[rule.action],
                errno=rule.errno,
                args=[
                    sandbox_pb2.SeccompArg(
                        index=a.index,
                        op=_COMPARES[a.op],
                        value=a.value,
                        mask=a.mask,
                        own_pid=a.own_pid,
                    )
                    for a in rule.args
                ],
            )
        )
    return spec


def write_message(fd: int, message: Message) -> None:
    data = message.SerializeToString()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"handshake message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    """``n`` bytes, or ``None`` at end of file before the first byte."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no handshake message within the deadline ({got}/{n} bytes)")
        chunk = os.read(fd, n - got)
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"handshake message cut short after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(fd: int, message: M, *, deadline: float | None = None) -> M | None:
    """Fill ``message`` from the next frame on ``fd``; ``None`` at end of file.

    Raises ``TimeoutError`` past ``deadline`` (a ``time.monotonic()`` value)
    and :class:`ProtocolError` on a malformed frame.
    """
    header = _read_exactly(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"handshake frame announces {size} bytes (limit {MAX_MESSAGE_BYTES})")
    body = _read_exactly(fd, size, deadline) if size else b""
    if body is None:
        raise ProtocolError("handshake frame has a header but no body")
    try:
        message.ParseFromString(body)
    except DecodeError as e:
        raise ProtocolError(f"handshake message does not parse: {e}") from e
    return message
