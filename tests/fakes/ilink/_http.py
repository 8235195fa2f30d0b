"""HTTP/1.1 plumbing of the fake server (h11 over trio)."""

from __future__ import annotations

from dataclasses import dataclass

import h11
import trio

#: The largest request body the fake reads (a CDN upload of a test image).
MAX_BODY = 64 << 20


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> dict[str, str]:
        from urllib.parse import parse_qs

        q = self.target.split("?", 1)[1] if "?" in self.target else ""
        return {k: v[0] for k, v in parse_qs(q, keep_blank_values=True).items()}


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


async def receive(stream: trio.SocketStream, conn: h11.Connection) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                return None
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return Request(
                method=head.method.decode(),
                target=head.target.decode(),
                headers={k.decode().lower(): v.decode() for k, v in head.headers},
                body=bytes(body),
            )
        else:
            return None


async def send(stream: trio.SocketStream, conn: h11.Connection, response: Response) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    await stream.send_all(conn.send(h11.Response(status_code=response.status, headers=headers)))
    await stream.send_all(conn.send(h11.Data(data=response.body)))
    await stream.send_all(conn.send(h11.EndOfMessage()))
