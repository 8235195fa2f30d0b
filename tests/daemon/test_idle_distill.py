"""A session idle past ``memory.distill_idle_h`` is distilled on its own, with
no archive (docs/adr/0055-idle18-idle-distillation.md). A real core (in this
process) with its provider plugin, on the fake model over HTTP; the setting
a real value of a couple of seconds (0.0005 h), set before a restart so that
the timer starts on:

* after a turn, the session's ``memory.distill`` record appears, covering
  its history through the turn's reply, and its fact is kept;
* after a second turn, a second record covers only the new messages: the
  model is shown the second message and not the first.
"""

from __future__ import annotations

import json
import uuid

import pytest

from naga.sdk import Client
from tests.agent.conftest import ServerThread, model_server
from tests.daemon.distill_helpers import (
    distill_core,
    distilled,
    provider_home,
    stop_core,
    wait_distilled,
)
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S

__all__ = ["model_server", "provider_home"]  # the fixtures, used by name

pytestmark = pytest.mark.slow

#: 1.8 s: a real setting value, small enough for a test.
IDLE_H = 0.0005
PROMPT = "You distil long-term memories"


def _talk(model: ServerThread, client: Client, session: str, said: str, fact: str) -> int:
    """One turn in ``session``, with the distillation answer scripted behind
    its reply (so nothing else can take it); the reply's seq."""
    memories = json.dumps({"memories": [{"text": fact}]})
    model.script(Reply.answer("Nice."), Reply.answer(memories))
    events = list(client.run_turn(session, said, uuid.uuid4().hex, timeout=READY_S * 2))
    assert events[-1].WhichOneof("kind") == "final", events[-1]
    return events[-1].final.reply_seq


def _distil_bodies(model: ServerThread) -> list[str]:
    return [
        r.body.decode()
        for r in model.run(lambda: list(model.server.requests))
        if PROMPT in r.body.decode()
    ]


def test_an_idle_session_is_distilled_without_an_archive_new_messages_only(
    provider_home: str, model_server: ServerThread
) -> None:
    tag = uuid.uuid4().hex[:8]
    first, second = f"I keep bees in Dijon {tag}.", f"I play the oboe {tag}."
    with distill_core(provider_home) as core, core.client() as c:
        assert c.set_setting("memory.distill_idle_h", IDLE_H).HasField("seq")
        stop_core(core)
    with distill_core(provider_home) as core, core.client() as c:
        start = c.head().size
        reply = _talk(model_server, c, "idle-s", first, f"The owner keeps bees {tag}")
        seq, body = wait_distilled(c, "idle-s", start)
        assert (body.outcome, body.after_seq, body.through_seq) == ("1 kept, 0 refused", 0, reply)
        reply2 = _talk(model_server, c, "idle-s", second, f"The owner plays the oboe {tag}")
        _, again = wait_distilled(c, "idle-s", seq + 1)
        assert (again.after_seq, again.through_seq) == (reply, reply2), again
        assert again.outcome == "1 kept, 0 refused", again
        asked = [b for b in _distil_bodies(model_server) if tag in b]
        assert len(asked) == 2
        assert [first in a for a in asked] == [True, False]
        assert [second in a for a in asked] == [False, True]
        texts = [i.text for i in c.memory_items("webchat:owner")]
        assert f"The owner plays the oboe {tag}" in texts
        assert len(distilled(c, "idle-s")) == 2
        stop_core(core)
    verify_home(provider_home)
