"""The console's read-only methods over a real WebSocket: the owner gets
the core's settings, plugins, trust table and ledger in the documented
shape; a peer below owner is refused (forbidden) and its history has no
detail; bad params are refused by name."""

from __future__ import annotations

from naga.v1 import turn_pb2 as tpb
from naga_gateway import Gateway, GatewayConfig
from tests.fakes.turn_core import Entry, FakeCore
from tests.gateway._client import WsClient
from tests.gateway._login import owner_client
from tests.gateway.conftest import run_gateway


def test_a_guest_may_not_read_the_owner_pages(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core
    core.entries.append(Entry(0, "webchat:amy.s", tpb.HISTORY_ROLE_USER, "hi", "webchat:amy", "t1"))
    core.next_seq = 1

    async def body(gw: Gateway) -> None:
        c = await WsClient.open(gw.port)
        hello = await c.connect(name="amy")
        assert hello["trust"] == "untrusted"
        for method in ("settings", "plugins", "trust", "ledger"):
            res = await c.request(method)
            assert res["ok"] is False, (method, res)
            assert res["error"]["code"] == "forbidden", res
            assert res["error"]["message"].startswith("peer webchat:amy may not read the "), res
        hist = await c.request("history", session="webchat:amy.s", detail=True)
        assert hist["ok"], hist
        (entry,) = hist["result"]["entries"]
        assert set(entry) == {"seq", "role", "text", "peer", "time_ns", "turn", "undone"}, (
            "no detail"
        )
        await c.aclose()

    run_gateway(socket, body, GatewayConfig(port=0, admit_guests=True))


def test_the_owner_reads_the_pages_and_bad_params_are_named(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        plugins = await c.request("plugins")
        assert plugins["ok"], plugins
        tools = {t["name"]: t["risk"] for p in plugins["result"]["plugins"] for t in p["tools"]}
        assert tools == core.tools
        ledger = await c.request("ledger", limit=5)
        assert ledger["ok"], ledger
        assert ledger["result"] == {"entries": [], "more": False}
        bad = await c.request("ledger", limit=5000)
        assert bad["error"]["code"] == "invalid_params"
        assert bad["error"]["message"].startswith("bad params for ledger: limit: ")
        extra = await c.request("settings", nosuch=1)
        assert extra["error"]["code"] == "invalid_params"
        hist = await c.request("history", session="main", detail="yes")
        assert hist["error"]["code"] == "invalid_params"
        await c.aclose()

    run_gateway(socket, body)
