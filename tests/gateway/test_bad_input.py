"""Bad frames and hostile peers: each gets a clear error frame or a closed
connection with the close code that says why, and the gateway keeps
serving everyone else. Also what guests and untrusted peers are refused."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from naga.v1 import core_pb2 as cpb
from naga_gateway import Gateway, GatewayConfig, Inbound, Limits
from naga_gateway import _ws as ws
from tests.fakes.turn_core import FakeCore
from tests.gateway._client import Closed, WsClient
from tests.gateway._login import owner_client
from tests.gateway.conftest import run_gateway


async def _still_serves(gw: Gateway, core: FakeCore) -> None:
    other = await owner_client(gw.port, core.login_code)
    await other.connect()
    resp = await other.request("send", session="ok", text="still here", key="k-ok")
    assert resp["ok"], resp
    await other.until_event("turn.final", "ok")
    await other.aclose()


async def _drain_until_closed(c: WsClient) -> tuple[int, list[dict[str, Any]]]:
    """Read until the server closes: its close code and the frames before."""
    frames: list[dict[str, Any]] = []
    while True:
        try:
            frames.append(await c.recv())
        except Closed as closed:
            return closed.code, frames


@pytest.mark.parametrize(
    ("frame", "code", "words"),
    [
        (b"not json", "bad_frame", "not JSON"),
        (b"[1, 2]", "bad_frame", "JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "bad_frame", "nested too deeply"),
        (b'{"type": "req", "id": 7, "method": "ping"}', "bad_frame", "id"),
        (b'{"type": "hello", "id": "1", "method": "ping"}', "bad_frame", "type"),
        (b'{"type": "req", "id": "1", "method": "ping", "x": 1}', "bad_frame", "x"),
        (b'{"type": "req", "id": "1", "method": "fly"}', "unknown_method", "'fly'"),
        (
            b'{"type": "req", "id": "1", "method": "send", "params": '
            b'{"session": "s", "text": 5, "key": "k"}}',
            "invalid_params",
            "text",
        ),
        (
            b'{"type": "req", "id": "1", "method": "send", "params": '
            b'{"session": "Bad Name", "text": "x", "key": "k"}}',
            "invalid_params",
            "session",
        ),
        (
            b'{"type": "req", "id": "1", "method": "send", "params": '
            b'{"session": "s", "text": "", "key": "k"}}',
            "invalid_params",
            "text",
        ),
        (
            b'{"type": "req", "id": "1", "method": "send", "params": '
            b'{"session": "s", "text": "x", "key": "k", "mode": "shout"}}',
            "invalid_params",
            "mode",
        ),
        (
            b'{"type": "req", "id": "1", "method": "history", "params": {"session": "s", '
            b'"limit": 5000}}',
            "invalid_params",
            "limit",
        ),
        (
            b'{"type": "req", "id": "1", "method": "connect", "params": {"protocol": 1}}',
            "invalid_params",
            "already",
        ),
    ],
)
def test_a_bad_frame_gets_an_error_frame_and_the_connection_lives(
    fake_core: tuple[FakeCore, str], frame: bytes, code: str, words: str
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        await c.send_raw(frame)
        err = await c.recv()
        assert err["ok"] is False
        assert err["error"]["code"] == code
        assert words in err["error"]["message"]
        assert (await c.request("ping"))["result"] == {"pong": True}
        await c.aclose()
        await _still_serves(gw, core)

    run_gateway(socket, body)


def test_requests_before_connect_are_refused(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        resp = await c.request("sessions")
        assert resp["error"]["code"] == "not_connected"
        await c.connect()
        assert (await c.request("sessions"))["ok"]
        await c.aclose()

    run_gateway(socket, body)


def test_an_unknown_protocol_version_is_refused_and_closed(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        resp = await c.request("connect", protocol=2)
        assert resp["error"]["code"] == "unsupported_version"
        with pytest.raises(Closed) as info:
            await c.recv()
        assert info.value.code == ws.CLOSE_POLICY

    run_gateway(socket, body)


@pytest.mark.parametrize(
    ("raw", "close_code"),
    [
        # 9 MB announced (over the 8 MiB limit), the start of it sent:
        # refused on the header, before the rest is read.
        (ws.encode_frame(ws.OP_TEXT, b"x" * 9_000_000, mask=b"abcd")[:2000], ws.CLOSE_TOO_BIG),
        (ws.encode_frame(ws.OP_TEXT, b"{}"), ws.CLOSE_PROTOCOL_ERROR),  # unmasked
        (ws.encode_frame(ws.OP_TEXT, b"\xff", mask=b"abcd"), ws.CLOSE_BAD_DATA),
        (bytes([0x82, 0xFF]) + (1 << 40).to_bytes(8, "big"), ws.CLOSE_TOO_BIG),
    ],
)
def test_protocol_violations_close_with_their_code(
    fake_core: tuple[FakeCore, str], raw: bytes, close_code: int
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        await c.stream.send_all(raw)
        assert (await _drain_until_closed(c))[0] == close_code
        await _still_serves(gw, core)

    run_gateway(socket, body)


def test_a_wrong_origin_or_host_never_upgrades(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        with pytest.raises(Closed) as info:
            await WsClient.open(gw.port, origin="http://evil.example")
        assert info.value.code == 403
        assert "origin http://evil.example may not connect" in info.value.reason
        ok = await owner_client(gw.port, core.login_code, origin=f"http://localhost:{gw.port}")
        await ok.connect()
        await ok.aclose()
        stream = await trio.open_tcp_stream("127.0.0.1", gw.port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: rebound.example:18789\r\n\r\n")
        answer = await stream.receive_some(4096)
        assert answer.startswith(b"HTTP/1.1 421")
        await stream.aclose()
        await _still_serves(gw, core)

    run_gateway(socket, body)


def test_a_silent_client_and_a_full_house_cost_nobody_else(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core
    config = GatewayConfig(port=0, max_connections=3, head_timeout=0.2)

    async def body(gw: Gateway) -> None:
        silent = await trio.open_tcp_stream("127.0.0.1", gw.port)
        # It says nothing; after the head timeout the gateway hangs up.
        assert await silent.receive_some(100) == b""
        held = [await owner_client(gw.port, core.login_code) for _ in range(3)]
        with pytest.raises(Closed):
            await WsClient.open(gw.port)  # a fourth is refused at once
        await held.pop().aclose()
        await trio.testing.wait_all_tasks_blocked()
        await _still_serves(gw, core)
        for c in held:
            await c.aclose()

    run_gateway(socket, body, config)


def test_the_console_page_is_served_with_hardening_headers(
    fake_core: tuple[FakeCore, str],
) -> None:
    _core, socket = fake_core

    async def body(gw: Gateway) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", gw.port)
        await stream.send_all(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n\r\n".encode())
        data = b""
        while b"</html>" not in data:
            data += await stream.receive_some(65536)
        head = data.split(b"\r\n\r\n")[0].lower()
        assert b"content-security-policy: default-src 'self'" in head
        assert b"x-frame-options: deny" in head
        await stream.aclose()

    run_gateway(socket, body)


def test_a_flood_from_one_peer_is_throttled_then_closed(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core
    config = GatewayConfig(port=0, limits=Limits(rate=5.0, burst=5, flood_strikes=20))

    async def body(gw: Gateway) -> None:
        flooder = await owner_client(gw.port, core.login_code)
        await flooder.connect()
        for i in range(200):
            try:
                await flooder.send({"type": "req", "id": f"f{i}", "method": "ping"})
            except trio.BrokenResourceError:
                break
        code, frames = await _drain_until_closed(flooder)
        assert code == ws.CLOSE_POLICY
        limited = [f for f in frames if f.get("error", {}).get("code") == "rate_limited"]
        assert limited
        # Each refusal names the request refused, so a client knows what to retry.
        assert all(str(f["id"]).startswith("f") for f in limited)
        await _still_serves(gw, core)

    run_gateway(socket, body, config)


def _remote(config: GatewayConfig | None = None) -> GatewayConfig:
    # Peers without the owner's cookie admitted, at most as guests, to test
    # the peers below owner.
    return config or GatewayConfig(port=0, admit_guests=True)


def test_a_remote_peer_is_at_most_a_guest_and_confined(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core
    core.trust["webchat:alice"] = cpb.TRUST_LEVEL_OWNER  # claimed names cannot reach it

    async def body(gw: Gateway) -> None:
        alice = await WsClient.open(gw.port)
        hello = await alice.connect(name="alice")
        assert (hello["peer"], hello["trust"]) == ("webchat:alice", "guest")
        assert hello["session_prefix"] == "webchat:alice."
        bob = await WsClient.open(gw.port)
        assert (await bob.connect(name="bob"))["trust"] == "untrusted"
        tools = await alice.request("tools")
        assert [t["name"] for t in tools["result"]["tools"]] == ["clock.now"]
        refused = await alice.request("send", session="main", text="hi", key="1")
        assert refused["error"]["code"] == "forbidden"
        assert (await alice.request("history", session="main"))["error"]["code"] == "forbidden"
        assert (await alice.request("rollback.preview", to_seq=0))["error"]["code"] == "forbidden"
        ok = await alice.request(
            "send", session="webchat:alice.main", text="tool:clock.now tool:fs.delete", key="2"
        )
        assert ok["ok"], ok
        await alice.until_event("turn.final")
        shown = [(e["event"], e["data"].get("tool")) for e in alice.events]
        assert ("tool.started", "clock.now") in shown
        assert ("tool.started", "fs.delete") not in shown, "a guest never sees a write tool"
        assert "turn.usage" not in [e for e, _ in shown]
        # Bob saw nothing of Alice's session; his own list is empty.
        assert (await bob.request("sessions"))["result"]["sessions"] == []
        assert bob.events == []
        for c in (alice, bob):
            await c.aclose()

    run_gateway(socket, body, _remote())


def test_the_owner_sees_guests_sessions_but_guests_never_see_the_owners(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core
    core.trust["webchat:carol"] = cpb.TRUST_LEVEL_GUEST

    async def body(gw: Gateway) -> None:
        carol = await WsClient.open(gw.port)
        await carol.connect(name="carol")
        # The owner's turn in another session: Carol's stream stays silent.
        owner = Inbound("owner-s", "secret plans", "k", "webchat:owner")
        ack = await gw.lanes.submit(owner)
        assert ack.message_seq >= 0
        ping = await carol.request("ping")
        assert ping["ok"]
        assert all(e["session"] != "owner-s" for e in carol.events)
        lst = await carol.request("sessions")
        assert lst["result"]["sessions"] == []
        await carol.aclose()

    run_gateway(socket, body, _remote())
    assert core.entries[0].text == "secret plans"
