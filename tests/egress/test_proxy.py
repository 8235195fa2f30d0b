"""The egress proxy in the core's process, with loopback listeners standing
in for hosts and the plugin SDK's transports as its clients: only the
declared host and port are reached, everything else is refused with its
reason (and no connection is made), every connection is an event."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
import trio
import trio.testing

from naga_core.egress import (
    EgressEvent,
    EgressPolicy,
    EgressProxies,
    EgressProxy,
    RefusalReason,
    resolve,
)
from naga_plugins import AsyncProxiedTransport, ProxiedTransport
from tests.egress._upstream import Upstream

#: Names the fake resolver knows; anything else resolves for real.
NAMES = {
    "api.stand-in.test": ["127.0.0.1"],
    "evil.test": ["10.0.0.7"],
    "metadata.test": ["169.254.169.254"],
    "rebind.test": ["127.0.0.1"],
}


async def fake_resolve(host: str, port: int) -> list[str]:
    if host in NAMES:
        return NAMES[host]
    return await resolve(host, port)


@dataclass
class Setup:
    path: str
    api: Upstream
    other: Upstream
    events: list[EgressEvent]


@asynccontextmanager
async def proxied(tmp: str) -> AsyncGenerator[Setup]:
    async with trio.open_nursery() as nursery:
        api = await nursery.start(Upstream("api").serve)
        other = await nursery.start(Upstream("other").serve)
        policy = EgressPolicy.of(
            "wechat",
            [
                ("api.stand-in.test", api.port),
                ("evil.test", api.port),
                ("metadata.test", 80),
                ("rebind.test", api.port),
                ("127.0.0.1", other.port),
            ],
            loopback_hosts=["api.stand-in.test"],
        )
        events: list[EgressEvent] = []
        path = os.path.join(tmp, "p.sock")
        await nursery.start(
            EgressProxy(path, lambda: policy, on_event=events.append, resolver=fake_resolve).serve
        )
        yield Setup(path, api, other, events)
        nursery.cancel_scope.cancel()


def get(path: str, url: str) -> httpx.Response:
    with httpx.Client(transport=ProxiedTransport(path), timeout=10) as client:
        return client.get(url)


def refusal(path: str, url: str) -> str:
    with pytest.raises(httpx.ConnectError) as caught:
        get(path, url)
    return str(caught.value)


def run(test: object) -> None:
    with tempfile.TemporaryDirectory(prefix="eg-") as tmp:

        async def main() -> None:
            async with proxied(tmp) as setup:
                await test(setup)  # type: ignore[operator]

        trio.run(main)


def test_the_declared_host_is_reached_through_the_tunnel_and_logged() -> None:
    async def body(s: Setup) -> None:
        answer = await trio.to_thread.run_sync(
            get, s.path, f"http://api.stand-in.test:{s.api.port}/x"
        )
        assert answer.status_code == 200
        assert answer.text == "hello from api"
        assert s.api.requests[0].startswith(b"GET /x HTTP/1.1")
        await trio.testing.wait_all_tasks_blocked()
        assert [e.outcome for e in s.events] == ["opened", "closed"]
        closed = s.events[1]
        assert closed.address == "127.0.0.1"
        assert closed.sent > 0
        assert closed.received > len(b"hello from api")  # the head and the body
        assert f"api.stand-in.test:{s.api.port}" in closed.line()

    run(body)


def test_another_port_host_or_forbidden_address_is_refused_and_never_dialled() -> None:
    async def body(s: Setup) -> None:
        cases = [
            (f"http://api.stand-in.test:{s.other.port}/", "port_not_allowed"),
            (f"http://example.org:{s.api.port}/", "host_not_allowed"),
            (f"http://evil.test:{s.api.port}/", "address_forbidden"),
            ("http://metadata.test/", "address_forbidden"),
            # Declared, loopback, but not a stand-in: refused.
            (f"http://127.0.0.1:{s.other.port}/", "address_forbidden"),
            (f"http://rebind.test:{s.api.port}/", "address_forbidden"),
        ]
        for url, reason in cases:
            message = await trio.to_thread.run_sync(refusal, s.path, url)
            assert f"({reason})" in message, (url, message)
        assert s.api.accepted == 0
        assert s.other.accepted == 0
        refused = [e for e in s.events if e.outcome == "refused"]
        assert [e.reason.value for e in refused if e.reason] == [r for _, r in cases]
        assert "169.254.169.254 (link-local)" in refused[3].detail

    run(body)


def test_a_malformed_request_gets_400_and_the_proxy_keeps_serving() -> None:
    async def body(s: Setup) -> None:
        def raw(data: bytes) -> bytes:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(s.path)
                sock.sendall(data)
                out = b""
                while chunk := sock.recv(4096):
                    out += chunk
                return out

        for data in (b"GET / HTTP/1.1\r\n\r\n", b"\xff\xfe\r\n\r\n", b"A" * 9000):
            answer = await trio.to_thread.run_sync(raw, data)
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:60]
            assert b"X-Naga-Egress-Refused: bad_request" in answer
        ok = await trio.to_thread.run_sync(get, s.path, f"http://api.stand-in.test:{s.api.port}/")
        assert ok.text == "hello from api"

    run(body)


def test_the_async_transport_under_trio() -> None:
    async def body(s: Setup) -> None:
        async with httpx.AsyncClient(transport=AsyncProxiedTransport(s.path)) as client:
            answer = await client.get(f"http://api.stand-in.test:{s.api.port}/a")
            assert answer.text == "hello from api"
            with pytest.raises(httpx.ConnectError, match=r"\(host_not_allowed\)"):
                await client.get(f"http://example.org:{s.api.port}/")

    run(body)


def test_refusals_are_journaled_once_per_window_and_a_policy_change_counts_at_once() -> None:
    notes: list[str] = []

    async def note(text: str) -> None:
        notes.append(text)

    async def main(tmp: str) -> None:
        async with trio.open_nursery() as nursery:
            api = await nursery.start(Upstream("api").serve)
            proxies = await nursery.start(
                EgressProxies(tmp, note=note, resolver=fake_resolve).serve
            )
            allowed: list[tuple[str, int]] = []

            def policy() -> EgressPolicy:
                return EgressPolicy.of("t", allowed, loopback_hosts=["api.stand-in.test"])

            path = await proxies.open("t", policy)
            assert os.stat(path).st_mode & 0o777 == 0o600
            url = f"http://api.stand-in.test:{api.port}/"
            for _ in range(3):
                await trio.to_thread.run_sync(refusal, path, url)
            await trio.testing.wait_all_tasks_blocked()
            assert len(notes) == 1
            assert "refused" in notes[0]
            allowed.append(("api.stand-in.test", api.port))
            answer = await trio.to_thread.run_sync(get, path, url)
            assert answer.text == "hello from api"
            proxies.close("t")
            await trio.testing.wait_all_tasks_blocked()
            assert not await trio.Path(path).exists()
            nursery.cancel_scope.cancel()

    with tempfile.TemporaryDirectory(prefix="eg-") as tmp:
        trio.run(main, tmp)


def test_too_many_connections_are_refused() -> None:
    assert RefusalReason.TOO_MANY_CONNECTIONS.value == "too_many_connections"

    async def main(tmp: str) -> None:
        async with trio.open_nursery() as nursery:
            api = await nursery.start(Upstream("api").serve)
            policy = EgressPolicy.of(
                "t", [("api.stand-in.test", api.port)], loopback_hosts=["api.stand-in.test"]
            )
            path = os.path.join(tmp, "p.sock")
            proxy = await nursery.start(
                EgressProxy(path, lambda: policy, resolver=fake_resolve, max_connections=1).serve
            )
            holder = await trio.open_unix_socket(path)  # holds the one slot (no head yet)
            await trio.testing.wait_all_tasks_blocked()
            assert proxy.open_connections == 1
            message = await trio.to_thread.run_sync(
                refusal, path, f"http://api.stand-in.test:{api.port}/"
            )
            assert "(too_many_connections)" in message
            await holder.aclose()
            nursery.cancel_scope.cancel()

    with tempfile.TemporaryDirectory(prefix="eg-") as tmp:
        trio.run(main, tmp)
