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
import os
import uuid
from collections.abc import Generator
from contextlib import contextmanager

import pytest

from naga.sdk import Client
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import PLUGINS, ServerThread, model_server, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.daemon.distill_helpers import distilled, wait_distilled
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S, STEADY

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow

AGENT = AgentConfig(executors=1, turn_timeout_s=60).with_budgets(100_000)
#: 1.8 s: a real setting value, small enough for a test.
IDLE_H = 0.0005
PROMPT = "You distil long-term memories"


@pytest.fixture
def provider_home(home: str, model_server: ServerThread) -> str:
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    return home


@contextmanager
def _core(home: str) -> Generator[InProcessCore]:
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY)
    with core_in_thread(home, plugins=config, agent=AGENT) as core:
        yield core


def _stop(core: InProcessCore) -> None:
    with core.client() as c:
        c.shutdown("test: stop")
    assert not core.join().failed


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
    with _core(provider_home) as core, core.client() as c:
        assert c.set_setting("memory.distill_idle_h", IDLE_H).HasField("seq")
        _stop(core)
    with _core(provider_home) as core, core.client() as c:
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
        _stop(core)
    verify_home(provider_home)
