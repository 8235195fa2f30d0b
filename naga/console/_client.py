"""A small blocking client of the console protocol (docs/protocol/websocket.md)
for programs on the owner's machine: ``naga chat`` sends its turn through
the gateway with it, as the console does. It speaks the gateway's own frame
codec (:mod:`naga.websocket`) over a plain socket (client frames masked,
RFC 6455 section 5.1).

It proves the owner as the console page does: a one-time login code (from
the core, ``naga.sdk.Client.console_login``) is traded at ``POST /login``
for the owner's session cookie, which the upgrade presents::

    code = core.console_login().code
    with ConsoleClient.open("127.0.0.1", port, code=code) as gw: ...
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
from collections.abc import Iterator
from typing import Any, cast

from naga import websocket as ws
from naga.console.errors import ConsoleError
from naga.constants import CONSOLE_PROTOCOL_VERSION as PROTOCOL_VERSION

_MAX_MESSAGE = 1 << 24


class ConsoleClient:
    """One connection to the gateway's ``/ws``. Build with :meth:`open`."""

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._reader = ws.FrameReader(_MAX_MESSAGE, require_mask=False)
        self._pending: list[ws.Event] = list(self._reader.feed(leftover))
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    @classmethod
    def login(cls, host: str, port: int, code: str, *, timeout: float = 10.0) -> str:
        """Trade a one-time login code for the owner's ``Cookie`` header value."""
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request(
                "POST",
                "/login",
                body=json.dumps({"code": code}),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            body = resp.read(4096)
            cookie = resp.getheader("set-cookie") or ""
        except (OSError, http.client.HTTPException) as exc:
            raise ConsoleError(f"no gateway on {host}:{port}: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200 or not cookie:
            raise ConsoleError(f"the gateway refused the login: {_said(body)}")
        return cookie.split(";", 1)[0]

    @classmethod
    def open(
        cls,
        host: str,
        port: int,
        *,
        code: str | None = None,
        cookie: str | None = None,
        timeout: float = 10.0,
    ) -> ConsoleClient:
        """Connect, upgrade and say ``connect``; ConsoleError if anything
        fails. ``code`` logs in first (see :meth:`login`); ``cookie`` is a
        login's ``Cookie`` value. Without either the gateway refuses (it
        says how to log in)."""
        if code is not None:
            cookie = cls.login(host, port, code, timeout=timeout)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConsoleError(f"no gateway on {host}:{port}: {exc.strerror or exc}") from None
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        head = (
            f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n" + (f"Cookie: {cookie}\r\n" if cookie else "") + "\r\n"
        )
        try:
            sock.sendall(head.encode("ascii"))
            buf = b""
            while b"\r\n\r\n" not in buf and len(buf) < 16384:
                data = sock.recv(65536)
                if not data:
                    break
                buf += data
        except OSError as exc:
            sock.close()
            raise ConsoleError(f"the gateway's handshake failed: {exc}") from None
        answer, _, rest = buf.partition(b"\r\n\r\n")
        status = answer.split(b" ", 2)[1:2]
        if status != [b"101"] or ws.accept_key(key).encode() not in answer:
            sock.close()
            raise ConsoleError(f"the gateway refused the connection: {_said(rest)}")
        client = cls(sock, rest)
        client.request("connect", protocol=PROTOCOL_VERSION)
        return client

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.sendall(
                ws.encode_frame(ws.OP_CLOSE, (1000).to_bytes(2, "big"), mask=os.urandom(4))
            )
        self._sock.close()

    def __enter__(self) -> ConsoleClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a request; its ``result`` (events seen meanwhile are kept)."""
        self._next_id += 1
        rid = f"c{self._next_id}"
        self._send({"type": "req", "id": rid, "method": method, "params": params})
        while True:
            frame = self._frame()
            if frame.get("type") == "event":
                self._events.append(frame)
            elif frame.get("id") == rid:
                if not frame.get("ok"):
                    error: dict[str, Any] = frame.get("error") or {}
                    raise ConsoleError(
                        f"{method}: {error.get('message', 'refused')} ({error.get('code', '?')})"
                    )
                result: dict[str, Any] = frame.get("result") or {}
                return result

    def events(self) -> Iterator[dict[str, Any]]:
        """Server events, in order, as they come."""
        while True:
            while self._events:
                yield self._events.pop(0)
            frame = self._frame()
            if frame.get("type") == "event":
                yield frame

    def turn(self, session: str, text: str, key: str) -> Iterator[dict[str, Any]]:
        """Send one message; yield its turn's events until ``turn.final`` or
        ``turn.error`` (the acknowledgement first, as a ``turn.accepted``)."""
        ack = self.request("send", session=session, text=text, key=key)
        turn_id = ack.get("turn")
        yield {"event": "turn.accepted", "session": session, "data": ack}
        for frame in self.events():
            if frame.get("session") != session:
                continue
            data: dict[str, Any] = frame.get("data") or {}
            if turn_id and data.get("turn") not in (None, turn_id):
                continue
            yield frame
            if frame.get("event") in ("turn.final", "turn.error"):
                return

    def _send(self, obj: dict[str, Any]) -> None:
        payload = json.dumps(obj).encode("utf-8")
        try:
            self._sock.sendall(ws.encode_frame(ws.OP_TEXT, payload, mask=os.urandom(4)))
        except OSError as exc:
            raise ConsoleError(f"the gateway connection broke: {exc}") from None

    def _frame(self) -> dict[str, Any]:
        while True:
            while self._pending:
                event = self._pending.pop(0)
                if isinstance(event, ws.Message):
                    frame: dict[str, Any] = json.loads(event.data)
                    return frame
                if isinstance(event, ws.Close):
                    raise ConsoleError(f"the gateway closed the connection: {event.reason}")
                if isinstance(event, ws.Ping):
                    self._sock.sendall(ws.encode_frame(ws.OP_PONG, event.data, mask=os.urandom(4)))
            try:
                self._sock.settimeout(None)
                data = self._sock.recv(65536)
            except OSError as exc:
                raise ConsoleError(f"the gateway connection broke: {exc}") from None
            if not data:
                raise ConsoleError("the gateway closed the connection")
            self._pending.extend(self._reader.feed(data))


def _said(body: bytes) -> str:
    """A refusal's sentence: the JSON ``error`` or the plain text."""
    text = body[:1000].decode("utf-8", "replace").strip()
    try:
        obj: object = json.loads(text)
    except ValueError:
        return text or "no reason given"
    if isinstance(obj, dict):
        error = cast("dict[str, object]", obj).get("error")
        if isinstance(error, str):
            return error
    return text


__all__ = ["ConsoleClient"]
