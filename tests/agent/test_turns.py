"""Turns end to end: naga chat's path through the core, a sandboxed
executor and the provider plugin process, against the fake model over real
HTTP on loopback."""

from __future__ import annotations

import json

from naga.sdk import Client
from tests.agent.conftest import ServerThread, final, turn
from tests.fakes.model_server import Reply


def test_a_multi_step_tool_using_turn(client: Client, model_server: ServerThread) -> None:
    model_server.script(
        Reply.answer(tool_calls=(("call_1", "danger__echo", '{"text": "ping"}'),)),
        Reply.answer("The echo said ping.", usage=(30, 6)),
    )
    events = turn(client, "s-tools", "echo ping please")
    kinds = [e.WhichOneof("kind") for e in events]
    assert kinds[0] == "accepted"
    assert [e.index for e in events] == list(range(len(events)))
    assert "tool_started" in kinds
    assert "tool_finished" in kinds
    done = final(events)
    assert done.text == "The echo said ping."
    assert (done.model_calls, done.tool_calls) == (2, 1)
    finished = next(e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished")
    assert finished.ok
    assert json.loads(finished.result_json) == {"echo": "ping"}
    # The second request carried the tool's result back to the model.
    second = model_server.run(model_server.server.requests[-1].json)
    assert any(
        m.get("role") == "tool" and "ping" in m.get("content", "") for m in second["messages"]
    )
