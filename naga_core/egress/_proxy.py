"""One plugin's CONNECT proxy on a Unix socket: :class:`EgressProxy`.

The plugin's sandbox has no network (a private namespace, Unix sockets
only); this socket, in its view, is its one way out. Each connection:
the request head (``CONNECT host:port HTTP/1.1``, at most 8 KiB, within
``head_timeout_s``), the target checked against the policy, the name
resolved and every address checked, a TCP connection to an address that
passed (never to the name again), ``200 Connection established``, then
bytes both ways until both sides are done. TLS runs end to end inside the
tunnel: the core sees host, port and byte counts, never the content.

Every connection is an :class:`EgressEvent` for the log (opened, closed
with its byte counts, refused with its reason); refusals also go to the
``on_refused`` hook (the ledger, rate limited by the caller).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from naga_core.egress._errors import STATUS, EgressRefused, RefusalReason
from naga_core.egress._policy import Destination, EgressPolicy

log = logging.getLogger("naga.egress")

#: The longest request head the proxy reads.
MAX_HEAD_BYTES = 8192
#: Connections one plugin may hold open at once.
MAX_CONNECTIONS = 64
_RELAY_CHUNK = 65536
#: Once one side is done, how long the other may still carry bytes (a
#: response after a half-closed request); then the tunnel ends.
HALF_CLOSED_GRACE_S = 30.0
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_PHRASES = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (IPv4 and IPv6, in resolver order)."""
    found = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True, slots=True)
class EgressEvent:
    """One connection as the log shows it."""

    plugin: str
    outcome: str  # "opened" | "closed" | "refused"
    target: str
    address: str = ""
    reason: RefusalReason | None = None
    detail: str = ""
    sent: int = 0
    received: int = 0

    def line(self) -> str:
        if self.outcome == "refused":
            assert self.reason is not None
            return f"egress: plugin {self.plugin} -> {self.target} refused: {self.detail}"
        if self.outcome == "opened":
            return f"egress: plugin {self.plugin} -> {self.target} ({self.address}) opened"
        return (
            f"egress: plugin {self.plugin} -> {self.target} ({self.address}) closed: "
            f"{self.sent} bytes sent, {self.received} received"
        )


def parse_head(head: bytes) -> tuple[str, int]:
    """The host and port of a CONNECT request head; refused otherwise."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise EgressRefused(RefusalReason.BAD_REQUEST, "the request head is not ASCII") from None
    line = text.split("\r\n", 1)[0]
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise EgressRefused(
            RefusalReason.BAD_REQUEST, f"expected 'CONNECT host:port HTTP/1.1', got {line[:80]!r}"
        )
    authority = parts[1]
    host, sep, port_text = authority.rpartition(":")
    if not sep or not host or not port_text.isdigit() or len(port_text) > 5:
        raise EgressRefused(RefusalReason.BAD_REQUEST, f"{authority[:80]!r} is not host:port")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise EgressRefused(RefusalReason.BAD_REQUEST, f"port {port} is outside 1..65535")
    if host.startswith("["):
        if not host.endswith("]"):
            raise EgressRefused(RefusalReason.BAD_REQUEST, f"{authority[:80]!r} is not host:port")
    elif ":" in host:
        raise EgressRefused(RefusalReason.BAD_REQUEST, "an IPv6 host must be in brackets")
    if len(host) > 255 or any(c.isspace() or c in "/@?#" for c in host):
        raise EgressRefused(RefusalReason.BAD_REQUEST, f"{host[:80]!r} is not a host name")
    return host, port


def refusal(exc: EgressRefused) -> bytes:
    status = STATUS[exc.reason]
    body = (exc.detail + "\n").encode()
    return (
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Refused')}\r\n"
        f"X-Naga-Egress-Refused: {exc.reason.value}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class EgressProxy:
    """The proxy of one plugin; :meth:`serve` in a nursery."""

    def __init__(
        self,
        path: str,
        policy: Callable[[], EgressPolicy],
        *,
        on_event: Callable[[EgressEvent], None] | None = None,
        resolver: Resolver = resolve,
        head_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.path = path
        #: Asked once per connection (on the loop): a change of the plugin's
        #: destinations counts from the next connection.
        self.policy = policy
        self._on_event = on_event
        self._resolve = resolver
        self._head_timeout_s = head_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self.open_connections = 0

    async def serve(self, *, task_status: trio.TaskStatus[EgressProxy]) -> None:
        listener = await self._bind()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, self._handle, [listener])
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    async def _bind(self) -> trio.SocketListener:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Its directory is 0700 (EgressProxies), so the moment between
            # the bind and the chmod exposes nothing.
            await sock.bind(self.path)
            os.chmod(self.path, 0o600)
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        return trio.SocketListener(sock)

    def _emit(self, event: EgressEvent) -> None:
        if event.outcome == "refused":
            log.warning("%s", event.line())
        else:
            log.info("%s", event.line())
        if self._on_event is not None:
            self._on_event(event)

    async def _handle(self, client: trio.SocketStream) -> None:
        policy = self.policy()
        target_text = "?"
        try:
            self.open_connections += 1
            try:
                head, early = await self._read_head(client)
                # Counted after the head, so the refusal is read as an answer.
                self._count_in(policy)
                host, port = parse_head(head)
                target_text = str(Destination.of(host, port))
                target = policy.check_target(host, port)
                await self._tunnel(client, policy, target, early)
            finally:
                self.open_connections -= 1
        except EgressRefused as exc:
            self._emit(
                EgressEvent(
                    policy.plugin, "refused", target_text, reason=exc.reason, detail=exc.detail
                )
            )
            with trio.move_on_after(1), contextlib.suppress(*_GONE):
                await client.send_all(refusal(exc))
        except _GONE:
            pass  # the plugin hung up; nothing to answer
        finally:
            with contextlib.suppress(*_GONE):
                await client.aclose()

    def _count_in(self, policy: EgressPolicy) -> None:
        if self.open_connections > self._max_connections:
            raise EgressRefused(
                RefusalReason.TOO_MANY_CONNECTIONS,
                f"plugin {policy.plugin} already holds {self.open_connections - 1} connections",
            )

    async def _read_head(self, client: trio.SocketStream) -> tuple[bytes, bytes]:
        buf = bytearray()
        with trio.move_on_after(self._head_timeout_s) as timer:
            while b"\r\n\r\n" not in buf:
                if len(buf) > MAX_HEAD_BYTES:
                    raise EgressRefused(
                        RefusalReason.BAD_REQUEST,
                        f"the request head is longer than {MAX_HEAD_BYTES} bytes",
                    )
                chunk = await client.receive_some(4096)
                if not chunk:
                    raise EgressRefused(RefusalReason.BAD_REQUEST, "the request head was cut off")
                buf += chunk
        if timer.cancelled_caught:
            raise EgressRefused(
                RefusalReason.BAD_REQUEST, f"no request head within {self._head_timeout_s:g} s"
            )
        end = buf.index(b"\r\n\r\n") + 4
        return bytes(buf[:end]), bytes(buf[end:])

    async def _tunnel(
        self,
        client: trio.SocketStream,
        policy: EgressPolicy,
        target: Destination,
        early: bytes,
    ) -> None:
        try:
            addresses = await self._resolve(target.host, target.port)
        except OSError as exc:
            raise EgressRefused(
                RefusalReason.RESOLVE_FAILED, f"{target} does not resolve: {exc}"
            ) from None
        allowed = policy.reachable(target, addresses)
        upstream, address = await self._connect(target, allowed)
        async with upstream:
            self._emit(EgressEvent(policy.plugin, "opened", str(target), address=address))
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            counts = [0, 0]
            if early:
                await upstream.send_all(early)
                counts[0] += len(early)
            async with trio.open_nursery() as nursery:
                scope = nursery.cancel_scope
                nursery.start_soon(_pump, client, upstream, counts, 0, scope)
                nursery.start_soon(_pump, upstream, client, counts, 1, scope)
            self._emit(
                EgressEvent(
                    policy.plugin,
                    "closed",
                    str(target),
                    address=address,
                    sent=counts[0],
                    received=counts[1],
                )
            )

    async def _connect(
        self, target: Destination, addresses: list[str]
    ) -> tuple[trio.SocketStream, str]:
        failures: list[str] = []
        for address in addresses:
            with trio.move_on_after(self._connect_timeout_s):
                try:
                    # An address, not the name: what was checked is what is dialled.
                    return await trio.open_tcp_stream(address, target.port), address
                except OSError as exc:
                    failures.append(f"{address}: {exc.strerror or exc}")
                    continue
            failures.append(f"{address}: no answer within {self._connect_timeout_s:g} s")
        raise EgressRefused(
            RefusalReason.CONNECT_FAILED, f"cannot connect to {target}: {'; '.join(failures)}"
        )


async def _pump(
    source: trio.SocketStream,
    sink: trio.SocketStream,
    counts: list[int],
    index: int,
    tunnel: trio.CancelScope,
) -> None:
    with contextlib.suppress(*_GONE):
        while True:
            data = await source.receive_some(_RELAY_CHUNK)
            if not data:
                break
            await sink.send_all(data)
            counts[index] += len(data)
    # The other way may still carry bytes (a response after the request's
    # end), for a while: an idle keep-alive peer must not hold it forever.
    with contextlib.suppress(*_GONE):
        await sink.send_eof()
    tunnel.deadline = min(tunnel.deadline, trio.current_time() + HALF_CLOSED_GRACE_S)


__all__ = [
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "EgressEvent",
    "EgressProxy",
    "Resolver",
    "parse_head",
    "resolve",
]
