"""Turns end to end: naga chat's path through the core, a sandboxed
executor and the provider plugin process, against the fake model over real
HTTP on loopback."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga.sdk.errors import FailedPrecondition, InvalidArgument, NotFound
from naga.v1 import agent_pb2 as apb
from naga.v1 import ledger_pb2 as lpb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core._home import Home
from naga_core._store import blob_store
from naga_core.cli import main as cli_main
from naga_core.memory import Sealer, is_sealed_blob
from tests.agent.conftest import AGENT, ServerThread, error, final, running_core, turn
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S


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


def _records(client: Client) -> list[lpb.Record]:
    out: list[lpb.Record] = []
    while True:
        page = client.records(len(out) and out[-1].seq + 1, 500)
        if not page:
            return out
        out += page


def test_the_whole_trace_is_in_the_ledger(
    client: Client, model_server: ServerThread, agent_core: InProcessCore
) -> None:
    model_server.script(
        Reply.answer(tool_calls=(("call_9", "danger__echo", '{"text": "x"}'),), usage=(20, 4)),
        Reply.answer("done", usage=(25, 2)),
    )
    events = turn(client, "s-trace", "trace me")
    turn_id = events[0].accepted.turn_id
    mine = [
        (r.kind, apb.TurnRecord.FromString(r.payload), r)
        for r in _records(client)
        if r.kind.startswith("turn.") and apb.TurnRecord.FromString(r.payload).turn_id == turn_id
    ]
    assert [k for k, _, _ in mine] == [
        "turn.message",
        "turn.model",
        "turn.tool_call",  # durable before the tool runs (docs/design/recovery.md)
        "turn.tool",
        "turn.model",
        "turn.reply",
    ]
    message, first, intent, tool, second, reply = (body for _, body, _ in mine)
    assert (intent.tool, intent.call_id, intent.arguments_json) == (
        "danger.echo",
        "call_9",
        '{"text": "x"}',
    )
    assert message.text == "trace me"
    assert message.trust == "owner"
    assert mine[0][2].seq == events[0].accepted.message_seq
    home = Home(agent_core.info.home)
    blobs, sealer = blob_store(home), Sealer.reader(home)

    def opened(digest: bytes) -> bytes:
        # Sealed under the owner's key as stored (docs/adr/0037).
        data = blobs.get(digest)
        assert is_sealed_blob(data)
        out = sealer.open_blob(data)
        assert out is not None
        return out

    for model, record in ((first, mine[1][2]), (second, mine[4][2])):
        assert list(record.blob_refs) == [model.request_blob, model.response_blob]
        request = mpb.ChatRequest.FromString(opened(model.request_blob))
        assert request.messages[0].role == mpb.ROLE_SYSTEM
        assert mpb.ChatResponse.FromString(opened(model.response_blob)).provider == "fake"
        assert model.duration_us > 0
    assert (first.prompt_tokens, first.completion_tokens) == (20, 4)
    assert (tool.tool, tool.call_id, tool.ok) == ("danger.echo", "call_9", True)
    assert json.loads(tool.result_json) == {"echo": "x"}
    assert reply.text == "done"
    assert (reply.model_calls, reply.tool_calls) == (2, 1)
    assert (reply.prompt_tokens, reply.completion_tokens) == (45, 6)
    assert reply.message_seq == message_seq_of(events)


def message_seq_of(events: list[tpb.TurnEvent]) -> int:
    return events[0].accepted.message_seq


def test_a_guest_cannot_reach_an_r3_tool_even_when_the_model_asks(
    client: Client, model_server: ServerThread, agent_core: InProcessCore
) -> None:
    client.set_trust("webchat:guest", "guest", by_owner=True)
    model_server.script(
        Reply.answer(tool_calls=(("call_w", "danger__wipe", "{}"),)),
        Reply.answer("I may not do that."),
    )
    events = turn(client, "s-guest", "wipe everything", peer="webchat:guest")
    finished = next(e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished")
    assert not finished.ok
    assert "risk R3 is above the session's ceiling R0 (trust guest)" in finished.error
    assert final(events).text == "I may not do that."
    requests = model_server.run(lambda: [r.json() for r in model_server.server.requests[-2:]])
    # The guest's model was never shown the tool, and saw the refusal.
    names = [t["function"]["name"] for t in requests[0].get("tools", [])]
    assert "danger__echo" in names
    assert "danger__wipe" not in names
    tool_msgs = [m for m in requests[1]["messages"] if m.get("role") == "tool"]
    assert "not allowed in this session" in tool_msgs[-1]["content"]
    wiped = Path(agent_core.info.home) / "work" / "plugins" / "danger" / "wiped"
    assert not wiped.exists()


def test_an_owner_turn_may_call_the_r3_tool(
    client: Client, model_server: ServerThread, agent_core: InProcessCore
) -> None:
    model_server.script(
        Reply.answer(tool_calls=(("call_o", "danger__wipe", "{}"),)), Reply.answer("wiped")
    )
    # R3 is at tools.approve_from: the call waits until the owner allows it.
    stream = client.run_turn("s-owner", "wipe it", uuid.uuid4().hex, timeout=READY_S * 2)
    # The turn says when the approval is asked (tool_started comes before
    # it is registered): the owner's list holds it from then on.
    events = [next(e for e in stream if e.WhichOneof("kind") == "approval")]
    (pending,) = client.approvals()
    assert pending.tool == "danger.wipe"
    assert pending.id == events[0].approval.id
    client.decide_approval(pending.id, True)
    events += list(stream)
    finished = next(e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished")
    assert finished.ok, finished.error
    assert final(events).text == "wiped"


def test_budget_exhausted_mid_turn_ends_it_cleanly(
    client: Client, model_server: ServerThread
) -> None:
    # The turn's budget is 1000 tokens (conftest): the first call spends it.
    model_server.script(
        Reply.answer(tool_calls=(("call_b", "danger__echo", '{"text": "b"}'),), usage=(900, 200)),
    )
    events = turn(client, "s-budget", "spend it all")
    failed = error(events)
    assert failed.kind == tpb.TURN_ERROR_KIND_BUDGET
    assert "budget of 1000 tokens is spent" in failed.message
    kinds = [e.WhichOneof("kind") for e in events]
    assert "tool_finished" in kinds  # the tool ran; the next model call was refused
    # A new turn gets a new budget: the session goes on.
    model_server.script(Reply.answer("fresh", usage=(10, 1)))
    assert final(turn(client, "s-budget", "again")).text == "fresh"


def test_a_repeated_idempotency_key_replays_the_turn(
    client: Client, model_server: ServerThread
) -> None:
    model_server.script(Reply.answer("once"))
    before = model_server.run(lambda: len(model_server.server.requests))
    first = turn(client, "s-idem", "hello", key="k-1")
    again = turn(client, "s-idem", "hello", key="k-1")
    assert final(first).text == final(again).text == "once"
    assert again[0].accepted.replayed
    assert again[0].accepted.message_seq == first[0].accepted.message_seq
    assert final(again).reply_seq == final(first).reply_seq
    assert model_server.run(lambda: len(model_server.server.requests)) == before + 1


def test_history_feeds_the_next_prompt(client: Client, model_server: ServerThread) -> None:
    model_server.script(Reply.answer("Nice to meet you, Ada."), Reply.answer("You are Ada."))
    turn(client, "s-hist", "I am Ada")
    assert final(turn(client, "s-hist", "who am I?")).text == "You are Ada."
    last = model_server.run(model_server.server.requests[-1].json)
    contents = [m.get("content") for m in last["messages"]]
    assert contents[1:] == ["I am Ada", "Nice to meet you, Ada.", "who am I?"]
    entries = client.session_history("s-hist")
    assert [(e.role, e.text) for e in entries] == [
        (tpb.HISTORY_ROLE_USER, "I am Ada"),
        (tpb.HISTORY_ROLE_ASSISTANT, "Nice to meet you, Ada."),
        (tpb.HISTORY_ROLE_USER, "who am I?"),
        (tpb.HISTORY_ROLE_ASSISTANT, "You are Ada."),
    ]
    assert client.sessions()[0].session == "s-hist"


def test_bad_requests_are_refused_with_the_field_named(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="session 'Bad Name' is not a session name"):
        list(client.run_turn("Bad Name", "hi", "k"))
    with pytest.raises(InvalidArgument, match="text is required"):
        list(client.run_turn("s-bad", "", "k"))
    with pytest.raises(InvalidArgument, match="idempotency_key is required"):
        list(client.run_turn("s-bad", "hi", ""))
    with pytest.raises(NotFound, match="no session 'nobody'"):
        client.session_history("nobody")


def test_naga_chat_prints_the_reply(
    agent_core: InProcessCore, model_server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    model_server.script(Reply.answer("Hello from the fake model."))
    code = cli_main(["chat", "hi there", "--session", "s-cli", "--home", agent_core.info.home])
    assert code == 0
    assert capsys.readouterr().out == "Hello from the fake model.\n"
    model_server.script(Reply.error(401, "bad key"))
    code = cli_main(["chat", "hi", "--session", "s-cli", "--json", "--home", agent_core.info.home])
    assert code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["error_kind"] == "model"
    assert "check api_key" in data["error"]


@pytest.fixture(scope="module")
def patient_core(model_server: ServerThread) -> Iterator[InProcessCore]:
    """A core whose provider waits a minute for a model's next byte: a turn
    held in its model call stays there until the test acts (the shared
    core's 1 s read timeout would end it first when the machine is slow)."""
    with running_core(model_server, replace(AGENT, model_read_timeout_s=60.0)) as core:
        yield core


@pytest.fixture
def patient(patient_core: InProcessCore) -> Iterator[Client]:
    with patient_core.client() as c:
        yield c


def _turn_stuck_in_its_model_call(
    core: InProcessCore, model_server: ServerThread, session: str, text: str
) -> tuple[threading.Thread, list[tpb.TurnEvent]]:
    """A turn running in a thread, returned once it is inside its model call
    (the fake model holds its reply until released: readiness is the fake
    server's signal that the request arrived). Its events arrive in the list;
    the caller releases the hold (``session``) when done."""
    model_server.script(Reply.answer("too late", hold=session))
    events: list[tpb.TurnEvent] = []
    key = uuid.uuid4().hex

    def run() -> None:
        with core.client() as c:
            events.extend(c.run_turn(session, text, key, timeout=60.0))

    runner = threading.Thread(target=run)
    runner.start()

    async def arrived() -> None:
        with trio.fail_after(30):
            await model_server.server.held(session)

    trio.from_thread.run(arrived, trio_token=model_server.token)
    return runner, events


def _release(model_server: ServerThread, session: str) -> None:
    model_server.run(lambda: model_server.server.release(session))


def test_abort_ends_a_turn_stuck_in_a_model_call_and_the_session_goes_on(
    patient: Client, patient_core: InProcessCore, model_server: ServerThread
) -> None:
    client = patient
    runner, events = _turn_stuck_in_its_model_call(
        patient_core, model_server, "s-abort", "take your time"
    )
    turn_id = client.abort_turn("s-abort")
    runner.join(30)
    _release(model_server, "s-abort")
    assert not runner.is_alive()
    assert events[0].accepted.turn_id == turn_id
    stopped = error(events)
    assert stopped.kind == tpb.TURN_ERROR_KIND_ABORTED
    assert stopped.message == "the turn was aborted"
    with pytest.raises(FailedPrecondition, match="session s-abort runs no turn"):
        client.abort_turn("s-abort")
    model_server.script(Reply.answer("still here", usage=(5, 2)))
    assert final(turn(client, "s-abort", "are you there?")).text == "still here"


def test_an_executor_killed_mid_turn_ends_the_turn_and_is_rebuilt(
    patient: Client, patient_core: InProcessCore, model_server: ServerThread
) -> None:
    import os
    import signal

    client = patient
    runner, events = _turn_stuck_in_its_model_call(patient_core, model_server, "s-kill", "hold on")
    # A row without a pid is an executor still starting (os.kill(0) would
    # signal this test's own process group); the one running the turn has one.
    executors = [p for p in client.status().processes if p.role.startswith("executor:") and p.pid]
    assert executors, "no executor in the status"
    for p in executors:  # the one running the turn is among them
        os.kill(p.pid, signal.SIGKILL)
    runner.join(60)
    _release(model_server, "s-kill")
    assert not runner.is_alive()
    failed = error(events)
    assert failed.kind == tpb.TURN_ERROR_KIND_EXECUTOR, failed
    assert failed.message
    # The pool is rebuilt (new pids) and the session goes on.
    model_server.script(Reply.answer("back again", usage=(5, 2)))
    assert final(turn(client, "s-kill", "again?")).text == "back again"
    now = {p.pid for p in client.status().processes if p.role.startswith("executor:")}
    assert now.isdisjoint({p.pid for p in executors})


def test_the_deadline_counts_from_the_channels_acceptance(
    client: Client, model_server: ServerThread
) -> None:
    """A message its channel held for the whole turn timeout (60 s here) is
    recorded and ends with a clear error, without a model call: the turn's
    deadline started at the channel's acceptance, not at the core's."""
    asked = model_server.run(lambda: len(model_server.server.requests))
    events = list(client.run_turn("s-late", "too late?", uuid.uuid4().hex, waited_ms=60_000))
    assert events[0].accepted.message_seq > 0
    late = error(events)
    assert late.kind == tpb.TURN_ERROR_KIND_INTERNAL, late
    assert "deadline (60 s from its channel's acceptance) passed" in late.message
    assert "held it 60 s" in late.message
    assert model_server.run(lambda: len(model_server.server.requests)) == asked
    # Held briefly, it runs as any other.
    model_server.script(Reply.answer("in time", usage=(5, 2)))
    events = list(client.run_turn("s-late", "now?", uuid.uuid4().hex, waited_ms=500))
    assert final(events).text == "in time"
