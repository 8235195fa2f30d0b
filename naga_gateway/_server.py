"""The gateway's HTTP server: the console's static files and the WebSocket
upgrade, over h11 on trio, bound to loopback by default.

Browser hardening lives here: the ``Origin`` of an upgrade or a login must
be the console's own (a page elsewhere cannot drive the owner's agent
through the owner's browser), the ``Host`` must be one the gateway serves
(no DNS rebinding), and nothing secret is ever read from a URL.

The owner is proven, never inferred from the address (naga_gateway._owner):
``POST /login`` trades a one-time code for the owner's session cookie,
``GET /session`` says whether a request carries it, ``POST /logout`` drops
it, and a WebSocket upgrade without it is refused with 401 and a sentence
saying how to log in (or, where the operator admits guests, is at most a
guest).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import socket
import time

import attrs
import h11
import trio

from naga_gateway import _owner as owner
from naga_gateway import _static as static
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
_MAX_LOGIN_BODY = 1024
_JSON = "application/json"
_SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; connect-src 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


@attrs.frozen
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: A listening TCP socket to serve (the core binds the console's socket
    #: and hands it over: the sandboxed gateway may make none of its own);
    #: None: bind ``host``:``port`` here (a gateway run outside the core).
    listen_fd: int | None = None
    #: Origins besides the console's own allowed to open a WebSocket.
    extra_origins: frozenset[str] = frozenset()
    #: A connection without the owner's proof (the session cookie) is
    #: refused (False), or admitted as at most a guest under the name it
    #: claims (True). An address proves nothing, loopback included.
    admit_guests: bool = False
    #: Messages of one session not yet ended (the cap on turns running at
    #: once, ``lanes.max_concurrent``, is the core's).
    max_queued: int = 64
    #: Messages not yet ended across all sessions: each holds one of the
    #: core's Run streams (naga.constants.MAX_RUN_STREAMS, 256; 32 stay for
    #: other callers) from its acknowledgement to its end; beyond, ``busy``.
    max_open: int = 224
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
        self.lanes = Lanes(core, self.hub, max_queued=config.max_queued, max_open=config.max_open)
        self.lane_settings = LaneSettings(core, self.lanes)
        self.port = config.port
        self._slots = trio.CapacityLimiter(config.max_connections)
        self._static = static.load()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.lanes.serve)
            # The core's lanes settings apply from the first message on.
            await nursery.start(self.lane_settings.follow)
            listeners: list[trio.SocketListener]
            if self.config.listen_fd is not None:
                listeners = [_handed_listener(self.config.listen_fd)]
                serve = functools.partial(trio.serve_listeners, self._handle, listeners)
            else:
                serve = functools.partial(
                    trio.serve_tcp, self._handle, self.config.port, host=self.config.host
                )
            listeners = await nursery.start(serve)
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
            target, _, query = event.target.decode("latin-1").partition("?")
            method = event.method.decode()
            if self._host_refused(headers):
                await _respond(conn, stream, 421, b"unknown Host\n")
            elif target == "/ws":
                try:
                    key = self._check_ws(method, headers)
                    proof = await owner.check(self.core, headers, self.port)
                except HandshakeRefused as exc:
                    await _respond(conn, stream, exc.status, f"{exc}\n".encode())
                    return
                if not proof.owner and not self.config.admit_guests:
                    await _respond(conn, stream, 401, f"{proof.refusal}\n".encode())
                    return
                await self._upgrade(conn, stream, key, proof)
                return
            elif target in ("/login", "/logout", "/session"):
                await self._account(conn, stream, method, target, headers)
            elif method not in ("GET", "HEAD") or target not in self._static:
                status = 404 if method in ("GET", "HEAD") else 405
                await _respond(conn, stream, status, b"not found\n")
            else:
                found = self._static[target]
                cache = [(b"cache-control", found.cache_control(query))]
                await _respond(
                    conn, stream, 200, found.body, found.ctype, head=method == "HEAD", extra=cache
                )
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            await _drain_body(conn, stream)
            conn.start_next_cycle()

    def _check_ws(self, method: str, headers: dict[str, str]) -> str:
        key = ws.check_upgrade(method, headers)
        self._check_origin(headers)
        return key

    def _check_origin(self, headers: dict[str, str]) -> None:
        # No Origin: not a browser (browsers send one on every upgrade and
        # POST), so no page is driving it; such a client proves itself with
        # the cookie like any other.
        origin = headers.get("origin")
        if origin is not None and origin not in self._allowed_origins():
            raise HandshakeRefused(f"origin {origin} may not connect", 403)

    async def _account(
        self,
        conn: h11.Connection,
        stream: trio.SocketStream,
        method: str,
        target: str,
        headers: dict[str, str],
    ) -> None:
        """``POST /login``, ``POST /logout`` and ``GET /session``: a JSON
        answer (``owner``, and ``error`` when refused)."""
        cookie: list[tuple[bytes, bytes]] = []
        want = "GET" if target == "/session" else "POST"
        try:
            if method != want:
                status, answer = 405, {"owner": False, "error": f"{target} takes {want}"}
            elif target == "/session":
                proof = await owner.check(self.core, headers, self.port)
                status = 200 if proof.owner else 401
                answer = {"owner": proof.owner, **({} if proof.owner else {"error": proof.refusal})}
            else:
                self._check_origin(headers)
                value = (
                    await self._login(conn, stream, headers)
                    if target == "/login"
                    else owner.cleared_cookie(self.port)
                )
                cookie = [(b"set-cookie", value)]
                status, answer = 200, {"owner": target == "/login"}
        except HandshakeRefused as exc:
            status, answer = exc.status, {"owner": False, "error": str(exc)}
        body = json.dumps(answer).encode()
        await _respond(conn, stream, status, body, _JSON, extra=cookie)

    async def _login(
        self, conn: h11.Connection, stream: trio.SocketStream, headers: dict[str, str]
    ) -> bytes:
        """The session cookie for the login code in the request's body."""
        # JSON only: a cross-site form cannot send it without a preflight.
        if headers.get("content-type", "").split(";")[0].strip() != _JSON:
            raise HandshakeRefused(f"/login takes {_JSON}", 415)
        body = await _read_body(conn, stream, _MAX_LOGIN_BODY)
        done = await owner.redeem(self.core, owner.login_code(body), time.time_ns())
        return owner.session_cookie(self.port, done.session, done.max_age_s)

    def _host_refused(self, headers: dict[str, str]) -> bool:
        host = headers.get("host", "")
        if not _is_loopback(self.config.host):
            return False  # served beyond loopback: the operator chose its names
        return host not in self._allowed_hosts()

    async def _upgrade(
        self, conn: h11.Connection, stream: trio.SocketStream, key: str, proof: owner.Proof
    ) -> None:
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
            owner=proof.owner,
            owner_session=proof.session,
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


async def _read_body(conn: h11.Connection, stream: trio.SocketStream, limit: int) -> bytes:
    """A request's whole body, at most ``limit`` bytes (413 past it)."""
    body = bytearray()
    while conn.their_state is h11.SEND_BODY:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > limit:
                raise HandshakeRefused(f"a body of at most {limit} bytes", 413)
        elif isinstance(event, h11.ConnectionClosed):
            break
    return bytes(body)


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
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    extra = extra or []
    headers = [
        (b"content-type", ctype.encode()),
        (b"content-length", str(len(body)).encode()),
        *_SECURITY_HEADERS,
        # Nothing is stored but a versioned static file (naga_gateway._static).
        *(
            []
            if any(k == b"cache-control" for k, _ in extra)
            else [(b"cache-control", static.NO_STORE)]
        ),
        *extra,
    ]
    data = conn.send(h11.Response(status_code=status, headers=headers))
    if not head:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)


def _handed_listener(fd: int) -> trio.SocketListener:
    """The listening socket the core handed over, as trio's listener (the
    descriptor becomes the listener's: closing it closes ``fd``)."""
    sock = socket.socket(fileno=fd)
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


__all__ = ["DEFAULT_PORT", "Gateway", "GatewayConfig"]
