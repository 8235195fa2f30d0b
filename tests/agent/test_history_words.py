"""``naga history`` names a turn's records in words (what each is, which
turn of which session, which tool), through the real core, its executor and
provider plugin and the fake model; and never with the words of the turn,
which are sealed (docs/adr/0037)."""

from __future__ import annotations

import json
import uuid

from naga.sdk import Client
from tests.agent.conftest import ServerThread, agent_core, final, model_server, turn
from tests.fakes.model_server import Reply

__all__ = ["agent_core", "model_server"]  # the fixtures, used by name


def test_a_turns_records_read_in_words_without_its_text(
    client: Client, model_server: ServerThread
) -> None:
    secret = "zq7hist" + uuid.uuid4().hex[:10]
    model_server.script(
        Reply.answer(tool_calls=(("c1", "danger__echo", json.dumps({"text": secret})),)),
        Reply.answer(f"echoed {secret}"),
    )
    session = "hist-" + uuid.uuid4().hex[:6]
    events = turn(client, session, f"echo {secret}")
    done = final(events)
    tid = events[0].accepted.turn_id
    words = {
        e.kind: e.description
        for e in client.history(limit=40).entries
        if f"turn {tid} " in e.description
    }
    where = f"turn {tid} of session {session}"
    assert words["turn.message"] == f"message starting {where}"
    assert words["turn.tool_call"] == f"tool call danger.echo of {where} (about to run)"
    assert words["turn.tool"] == f"tool danger.echo of {where} answered"
    assert words["turn.model"].startswith(f"model call of {where} via ")
    assert words["turn.reply"] == f"reply ending {where} (2 model calls, 1 tool call)"
    assert done.text == f"echoed {secret}"
    assert not any(secret in w for w in words.values())
