"""The owner restarts a gateway in place (``RestartGateway``, ``naga daemon
restart-gateway``): one that gave up because another program held its port
comes back on the same port once the port is free, its failures forgotten;
while the port is still held the answer is the failure's cause; a running
gateway is restarted; a core without a gateway and a non-owner are
refused."""

from __future__ import annotations

import json

import pytest
import trio

from naga.sdk import errors
from naga.tokens import RejectReason, Risk
from naga.v1 import core_pb2 as cpb
from naga.v1 import kernel_pb2 as kpb
from naga_core.cli import main
from naga_core.daemon import GatewayOptions
from naga_core.kernel._kernel import EFFECT_KIND
from tests.daemon.conftest import core_in_thread, home
from tests.daemon.token_helpers import refused, token_core
from tests.gateway._ports import (
    FAST_GIVE_UP,
    console_answers,
    free_ports,
    gateway_row,
    held_port_setting,
    until_said,
)

__all__ = ["home"]  # the fixture, used by name below


def _cli(capsys: pytest.CaptureFixture[str], home: str) -> tuple[int, dict[str, object]]:
    code = main(["daemon", "restart-gateway", "--json", "--home", home])
    return code, json.loads(capsys.readouterr().out)


def test_a_gateway_that_gave_up_restarts_on_the_same_port_once_it_is_free(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (busy,) = free_ports(1)
    squatter = held_port_setting(home, busy)
    options = GatewayOptions(enabled=True, restart=FAST_GIVE_UP)
    try:
        with core_in_thread(home, gateway=options) as core, core.client() as c:
            events = c.subscribe(0, kinds=[EFFECT_KIND], timeout=30)
            said = (
                kpb.Effect.FromString(e.record.payload).description
                for e in events
                if e.HasField("record")
            )
            gave_up = until_said(said, "gave up")
            assert f"`naga daemon restart-gateway` tries port {busy} again" in gave_up
            row = gateway_row(list(c.status().processes))
            assert row.state == cpb.PROCESS_STATE_FAILED
            assert "naga daemon restart-gateway" in row.detail

            # Still held: the answer is the cause, and it gives up again.
            answer = c.restart_gateway("port still held")
            assert not answer.serving
            assert answer.port == busy
            assert answer.url == ""
            assert answer.cause.startswith(f"the gateway did not start on port {busy}: ")
            assert answer.gateway.role == "gateway"
            assert answer.gateway.state != cpb.PROCESS_STATE_RUNNING
            until_said(said, "gave up")
            code, doc = _cli(capsys, home)
            assert code == 1
            assert doc["serving"] is False
            assert f"did not start on port {busy}" in str(doc["cause"])
            until_said(said, "gave up")

            squatter.close()
            answer = c.restart_gateway("port freed")
            assert answer.serving, answer.cause
            assert (answer.port, answer.cause) == (busy, "")
            assert answer.url == f"http://127.0.0.1:{busy}/"
            assert answer.gateway.state == cpb.PROCESS_STATE_RUNNING
            row = gateway_row(list(c.status().processes))
            assert row.state == cpb.PROCESS_STATE_RUNNING
            assert row.detail == f"http://127.0.0.1:{busy}/"
            trio.run(console_answers, busy, home)
            restarted = until_said(said, "restarted")
            assert restarted == (
                f"gateway: restarted on port {busy} (RestartGateway by owner: port freed)"
            )

            # A running gateway is restarted too: a new process on the same port.
            pid = row.pid
            code, doc = _cli(capsys, home)
            assert code == 0
            assert doc == {
                "serving": True,
                "port": busy,
                "url": f"http://127.0.0.1:{busy}/",
                "cause": "",
                "state": "running",
            }
            events.cancel()
            assert gateway_row(list(c.status().processes)).pid != pid
            trio.run(console_answers, busy, home)
            code = main(["daemon", "restart-gateway", "--home", home])
            assert code == 0
            assert capsys.readouterr().out == (
                f"gateway restarted: the console is at http://127.0.0.1:{busy}/\n"
            )
            c.shutdown("test done")
            assert not core.join().failed
    finally:
        squatter.close()


def test_a_core_without_a_gateway_and_a_non_owner_are_refused(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with token_core(home) as c:
        with pytest.raises(errors.FailedPrecondition, match="runs without a gateway"):
            c.owner.restart_gateway()
        code = main(["daemon", "restart-gateway", "--home", home])
        assert code == 1
        assert "--no-gateway" in capsys.readouterr().err
        token = c.mint("gateway", risk=Risk.R4)
        with (
            c.holder(token) as gateway,
            refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE),
        ):
            gateway.restart_gateway("not mine to ask")
        with pytest.raises(errors.InvalidArgument, match="reason"):
            c.owner.restart_gateway("x" * 501)
