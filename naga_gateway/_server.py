"""The gateway's HTTP server: the console's static files and the WebSocket
upgrade, over h11 on trio, bound to loopback by default.

Browser hardening lives here: the ``Origin`` of an upgrade must be the
console's own (a page elsewhere cannot drive the owner's agent through the
owner's browser), the ``Host`` must be one the gateway serves (no DNS
rebinding), and nothing secret is ever read from a URL.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from importlib import resources

import attrs
import h11
import trio

from naga_gateway import _ws as ws
from naga_gateway._conn import Limits, Session, WebSocket
from naga_gateway._core import CorePort
from naga_gateway._hub import Hub
from naga_gateway._lanes import Lanes
from naga_gateway._settings import LaneSettings
from naga_gateway.errors import CoreCallFailed, HandshakeRefused

DEFAULT_PORT = 18789
_log = logging.getLogger("naga.gateway")
_MAX_HEAD = 16 * 1024
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
_SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; connect-src 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@attrs.frozen
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: Origins besides the console's own allowed to open a WebSocket.
    extra_origins: frozenset[str] = frozenset()
    #: A loopback connection is the owner (SPEC: loopback WebChat = owner).
    loopback_owner: bool = True
    #: Until the core's ``lanes.max_concurrent`` is known (and for good if
    #: the core cannot tell): see naga_gateway._settings.
    max_running: int = 16
    max_queued: int = 64
    #: Open TCP connections at once; more are closed at once.
    max_connections: int = 512
    #: Seconds a client has to send a whole request head.
    head_timeout: float = 10.0
    limits: Limits = attrs.field(factory=Limits)


class Gateway:
    """The gateway: lanes, event hub and HTTP server over one core."""

    def __init__(self, core: CorePort, config: GatewayConfig = GatewayConfig()) -> None:
        self.core = core
        self.config = config
        self.hub = Hub()
        self.lanes = Lanes(
            core, self.hub, max_running=config.max_running, max_queued=config.max_queued
        )
        self.lane_settings = LaneSettings(core, self.lanes)
        self.port = config.port
        self._slots = trio.CapacityLimiter(config.max_connections)
        self._static = {
            path: (resources.files("naga_gateway").joinpath("static", name).read_bytes(), ctype)
            for path, (name, ctype) in _STATIC.items()
        }

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.lanes.serve)
            # The core's lanes settings apply from the first message on.
            await nursery.start(self.lane_settings.follow)
            serve = functools.partial(
                trio.serve_tcp, self._handle, self.config.port, host=self.config.host
            )
            listeners: list[trio.SocketListener] = await nursery.start(serve)
            self.port = int(listeners[0].socket.getsockname()[1])
            nursery.start_soon(self._load_tools)
            task_status.started(self.port)

    async def _load_tools(self) -> None:
        """Learn the tools' risk levels once at start (a ``tools`` request
        refreshes them); until then a tool event counts as R4."""
        try:
            self.hub.tool_risk.update(await self.core.tool_risks())
        except CoreCallFailed as exc:
            _log.warning("tool risk levels unknown until a 'tools' request: %s", exc)

    def _allowed_hosts(self) -> set[str]:
        return {f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"}

    def _allowed_origins(self) -> set[str]:
        own = {f"http://{h}" for h in self._allowed_hosts()}
        return own | set(self.config.extra_origins)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            if self._slots.available_tokens < 1:
                return  # full: refusing one client keeps the others served
            async with self._slots:
                await self._http(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass  # the client went away or spoke broken HTTP: only it is affected
        except Exception:  # noqa: BLE001 - a bug costs one connection, never the gateway
            _log.exception("connection failed")
        finally:
            await stream.aclose()

    async def _http(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        while True:
            event: object = None
            with trio.move_on_after(self.config.head_timeout):
                event = await _next_event(conn, stream)
            if not isinstance(event, h11.Request):
                return  # closed, broken, or too slow to say what it wants
            headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
            target = event.target.decode("latin-1").split("?", 1)[0]
            method = event.method.decode()
            if self._host_refused(headers):
                await _respond(conn, stream, 421, b"unknown Host\n")
            elif target == "/ws":
                try:
                    key = self._check_ws(method, headers)
                except HandshakeRefused as exc:
                    await _respond(conn, stream, exc.status, f"{exc}\n".encode())
                    return
                await self._upgrade(conn, stream, key)
                return
            elif method not in ("GET", "HEAD") or target not in self._static:
                status = 404 if method in ("GET", "HEAD") else 405
                await _respond(conn, stream, status, b"not found\n")
            else:
                body, ctype = self._static[target]
                await _respond(conn, stream, 200, body, ctype, head=method == "HEAD")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            await _drain_body(conn, stream)
            conn.start_next_cycle()

    def _check_ws(self, method: str, headers: dict[str, str]) -> str:
        key = ws.check_upgrade(method, headers)
        origin = headers.get("origin")
        if origin is not None and origin not in self._allowed_origins():
            raise HandshakeRefused(f"origin {origin} may not connect", 403)
        return key

    def _host_refused(self, headers: dict[str, str]) -> bool:
        host = headers.get("host", "")
        if not _is_loopback(self.config.host):
            return False  # served beyond loopback: the operator chose its names
        return host not in self._allowed_hosts()

    async def _upgrade(self, conn: h11.Connection, stream: trio.SocketStream, key: str) -> None:
        await stream.send_all(
            conn.send(
                h11.InformationalResponse(
                    status_code=101,
                    headers=[
                        (b"upgrade", b"websocket"),
                        (b"connection", b"Upgrade"),
                        (b"sec-websocket-accept", key.encode()),
                    ],
                )
            )
        )
        leftover, _closed = conn.trailing_data
        sock = WebSocket(stream, bytes(leftover), self.config.limits.max_message)
        session = Session(
            sock,
            core=self.core,
            lanes=self.lanes,
            hub=self.hub,
            limits=self.config.limits,
            loopback_owner=self.config.loopback_owner and _peer_is_loopback(stream),
        )
        await session.run()


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            continue
        return event


async def _drain_body(conn: h11.Connection, stream: trio.SocketStream) -> None:
    while conn.their_state is h11.SEND_BODY:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.ConnectionClosed):
            return


async def _respond(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    body: bytes,
    ctype: str = "text/plain; charset=utf-8",
    *,
    head: bool = False,
) -> None:
    headers = [
        (b"content-type", ctype.encode()),
        (b"content-length", str(len(body)).encode()),
        *_SECURITY_HEADERS,
    ]
    data = conn.send(h11.Response(status_code=status, headers=headers))
    if not head:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _peer_is_loopback(stream: trio.SocketStream) -> bool:
    try:
        name = stream.socket.getpeername()
    except OSError:
        return False  # already gone; it will not be served anyway
    return _is_loopback(str(name[0]))


__all__ = ["DEFAULT_PORT", "Gateway", "GatewayConfig"]
