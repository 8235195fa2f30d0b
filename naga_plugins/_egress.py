"""The plugin side of the core's egress proxy: httpx transports that dial
every host through it.

A plugin whose manifest asks for ``egress_proxy`` has no network; the core
hands it the path of its proxy socket (``NAGA_EGRESS_SOCKET``). These
transports make httpx open each connection as a Unix-socket connection to
that proxy, ask ``CONNECT host:port``, and run HTTP (and TLS, end to end,
with the real host's certificate checked) inside the tunnel::

    client = httpx.Client(transport=egress_transport())

A refusal (a host or port the plugin may not reach, an address that is
private or loopback) is an ``httpx.ConnectError`` whose message carries
the proxy's reason and detail, e.g. ``egress proxy refused example.org:443
(host_not_allowed): plugin wechat may not reach example.org:443 ...``.
"""

from __future__ import annotations

import os
import ssl
import typing

import httpcore
import httpx

from naga.constants import EGRESS_SOCKET_ENV
from naga_plugins.errors import PluginSetupError

#: The longest proxy answer head read before the tunnel.
MAX_ANSWER_BYTES = 8192


def egress_socket() -> str:
    """The proxy socket the core handed this worker."""
    path = os.environ.get(EGRESS_SOCKET_ENV)
    if not path:
        raise PluginSetupError(
            f"{EGRESS_SOCKET_ENV} is not set: the manifest must ask for the egress_proxy capability"
        )
    return path


def connect_request(host: str, port: int) -> bytes:
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode("ascii")


def check_answer(head: bytes, host: str, port: int, body: bytes = b"") -> None:
    """Raise ``httpcore.ConnectError`` unless ``head`` is a 2xx answer; a
    refusal's message has the proxy's reason and the first line of its body."""
    text = head.decode("latin-1")
    first, _, rest = text.partition("\r\n")
    parts = first.split(" ", 2)
    if len(parts) >= 2 and parts[0].startswith("HTTP/1.") and parts[1].startswith("2"):
        return
    reason = ""
    for line in rest.split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "x-naga-egress-refused":
            reason = value.strip()
    why = f" ({reason})" if reason else ""
    detail = body.decode("utf-8", "replace").split("\n", 1)[0].strip() or first.strip()
    raise httpcore.ConnectError(f"egress proxy refused {host}:{port}{why}: {detail}")


def _head_done(head: bytearray) -> bool:
    if len(head) > MAX_ANSWER_BYTES:
        raise httpcore.ConnectError("the egress proxy's answer head is too long")
    return head.endswith(b"\r\n\r\n")


def _closed() -> bytes:
    raise httpcore.ConnectError("the egress proxy closed before answering")


def _read_head(read_one: typing.Callable[[], bytes]) -> bytes:
    """The proxy's answer head, one byte at a time: nothing of the tunnel
    is read here."""
    head = bytearray()
    while not _head_done(head):
        head += read_one() or _closed()
    return bytes(head)


def _refused(head: bytes) -> bool:
    parts = head.split(b" ", 2)
    return len(parts) < 2 or not parts[1].startswith(b"2")


class _ProxyBackend(httpcore.NetworkBackend):
    def __init__(self, path: str) -> None:
        self._path = path
        self._unix = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._unix.connect_unix_socket(self._path, timeout=timeout)
        try:
            stream.write(connect_request(host, port), timeout=timeout)
            head = _read_head(lambda: stream.read(1, timeout=timeout))
            body = stream.read(2048, timeout=timeout) if _refused(head) else b""
            check_answer(head, host, port, body)
        except BaseException:
            stream.close()
            raise
        return stream

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a proxied plugin reaches no Unix socket but its proxy")

    def sleep(self, seconds: float) -> None:
        self._unix.sleep(seconds)


class _AsyncProxyBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, path: str, inner: object) -> None:
        self._path = path
        # httpcore's TrioBackend implements the interface without declaring it.
        self._unix = typing.cast(httpcore.AsyncNetworkBackend, inner)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._unix.connect_unix_socket(self._path, timeout=timeout)
        try:
            await stream.write(connect_request(host, port), timeout=timeout)
            head = bytearray()
            while not _head_done(head):
                head += await stream.read(1, timeout=timeout) or _closed()
            body = await stream.read(2048, timeout=timeout) if _refused(bytes(head)) else b""
            check_answer(bytes(head), host, port, body)
        except BaseException:
            await stream.aclose()
            raise
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a proxied plugin reaches no Unix socket but its proxy")

    async def sleep(self, seconds: float) -> None:
        await self._unix.sleep(seconds)


class ProxiedTransport(httpx.HTTPTransport):
    """An ``httpx.HTTPTransport`` whose every connection is a tunnel through
    the egress proxy at ``socket_path``."""

    def __init__(
        self, socket_path: str | None = None, *, verify: ssl.SSLContext | bool = True
    ) -> None:
        super().__init__(retries=0)
        self._pool.close()
        ssl_context = (
            verify
            if isinstance(verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify=verify)
        )
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            network_backend=_ProxyBackend(socket_path or egress_socket()),
            http1=True,
            http2=False,
            retries=0,
        )


class AsyncProxiedTransport(httpx.AsyncHTTPTransport):
    """The async ``ProxiedTransport`` (trio by default)."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        verify: ssl.SSLContext | bool = True,
        backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        super().__init__(retries=0)
        ssl_context = (
            verify
            if isinstance(verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify=verify)
        )
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=_AsyncProxyBackend(
                socket_path or egress_socket(), backend or httpcore.TrioBackend()
            ),
            http1=True,
            http2=False,
            retries=0,
        )


def egress_transport(*, verify: ssl.SSLContext | bool = True) -> ProxiedTransport:
    """A transport through this worker's egress proxy."""
    return ProxiedTransport(verify=verify)


def async_egress_transport(*, verify: ssl.SSLContext | bool = True) -> AsyncProxiedTransport:
    """An async (trio) transport through this worker's egress proxy."""
    return AsyncProxiedTransport(verify=verify)


__all__ = [
    "AsyncProxiedTransport",
    "ProxiedTransport",
    "async_egress_transport",
    "check_answer",
    "connect_request",
    "egress_socket",
    "egress_transport",
]
