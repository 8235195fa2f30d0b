"""The gateway end to end against a fake core over gRPC: connect, send,
streamed reply, history, abort, steer, sessions, rollback, resume."""

from __future__ import annotations

import pytest

from naga_gateway import Gateway, GatewayConfig
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import owner_client
from tests.gateway.conftest import run_gateway


def test_a_message_is_acknowledged_once_durable_and_its_reply_streams(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        hello = await c.connect()
        assert hello["peer"] == "webchat:owner"
        assert hello["trust"] == "owner"
        resp = await c.request("send", session="s1", text="hello there", key="k1")
        assert resp["ok"], resp
        # Acknowledged only after the core recorded it: its seq is the entry's.
        seq = resp["result"]["message_seq"]
        assert [e.text for e in core.entries if e.seq == seq] == ["hello there"]
        final = await c.until_event("turn.final", "s1")
        assert final["data"]["text"] == "echo: hello there"
        deltas = [e["data"]["text"] for e in c.events if e["event"] == "turn.delta"]
        assert "".join(deltas) == "echo: hello there"
        seqs = [e["seq"] for e in c.events] + [final["seq"]]
        assert sorted(seqs) == list(range(min(seqs), max(seqs) + 1)), "no gap"
        hist = await c.request("history", session="s1")
        texts = [(e["role"], e["text"]) for e in hist["result"]["entries"]]
        assert texts == [("user", "hello there"), ("assistant", "echo: hello there")]
        sessions = await c.request("sessions")
        assert [s["session"] for s in sessions["result"]["sessions"]] == ["s1"]
        await c.aclose()

    run_gateway(socket, body)


def test_resending_the_same_key_never_runs_twice(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        first = await c.request("send", session="s1", text="once", key="same")
        await c.until_event("turn.final")
        again = await c.request("send", session="s1", text="once", key="same")
        assert again["result"]["replayed"] is True
        assert again["result"]["message_seq"] == first["result"]["message_seq"]
        await c.aclose()

    run_gateway(socket, body)
    assert [r.text for r in core.runs] == ["once"]


def test_abort_stops_a_long_reply(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        ack = await c.request("send", session="s1", text="slow story", key="k")
        assert ack["ok"]
        await c.until_event("turn.delta")
        aborted = await c.request("abort", session="s1")
        assert aborted["result"]["turn"] == ack["result"]["turn"]
        err = await c.until_event("turn.error")
        assert err["data"]["kind"] == "aborted"
        await c.aclose()

    run_gateway(socket, body)
    assert core.idle()


def test_steer_reaches_the_running_turn(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        core.slow_delay = 0.001
        await c.request("send", session="s1", text="slow", key="a")
        await c.until_event("turn.delta")
        steer = await c.request("send", session="s1", text="shorter", key="b", mode="steer")
        assert steer["result"]["steered"] is True
        final = await c.until_event("turn.final")
        assert final["data"]["text"].endswith("[steered: shorter]")
        await c.aclose()

    run_gateway(socket, body)
    assert [r.text for r in core.runs] == ["slow"]


def test_rollback_preview_then_undo(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        first = await c.request("send", session="s1", text="one", key="1")
        await c.until_event("turn.final")
        await c.request("send", session="s1", text="two", key="2")
        await c.until_event("turn.final")
        keep = first["result"]["message_seq"] + 1  # keep "one" and its reply
        preview = await c.request("rollback.preview", to_seq=keep)
        assert preview["result"]["seq"] is None
        assert preview["result"]["preview"]["effects"] == 2
        assert len(core.entries) == 4, "a dry run changes nothing"
        done = await c.request("rollback", to_seq=keep)
        assert done["result"]["seq"] is not None
        hist = await c.request("history", session="s1")
        assert [e["text"] for e in hist["result"]["entries"]] == ["one", "echo: one"]
        await c.aclose()

    run_gateway(socket, body)


def test_a_reconnecting_client_resumes_its_stream(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        hello = await c.connect()
        await c.request("send", session="s1", text="a b c", key="1")
        await c.until_event("turn.final")
        seen = 2  # accepted and message events came first; resume after them
        await c.aclose()
        d = await owner_client(gw.port, core.login_code)
        again = await d.connect(resume={"stream": hello["stream"], "after": seen})
        assert again["resumed"] is True
        assert again["stream"] == hello["stream"]
        replayed = [await d.recv() for _ in range(again["last_seq"] - seen)]
        assert [f["seq"] for f in replayed] == list(range(seen + 1, again["last_seq"] + 1))
        await d.aclose()
        e = await owner_client(gw.port, core.login_code)
        lost = await e.connect(resume={"stream": "no-such-stream", "after": 3})
        assert lost["resumed"] is False
        await e.aclose()

    run_gateway(socket, body)


@pytest.mark.parametrize("mode", ["followup", "collect"])
def test_messages_queued_behind_a_turn_run_in_order(
    fake_core: tuple[FakeCore, str], mode: str
) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        core.slow_delay = 0.001
        r0 = await c.start("send", session="s1", text="slow", key="0", mode=mode)
        await c.until_event("turn.accepted")
        rids = [
            await c.start("send", session="s1", text=f"m{i}", key=f"k{i}", mode=mode)
            for i in range(3)
        ]
        for rid in [r0, *rids]:
            assert (await c.response(rid))["ok"]
        # An ack says the message is recorded, not that its turn ran: wait
        # for the last one's answer before the gateway goes away.
        while "m2" not in (await c.until_event("turn.final", session="s1"))["data"]["text"]:
            pass
        await c.aclose()

    run_gateway(socket, body)
    texts = [r.text for r in core.runs]
    if mode == "followup":
        assert texts == ["slow", "m0", "m1", "m2"]
    else:
        assert texts[0] == "slow"
        assert "\n\n".join(texts[1:]).split("\n\n") == ["m0", "m1", "m2"]


def test_a_core_restart_before_acceptance_is_retried_with_the_same_key(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core
    core.fail_next_runs = 2  # UNAVAILABLE twice, as while the core restarts

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        ack = await c.request("send", session="s1", text="survive", key="k")
        assert ack["ok"], ack
        await c.until_event("turn.final")
        await c.aclose()

    run_gateway(socket, body)
    assert [r.text for r in core.runs] == ["survive"]


def test_a_message_resent_after_a_gateway_restart_is_answered_once(
    fake_core: tuple[FakeCore, str],
) -> None:
    core, socket = fake_core
    acks: list[dict[str, object]] = []

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        # The client resends everything it has no answer for, same key.
        acks.append((await c.request("send", session="s1", text="hi", key="k"))["result"])
        await c.until_event("turn.final")
        await c.aclose()

    run_gateway(socket, body)  # this gateway goes away...
    run_gateway(socket, body)  # ...and a new one gets the same message again
    assert [r.text for r in core.runs] == ["hi"]
    assert acks[0]["message_seq"] == acks[1]["message_seq"]
    assert acks[1]["replayed"] is True


def test_interrupt_stops_the_running_turn_and_runs_first(fake_core: tuple[FakeCore, str]) -> None:
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        core.slow_delay = 0.01
        r0 = await c.start("send", session="s1", text="slow", key="0")
        await c.until_event("turn.delta")
        r1 = await c.start("send", session="s1", text="later", key="1")
        await c.until_event("lane.queued")
        r2 = await c.start("send", session="s1", text="now", key="2", mode="interrupt")
        for rid in (r0, r1, r2):
            assert (await c.response(rid))["ok"]
        err = await c.until_event("turn.error")
        assert err["data"]["kind"] == "aborted"
        # Then one final each for "now" and "later". Counted from the
        # stream, not read from the fake's table: it drops a run only once
        # grpc asks its stream for more after the final, which under load
        # can be after the client has read that final.
        for _ in range(2):
            await c.until_event("turn.final")
        await c.aclose()

    run_gateway(socket, body)
    assert [r.text for r in core.runs] == ["slow", "now", "later"]


def test_past_the_open_messages_bound_a_send_is_refused_not_held(
    fake_core: tuple[FakeCore, str],
) -> None:
    """Each open message holds one of the core's Run streams: past
    ``max_open`` the gateway answers ``busy`` at once (the client resends),
    never holds a message unacknowledged; a slot frees when a turn ends."""
    core, socket = fake_core

    async def body(gw: Gateway) -> None:
        c = await owner_client(gw.port, core.login_code)
        await c.connect()
        core.slow_delay = 0.01
        first = await c.request("send", session="s1", text="slow", key="a")
        assert first["ok"], first
        refused = await c.request("send", session="s2", text="hi", key="b")
        assert not refused["ok"]
        assert refused["error"]["code"] == "busy", refused
        assert "1 messages are already waiting or running" in refused["error"]["message"]
        await c.until_event(("turn.final", "turn.error"), "s1")
        again = await c.request("send", session="s2", text="hi", key="b")
        assert again["ok"], again
        await c.until_event("turn.final", "s2")
        await c.aclose()

    run_gateway(socket, body, GatewayConfig(port=0, max_open=1))
    assert [r.text for r in core.runs] == ["slow", "hi"]
