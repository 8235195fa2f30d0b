"""A gateway that gave up is revived by a change of ``gateway.port`` (or,
pinned, restarted by the owner; see test_restart.py): a
core whose gateway cannot bind its port (another process listens there)
gives up after a crash loop, says why and what to do in ``naga daemon
status``, and starts it on the new port once the owner sets one (ledger
entries say both)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import trio

from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core.daemon import GatewayOptions
from naga_core.kernel._kernel import EFFECT_KIND
from tests.daemon.conftest import core_in_thread, home
from tests.gateway._ports import (
    FAST_GIVE_UP,
    console_answers,
    free_ports,
    gateway_row,
    held_port_setting,
    until_said,
)

__all__ = ["home"]  # the fixture, used by name below


def test_a_gateway_that_gave_up_is_revived_by_a_new_port_setting(home: str) -> None:
    busy, free = free_ports(2)
    squatter = held_port_setting(home, busy)
    options = GatewayOptions(enabled=True, restart=FAST_GIVE_UP)
    try:
        with core_in_thread(home, gateway=options) as core, core.client() as c:
            events = c.subscribe(0, kinds=[EFFECT_KIND], timeout=30)

            def descriptions() -> Iterator[str]:
                for event in events:
                    if event.HasField("record"):
                        yield kpb.Effect.FromString(event.record.payload).description

            said = descriptions()
            gave_up = until_said(said, "gave up")
            assert f"the gateway did not start on port {busy}" in gave_up
            assert "crash loop: 2 failures within 60 s" in gave_up
            row = gateway_row(list(c.status().processes))
            assert row.state == cpb.PROCESS_STATE_FAILED
            assert f"did not start on port {busy}" in row.detail
            assert "`naga config set gateway.port PORT` starts it again on PORT" in row.detail

            # Any other change leaves it given up; only the port revives it.
            c.set_setting_text("model.provider", "local")
            assert gateway_row(list(c.status().processes)).state == cpb.PROCESS_STATE_FAILED

            c.set_setting_text("gateway.port", str(free))
            revived = until_said(said, "revived")
            events.cancel()
            assert revived == (
                f"gateway: revived on port {free} after it gave up on port {busy} "
                "(gateway.port changed)"
            )
            row = gateway_row(list(c.status().processes))
            assert row.state == cpb.PROCESS_STATE_RUNNING
            assert row.detail == f"http://127.0.0.1:{free}/"
            trio.run(console_answers, free, home)
            c.shutdown("test done")
            assert not core.join().failed
    finally:
        squatter.close()


def test_a_pinned_port_that_gave_up_is_restarted_there_by_the_owner(home: str) -> None:
    (busy,) = free_ports(1)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", busy))
    squatter.listen()
    options = GatewayOptions(enabled=True, port=busy, restart=FAST_GIVE_UP)
    try:
        with core_in_thread(home, gateway=options) as core, core.client() as c:
            events = c.subscribe(0, kinds=[EFFECT_KIND], timeout=30)
            said = (
                kpb.Effect.FromString(e.record.payload).description
                for e in events
                if e.HasField("record")
            )
            gave_up = until_said(said, "gave up")
            events.cancel()
            assert gave_up.endswith(
                f"gave up: --gateway-port {busy} pins this run's port; "
                f"`naga daemon restart-gateway` tries port {busy} again (once it is free)"
            )
            # Given up, it still waits for the owner (it used to end here).
            squatter.close()
            answer = c.restart_gateway("port freed")
            assert (answer.serving, answer.port) == (True, busy), answer.cause
            trio.run(console_answers, busy, home)
            c.shutdown("test done")
            assert not core.join().failed
    finally:
        squatter.close()
