"""The plugin's end of the wire: blocking frame I/O on the inherited socket.

The main thread reads; tool threads and the main thread write, so sends
are serialized by a lock (a frame is never interleaved with another).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

from naga.plugin import FrameReader, decode_from_core, encode_frame
from naga.plugin.errors import FrameError
from naga.v1 import plugin_pb2 as pb

_RECV_BYTES = 1 << 16


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._reader = FrameReader()

    @classmethod
    def inherited(cls, fd: int) -> Connection:
        """The socket the core passed at launch, by descriptor number."""
        return cls(socket.socket(fileno=fd))

    def send(self, frame: pb.PluginToCore) -> None:
        data = encode_frame(frame)
        with self._send_lock:
            self._sock.sendall(data)

    def frames(self) -> Iterator[pb.CoreToPlugin]:
        """Frames from the core until it closes its end. Raises FrameError on
        a malformed frame (the core never sends one; the worker then exits)."""
        while True:
            body = self._reader.next_body()
            if body is not None:
                yield decode_from_core(body)
                continue
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                if self._reader.pending:
                    raise FrameError("the core's last frame was cut short at EOF")
                return
            self._reader.feed(data)

    def close(self) -> None:
        self._sock.close()


__all__ = ["Connection"]
