"""A rollback past a turn that spent tokens, through the gateway's token (the
console's "undo to here" is not the owner's CLI): it refunds the turn's
budget, which raises nothing once the turn has ended (INV-6), so it is
done; while the turn still runs, its token could spend the refund, so it is
refused as a raise. Through the real core, executor and fake model."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest
import trio

from naga.sdk import Client
from naga.sdk.errors import PermissionDenied
from naga.tokens import Risk, TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core.authz import SPENT_FAMILY
from tests.agent.conftest import ServerThread, final, turn
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply


def _last_seq(client: Client) -> int:
    seq = -1
    while page := client.records(seq + 1, 500):
        seq = page[-1].seq
    return seq


def _gateway(agent_core: InProcessCore, owner: Client) -> Client:
    token = owner.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4).token
    return Client.connect(agent_core.info.home, credential=token)


def _refunds(changes: Iterable[cpb.StateChange]) -> list[cpb.StateChange]:
    return [c for c in changes if c.family == SPENT_FAMILY]


def test_the_gateway_undoes_an_ended_turn_that_spent_tokens(
    agent_core: InProcessCore, client: Client, model_server: ServerThread
) -> None:
    keep = _last_seq(client)
    model_server.script(Reply.answer("spent some", usage=(30, 6)))
    assert final(turn(client, "s-refund", "spend")).text == "spent some"
    with _gateway(agent_core, client) as gw:
        preview = gw.rollback(keep, dry_run=True).preview
        assert _refunds(preview.changes), preview  # the turn did spend
        done = gw.rollback(keep)
    assert done.HasField("seq")
    assert _refunds(done.preview.changes)


def test_the_gateway_cannot_refund_a_running_turn(
    agent_core: InProcessCore, client: Client, model_server: ServerThread
) -> None:
    keep = _last_seq(client)
    model_server.script(
        Reply.answer(tool_calls=(("c1", "danger__echo", '{"text": "x"}'),), usage=(30, 6)),
        Reply.answer("finally", usage=(1, 1), hold="refund-running"),
    )
    events: list[tpb.TurnEvent] = []
    runner = threading.Thread(target=lambda: events.extend(turn(client, "s-live", "go")))
    runner.start()
    try:
        # The second model call is held: the first one's debit is in.
        _arrived(model_server, "refund-running")
        refused = pytest.raises(PermissionDenied, match=r"would raise privileges \(budget\.spent/")
        with _gateway(agent_core, client) as gw, refused:
            gw.rollback(keep)
    finally:
        model_server.run(lambda: model_server.server.release("refund-running"))
        runner.join(60)
    assert final(events).text == "finally"
    with _gateway(agent_core, client) as gw:  # ended now: the same undo is done
        assert gw.rollback(keep).HasField("seq")


def _arrived(model_server: ServerThread, name: str) -> None:
    """Block until the ``hold=name`` request has reached the fake model."""

    async def arrived() -> None:
        await model_server.server.held(name)

    trio.from_thread.run(arrived, trio_token=model_server.token)
