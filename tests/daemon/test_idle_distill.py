"""A session idle past ``memory.distill_idle_h`` is distilled on its own, with
no archive (docs/adr/0055-idle18-idle-distillation.md). A real core (in this
process) with its provider plugin, on the fake model over HTTP; the setting
a real value of a couple of seconds (0.0005 h), set before a restart so that
the timer starts on:

* after a turn, the session's ``memory.distill`` record appears, covering
  its history through the turn's reply, and its fact is kept;
* after a second turn, a second record covers only the new messages: the
  model is shown the second message and not the first;
* an archive's distillation is shown only what no distillation covered
  (docs/adr/0058): after an idle one covered everything, the archive is
  recorded with no model call; with the setting off, a second archive is
  shown only the messages since the first; a call with no usable answer
  covered nothing, so the next archive is shown them again.
"""

from __future__ import annotations

import json
import uuid

import pytest

from naga.sdk import Client
from naga_core.agent import COVERED_NOTHING, NOTHING_NEW
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


def _said(model: ServerThread, client: Client, session: str, said: str) -> int:
    """One turn in ``session`` (nothing scripted for a distillation); the
    reply's seq."""
    model.script(Reply.answer("Nice."))
    events = list(client.run_turn(session, said, uuid.uuid4().hex, timeout=READY_S * 2))
    assert events[-1].WhichOneof("kind") == "final", events[-1]
    return events[-1].final.reply_seq


def test_an_archive_after_an_idle_distillation_is_recorded_with_no_call(
    provider_home: str, model_server: ServerThread
) -> None:
    tag = uuid.uuid4().hex[:8]
    with distill_core(provider_home) as core, core.client() as c:
        assert c.set_setting("memory.distill_idle_h", IDLE_H).HasField("seq")
        stop_core(core)
    with distill_core(provider_home) as core, core.client() as c:
        start = c.head().size
        reply = _talk(model_server, c, "idle-a", f"I keep bees {tag}.", f"Bees {tag}")
        seq, body = wait_distilled(c, "idle-a", start)
        assert (body.after_seq, body.through_seq) == (0, reply), body
        # Nothing since: the archive's end is recorded (once, ADR 0050),
        # and the model is not sent the same messages again.
        assert c.archive_session("idle-a", timeout=30).distilling
        _, end = wait_distilled(c, "idle-a", seq + 1)
        assert (end.outcome, end.after_seq, end.through_seq) == (NOTHING_NEW, reply, reply), end
        assert (end.request_blob, end.response_blob) == (b"", b""), end
        assert len([b for b in _distil_bodies(model_server) if tag in b]) == 1
        stop_core(core)
    verify_home(provider_home)


def test_an_archive_is_shown_what_no_distillation_covered(
    provider_home: str, model_server: ServerThread
) -> None:
    tag = uuid.uuid4().hex[:8]
    first, second = f"I keep bees in Dijon {tag}.", f"I play the oboe {tag}."
    with distill_core(provider_home) as core, core.client() as c:
        reply = _said(model_server, c, "arch-s", first)
        # A call with no usable answer covered nothing.
        model_server.script(Reply.answer("not the JSON asked for"))
        start = c.head().size
        assert c.archive_session("arch-s", timeout=30).distilling
        seq, failed = wait_distilled(c, "arch-s", start)
        assert failed.through_seq == COVERED_NOTHING, failed
        c.archive_session("arch-s", archived=False, timeout=30)
        # So the next archive is shown the whole history again.
        model_server.script(Reply.answer(json.dumps({"memories": [{"text": f"Bees {tag}"}]})))
        assert c.archive_session("arch-s", timeout=30).distilling
        seq, whole = wait_distilled(c, "arch-s", seq + 1)
        assert (whole.after_seq, whole.through_seq) == (0, reply), whole
        c.archive_session("arch-s", archived=False, timeout=30)
        # Talked to again: the next archive is shown the new message only.
        reply2 = _said(model_server, c, "arch-s", second)
        model_server.script(Reply.answer(json.dumps({"memories": [{"text": f"Oboe {tag}"}]})))
        assert c.archive_session("arch-s", timeout=30).distilling
        seq, new = wait_distilled(c, "arch-s", seq + 1)
        assert (new.after_seq, new.through_seq) == (reply, reply2), new
        assert new.outcome == "1 kept, 0 refused", new
        # And once everything was covered, an archive calls nobody.
        c.archive_session("arch-s", archived=False, timeout=30)
        assert c.archive_session("arch-s", timeout=30).distilling
        _, end = wait_distilled(c, "arch-s", seq + 1)
        assert (end.outcome, end.through_seq) == (NOTHING_NEW, reply2), end
        asked = [b for b in _distil_bodies(model_server) if tag in b]
        assert [first in a for a in asked] == [True, True, False]
        assert [second in a for a in asked] == [False, False, True]
        texts = [i.text for i in c.memory_items("webchat:owner")]
        assert f"Bees {tag}" in texts
        assert f"Oboe {tag}" in texts
        stop_core(core)
    verify_home(provider_home)
