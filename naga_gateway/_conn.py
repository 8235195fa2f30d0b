"""One WebSocket client: frames in and out over a trio stream, the connect
handshake, the limits, the dispatch of requests (to naga_gateway._methods),
and the event pump.

A misbehaving client costs only its own connection: a bad frame gets an
error frame naming the problem, a protocol violation or a flood closes the
connection with a close code that says why, and nothing here can raise into
the server's other connections.
"""

from __future__ import annotations

import secrets
from typing import Any

import attrs
import trio

from naga.trust import TrustLevel
from naga_gateway import _protocol as p
from naga_gateway import _ws as ws
from naga_gateway._core import CorePort
from naga_gateway._hub import Hub, Peer, Stream
from naga_gateway._lanes import Inbound, Lanes, Ticket
from naga_gateway._methods import Methods
from naga_gateway.errors import CoreCallFailed, FrameInvalid, LaneRefused, WebSocketError


@attrs.frozen
class Limits:
    """Per-connection limits (docs/protocol/websocket.md, "Limits")."""

    #: A message of MAX_MESSAGE_BYTES of text, JSON-escaped, fits.
    max_message: int = 8 * 1024 * 1024
    #: Requests per second a client may sustain, and its burst.
    rate: float = 50.0
    burst: int = 100
    #: Requests refused for the rate before the connection is closed.
    flood_strikes: int = 50
    #: Requests one client may have in flight at once.
    max_inflight: int = 64
    #: Seconds a new connection has to send ``connect``.
    connect_timeout: float = 10.0


class WebSocket:
    """A server-side WebSocket over an upgraded trio stream."""

    def __init__(self, stream: trio.abc.Stream, leftover: bytes, max_message: int) -> None:
        self._stream = stream
        self._reader = ws.FrameReader(max_message)
        self._pending: list[ws.Event] = []
        self._leftover = leftover
        self._send_lock = trio.Lock()
        self.closed = False

    async def receive(self) -> bytes | None:
        """The next data message; None once the peer closed. Pings are
        answered here."""
        while True:
            while self._pending:
                event = self._pending.pop(0)
                if isinstance(event, ws.Message):
                    return event.data
                if isinstance(event, ws.Ping):
                    await self._send_raw(ws.encode_frame(ws.OP_PONG, event.data))
                elif isinstance(event, ws.Close):
                    code = ws.CLOSE_NORMAL if event.code == 1005 else event.code
                    await self.close(code, "")
                    return None
            try:
                data = self._leftover or await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""  # reset by the peer, or closed by our own close()
            self._leftover = b""
            if not data:
                self.closed = True
                return None
            self._pending.extend(self._reader.feed(bytes(data)))

    async def send_text(self, data: bytes) -> None:
        await self._send_raw(ws.encode_frame(ws.OP_TEXT, data))

    async def send_texts(self, messages: list[bytes]) -> None:
        """Several text messages in one write (a stream's backlog: with many
        owner tabs every event goes to each, and a write per event was the
        gateway's cost)."""
        await self._send_raw(b"".join(ws.encode_frame(ws.OP_TEXT, m) for m in messages))

    async def _send_raw(self, frame: bytes) -> None:
        if self.closed:
            return
        async with self._send_lock:
            try:
                await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        await self._send_raw(ws.encode_close(code, reason))
        self.closed = True
        await self._stream.aclose()


class Session:
    """The protocol over one WebSocket."""

    def __init__(
        self,
        sock: WebSocket,
        *,
        core: CorePort,
        lanes: Lanes,
        hub: Hub,
        limits: Limits,
        owner: bool,
        owner_session: str = "",
    ) -> None:
        """``owner``: the upgrade carried the owner's proof (the session
        cookie); without it the peer is at most a guest. ``owner_session``:
        that cookie's value, passed with each owner change for the core to
        check again (naga_gateway._admin)."""
        self._ws = sock
        self._core = core
        self._lanes = lanes
        self._hub = hub
        self._limits = limits
        self._owner = owner
        self._owner_session = owner_session if owner else ""
        self._peer: Peer | None = None
        self._methods: Methods | None = None  # built by connect, with the peer
        self._stream: Stream | None = None
        self._tokens = float(limits.burst)
        self._stamp = trio.current_time()
        self._strikes = 0
        self._inflight = 0

    async def _receive(self) -> bytes | None:
        """The next message; None once closed, by the peer or by us for a
        protocol violation (closed with the code that names it)."""
        try:
            return await self._ws.receive()
        except WebSocketError as exc:
            await self._ws.close(exc.close_code, str(exc))
            return None

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if not await self._handshake(nursery):
                nursery.cancel_scope.cancel()
                return
            while (raw := await self._receive()) is not None:
                if not self._admit():
                    if self._strikes >= self._limits.flood_strikes:
                        await self._ws.close(ws.CLOSE_POLICY, "too many requests")
                        break
                    await self._ws.send_text(
                        p.error(_id_of(raw), p.RATE_LIMITED, "too many requests; slow down")
                    )
                    continue
                await self._dispatch(raw, nursery)
            nursery.cancel_scope.cancel()

    def _admit(self) -> bool:
        now = trio.current_time()
        lim = self._limits
        self._tokens = min(lim.burst, self._tokens + (now - self._stamp) * lim.rate)
        self._stamp = now
        if self._tokens < 1:
            self._strikes += 1
            return False
        self._tokens -= 1
        return True

    async def _handshake(self, nursery: trio.Nursery) -> bool:
        """Wait for ``connect``; False when the connection ended instead."""
        with trio.move_on_after(self._limits.connect_timeout):
            while (raw := await self._receive()) is not None:
                try:
                    req, params = p.parse_request(raw)
                except FrameInvalid as exc:
                    await self._ws.send_text(p.error(exc.request_id, exc.code, str(exc)))
                    continue
                if not isinstance(params, p.ConnectParams):
                    msg = "the first request must be 'connect'"
                    await self._ws.send_text(p.error(req.id, p.NOT_CONNECTED, msg))
                    continue
                if params.protocol != p.PROTOCOL_VERSION:
                    await self._ws.send_text(
                        p.error(
                            req.id,
                            p.UNSUPPORTED_VERSION,
                            f"protocol {params.protocol} is not spoken; "
                            f"this gateway speaks {p.PROTOCOL_VERSION}",
                        )
                    )
                    await self._ws.close(ws.CLOSE_POLICY, "unsupported protocol version")
                    return False
                await self._connect(req.id, params, nursery)
                return True
            return False
        await self._ws.close(ws.CLOSE_POLICY, "no connect request in time")
        return False

    async def _connect(self, rid: str, params: p.ConnectParams, nursery: trio.Nursery) -> None:
        peer = await self._derive_peer(params)
        resume = None if params.resume is None else (params.resume.stream, params.resume.after)
        stream, resumed = self._hub.open(peer, resume)
        self._peer, self._stream = peer, stream
        self._methods = Methods(self._core, self._lanes, self._hub, peer, self._owner_session)
        cursor = resume[1] if resume is not None and resumed else stream.last_seq
        pol = peer.policy
        result = {
            "protocol": p.PROTOCOL_VERSION,
            "peer": peer.id,
            "trust": peer.level.label,
            "stream": stream.id,
            "last_seq": stream.last_seq,
            "resumed": resumed,
            "session_prefix": "" if peer.level is TrustLevel.OWNER else peer.session_prefix,
            "policy": {
                "turn_budget": pol.turn_budget,
                "max_tool_risk": pol.max_tool_risk,
                "events": sorted(k.value for k in pol.events),
                "may_rollback": pol.may_rollback,
            },
        }
        await self._ws.send_text(p.response(rid, result))
        nursery.start_soon(self._pump, stream, cursor)

    async def _derive_peer(self, params: p.ConnectParams) -> Peer:
        if self._owner:
            return Peer("webchat:owner", TrustLevel.OWNER)
        peer_id = f"webchat:{params.name or 'anon-' + secrets.token_hex(4)}"
        try:
            level = await self._core.trust(peer_id)
        except CoreCallFailed:
            level = TrustLevel.UNTRUSTED
        # A peer without the owner's proof proves no identity, so a claimed
        # name reaches at most guest, whatever the trust table says of it.
        return Peer(peer_id, min(level, TrustLevel.GUEST))

    async def _pump(self, stream: Stream, cursor: int) -> None:
        while not self._ws.closed:
            await stream.wait_after(cursor)
            frames = stream.since(cursor)
            if frames is None:
                # This client fell more than a buffer behind: it must reload.
                await self._ws.close(ws.CLOSE_POLICY, "too slow; reconnect and reload")
                return
            if frames:
                await self._ws.send_texts([frame for _, frame in frames])
                cursor = frames[-1][0]

    async def _dispatch(self, raw: bytes, nursery: trio.Nursery) -> None:
        """Parse a frame and start its request. A ``send`` takes its place
        in its lane here, before any other frame is read, so a session's
        messages keep the order they arrived in."""
        try:
            req, params = p.parse_request(raw)
        except FrameInvalid as exc:
            await self._ws.send_text(p.error(exc.request_id, exc.code, str(exc)))
            return
        if self._inflight >= self._limits.max_inflight:
            await self._ws.send_text(p.error(req.id, p.BUSY, "too many requests in flight"))
            return
        ticket = None
        if isinstance(params, p.SendParams):
            inbound = Inbound(
                params.session, params.text, params.key, self.peer.id, params.mode, self.peer.level
            )
            try:
                self.methods.check_session(params.session)
                ticket = self._lanes.enqueue(inbound)
            except FrameInvalid as exc:
                await self._ws.send_text(p.error(req.id, exc.code, str(exc)))
                return
            except LaneRefused as exc:
                await self._ws.send_text(p.error(req.id, p.BUSY, str(exc)))
                return
        self._inflight += 1
        nursery.start_soon(self._request, req, params, ticket)

    async def _request(self, req: p.Request, params: Any, ticket: Ticket | None) -> None:
        try:
            if ticket is not None:
                result = await self.methods.acked(ticket)
            else:
                result = await Methods.HANDLERS[req.method](self.methods, params)
            await self._ws.send_text(p.response(req.id, result))
        except FrameInvalid as exc:
            await self._ws.send_text(p.error(req.id, exc.code, str(exc)))
        except CoreCallFailed as exc:
            await self._ws.send_text(p.error(req.id, p.CORE, f"{exc} ({exc.code})"))
        except LaneRefused as exc:
            await self._ws.send_text(p.error(req.id, p.BUSY, str(exc)))
        finally:
            self._inflight -= 1

    @property
    def peer(self) -> Peer:
        assert self._peer is not None
        return self._peer

    @property
    def methods(self) -> Methods:
        assert self._methods is not None
        return self._methods


def _id_of(raw: bytes) -> str | None:
    """The request id of a frame refused unread, when it has one, so the
    client knows which request to retry."""
    try:
        return p.parse_request(raw)[0].id
    except FrameInvalid as exc:
        return exc.request_id


__all__ = ["Limits", "Session", "WebSocket"]
