"""Archiving a session answers at once; its distillation runs in the core's
background (docs/adr/0050-distill18-background-distillation.md). Real cores
(in this process, and as a child process killed with SIGKILL) with their
provider plugin, on the fake model over HTTP whose distillation answer is
held until the test releases it:

* the archive's answer comes while the model call is still held; once
  released, the session's ``memory.distill`` record appears and its fact
  is kept;
* a distillation the core's stop cancelled, or a kill cut short, left no
  record: the next start distils the session again, and it is recorded
  once (a start after that does not redo it).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from tests.agent.conftest import ServerThread, model_server
from tests.daemon.conftest import start_core_process
from tests.daemon.distill_helpers import (
    WAIT_S,
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


def _fact(tag: str) -> str:
    return f"The owner keeps bees in Dijon {tag}"


def _said(model: ServerThread, client: Client, session: str, tag: str) -> None:
    """One turn in ``session`` and the distillation answer it will get."""
    model.script(Reply.answer("Nice."))
    said = f"I keep bees in Dijon {tag}."
    events = list(client.run_turn(session, said, uuid.uuid4().hex, timeout=READY_S * 2))
    assert events[-1].WhichOneof("kind") == "final", events[-1]


def _memories(tag: str, *, hold: str = "") -> Reply:
    return Reply.answer(json.dumps({"memories": [{"text": _fact(tag)}]}), hold=hold)


def _held(model: ServerThread, name: str) -> None:
    """Return once the held distillation request has reached the model
    (failing after WAIT_S: a broken test, not a timing)."""

    async def arrived() -> None:
        with trio.fail_after(WAIT_S):
            await model.server.held(name)

    trio.from_thread.run(arrived, trio_token=model.token)


def _distil_asks(model: ServerThread, tag: str) -> int:
    """How many distillation requests of the session tagged ``tag`` came."""
    return sum(
        1
        for r in model.run(lambda: list(model.server.requests))
        if "You distil long-term memories" in r.body.decode()
        and f"I keep bees in Dijon {tag}" in r.body.decode()
    )


def test_an_archive_answers_while_its_distillation_is_held(
    provider_home: str, model_server: ServerThread
) -> None:
    tag, hold = uuid.uuid4().hex[:8], f"held-{uuid.uuid4().hex[:8]}"
    with distill_core(provider_home) as core, core.client() as c:
        _said(model_server, c, "bg-archive", tag)
        model_server.script(_memories(tag, hold=hold))
        start = c.head().size
        answer = c.archive_session("bg-archive", timeout=30)
        # Answered with the model call not yet made or still held: nothing
        # about the distillation is on the answer but that it runs.
        assert (answer.archived, answer.distilling) == (True, True), answer
        assert not answer.HasField("distill_seq")
        _held(model_server, hold)
        assert distilled(c, "bg-archive", start) == []
        # Archived again while it runs: unchanged, nothing more queued.
        again = c.archive_session("bg-archive", timeout=30)
        assert (again.HasField("seq"), again.distilling) == (False, False), again
        model_server.run(lambda: model_server.server.release(hold))
        _, body = wait_distilled(c, "bg-archive", start)
        assert body.outcome == "1 kept, 0 refused", body
        assert [i.text for i in c.memory_items("webchat:owner")].count(_fact(tag)) == 1
        # Unarchiving distils nothing.
        back = c.archive_session("bg-archive", archived=False, timeout=30)
        assert (back.archived, back.distilling) == (False, False), back
        stop_core(core)
    verify_home(provider_home)


def test_a_distillation_the_stop_cancelled_is_redone_at_the_next_start_once(
    provider_home: str, model_server: ServerThread
) -> None:
    tag, hold = uuid.uuid4().hex[:8], f"cut-{uuid.uuid4().hex[:8]}"
    with distill_core(provider_home) as core, core.client() as c:
        _said(model_server, c, "bg-stop", tag)
        model_server.script(_memories(tag, hold=hold))
        assert c.archive_session("bg-stop", timeout=30).distilling
        _held(model_server, hold)
        stop_core(core)  # with the model call in flight: cancelled, nothing recorded
    # The next start finds it due (in the stop's start-up snapshot) and
    # distils it before anything else the core is asked.
    model_server.script(_memories(tag))
    with distill_core(provider_home) as core, core.client() as c:
        _, body = wait_distilled(c, "bg-stop", 0)
        assert body.outcome == "1 kept, 0 refused", body
        stop_core(core)
    _redone_once(provider_home, model_server, tag, "bg-stop")


def test_a_distillation_a_kill_cut_short_is_redone_at_the_next_start_once(
    provider_home: str, model_server: ServerThread, tmp_path: Path
) -> None:
    tag, hold = uuid.uuid4().hex[:8], f"kill-{uuid.uuid4().hex[:8]}"
    proc = start_core_process(provider_home, tmp_path / "core.log")
    try:
        with Client.connect(provider_home) as c:
            _said(model_server, c, "bg-kill", tag)
            model_server.script(_memories(tag, hold=hold))
            assert c.archive_session("bg-kill", timeout=30).distilling
        _held(model_server, hold)
    finally:
        proc.proc.kill()  # SIGKILL: no stop, no snapshot; the ledger as it was
        proc.proc.wait()
    model_server.script(_memories(tag))
    with distill_core(provider_home) as core, core.client() as c:
        _, body = wait_distilled(c, "bg-kill", 0)
        assert body.outcome == "1 kept, 0 refused", body
        stop_core(core)
    _redone_once(provider_home, model_server, tag, "bg-kill")


def _redone_once(home: str, model: ServerThread, tag: str, session: str) -> None:
    """A start after the redo does not redo it: a marker session archived
    then is distilled by the one runner after anything the start queued,
    so once its record is there, a second one of ``session`` would be too."""
    marker = f"bg-marker-{tag}"
    with distill_core(home) as core, core.client() as c:
        _said(model, c, marker, uuid.uuid4().hex[:8])
        model.script(Reply.answer('{"memories": []}'))
        start = c.head().size
        assert c.archive_session(marker, timeout=30).distilling
        _, body = wait_distilled(c, marker, start)
        assert body.outcome == "nothing worth remembering", body
        assert [b.outcome for b in distilled(c, session)] == ["1 kept, 0 refused"]
        assert [i.text for i in c.memory_items("webchat:owner")].count(_fact(tag)) == 1
        stop_core(core)
    # The cut call and its redo; the marker's is its own.
    assert _distil_asks(model, tag) == 2
    verify_home(home)
