"""A small WebSocket client for the gateway's tests and bench, on trio and
the gateway's own frame codec (the client side masks, as RFC 6455 says)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import trio

from naga_gateway import _ws as ws


class Closed(Exception):
    """The server closed the connection; ``code`` and ``reason`` say why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed {code}: {reason}")
        self.code = code
        self.reason = reason


class WsClient:
    def __init__(self, stream: trio.SocketStream, leftover: bytes) -> None:
        self.stream = stream
        self._reader = ws.FrameReader(1 << 24, require_mask=False)
        self._events: list[ws.Event] = list(self._reader.feed(leftover))
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.responses: dict[str, dict[str, Any]] = {}

    @classmethod
    async def open(
        cls,
        port: int,
        *,
        origin: str | None = None,
        extra: bytes = b"",
        cookie: str | None = None,
    ) -> WsClient:
        """Upgrade ``/ws``; ``cookie`` is a ``Cookie`` header's value (the
        owner's, from tests.gateway._login)."""
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        head = (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        )
        if origin is not None:
            head += f"Origin: {origin}\r\n"
        if cookie is not None:
            head += f"Cookie: {cookie}\r\n"
        await stream.send_all(head.encode() + extra + b"\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = await stream.receive_some(65536)
            if not data:
                raise Closed(0, f"no handshake answer: {buf!r}")
            buf += data
        head_bytes, rest = buf.split(b"\r\n\r\n", 1)
        status = head_bytes.split(b" ", 2)[1]
        if status != b"101":
            raise Closed(int(status), head_bytes.decode() + rest.decode())
        assert ws.accept_key(key).encode() in head_bytes
        return cls(stream, rest)

    async def send_raw(self, payload: bytes, opcode: int = ws.OP_TEXT, fin: bool = True) -> None:
        await self.stream.send_all(ws.encode_frame(opcode, payload, fin=fin, mask=os.urandom(4)))

    async def send(self, obj: Any) -> None:
        await self.send_raw(json.dumps(obj).encode())

    async def recv(self) -> dict[str, Any]:
        """The next JSON frame; Closed when the server closed."""
        while True:
            while self._events:
                event = self._events.pop(0)
                if isinstance(event, ws.Message):
                    frame: dict[str, Any] = json.loads(event.data)
                    if frame.get("type") == "event":
                        self.events.append(frame)
                    elif frame.get("id") is not None:
                        self.responses[frame["id"]] = frame
                    return frame
                if isinstance(event, ws.Close):
                    raise Closed(event.code, event.reason)
            data = await self.stream.receive_some(65536)
            if not data:
                raise Closed(1006, "connection dropped")
            self._events.extend(self._reader.feed(data))

    async def request(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a request and read until its response (events seen meanwhile
        are kept in ``events``)."""
        self._next_id += 1
        rid = f"r{self._next_id}"
        await self.send({"type": "req", "id": rid, "method": method, "params": params})
        return await self.response(rid)

    async def start(self, method: str, **params: Any) -> str:
        self._next_id += 1
        rid = f"r{self._next_id}"
        await self.send({"type": "req", "id": rid, "method": method, "params": params})
        return rid

    async def response(self, rid: str) -> dict[str, Any]:
        while rid not in self.responses:
            await self.recv()
        return self.responses.pop(rid)

    async def until_event(
        self, kind: str | tuple[str, ...], session: str | None = None
    ) -> dict[str, Any]:
        """The next event of ``kind`` (or of any of the kinds) for ``session``."""
        kinds = (kind,) if isinstance(kind, str) else kind
        seen = len(self.events)
        for frame in self.events[:seen]:
            if frame["event"] in kinds and session in (None, frame["session"]):
                self.events.remove(frame)
                return frame
        while True:
            frame = await self.recv()
            is_it = frame.get("type") == "event" and frame["event"] in kinds
            if is_it and session in (None, frame["session"]):
                self.events.remove(frame)
                return frame

    async def connect(self, **params: Any) -> dict[str, Any]:
        resp = await self.request("connect", protocol=1, **params)
        assert resp["ok"], resp
        return resp["result"]

    async def aclose(self) -> None:
        await self.stream.aclose()
