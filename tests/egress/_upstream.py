"""Loopback listeners standing in for real hosts: each answers any HTTP
request with its own name, and counts the connections it accepted."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio


@dataclass
class Upstream:
    name: str
    port: int = 0
    accepted: int = 0
    requests: list[bytes] = field(default_factory=list[bytes])

    async def serve(self, *, task_status: trio.TaskStatus[Upstream]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._answer, listeners)
            task_status.started(self)
            await trio.sleep_forever()

    async def _answer(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(head)
            body = f"hello from {self.name}".encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
