"""Replies stream per chunk: the provider plugin process relays the model's
text as it arrives (Progress frames on the plugin wire), the core turns it
into TextDelta events on the turn's stream, and the recorded answer is
still the whole one. Real core, executor and provider processes against the
fake model over loopback HTTP; the fake holds its stream at gates the test
opens, so "before the answer is complete" is a fact, not a timing."""

from __future__ import annotations

import dataclasses
import os
import signal
import uuid
from collections.abc import Iterator

import pytest
import trio

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from tests.agent.conftest import AGENT, ServerThread, error, final, running_core, turn
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S


@pytest.fixture(scope="module")
def agent_core(model_server: ServerThread) -> Iterator[InProcessCore]:
    # The test holds the model's stream while it looks at what arrived: a
    # read timeout that a loaded machine cannot trip (the conftest's 1 s is
    # for the stall tests).
    with running_core(model_server, dataclasses.replace(AGENT, model_read_timeout_s=20.0)) as core:
        yield core


class Watch:
    """One turn's stream, read event by event."""

    def __init__(self, client: Client, session: str, text: str) -> None:
        key = uuid.uuid4().hex
        self._events: Iterator[tpb.TurnEvent] = iter(
            client.run_turn(session, text, key, timeout=READY_S * 2)
        )
        self.seen: list[tpb.TurnEvent] = []

    def next_delta(self) -> str:
        """The next delta's text (only 'accepted' may come before it)."""
        for event in self._events:
            self.seen.append(event)
            kind = event.WhichOneof("kind")
            if kind == "delta":
                return event.delta.text
            assert kind == "accepted", event
        raise AssertionError(f"the stream ended before a delta: {self.seen}")

    def rest(self) -> list[tpb.TurnEvent]:
        self.seen += list(self._events)
        return self.seen


def deltas(events: list[tpb.TurnEvent]) -> list[str]:
    return [e.delta.text for e in events if e.WhichOneof("kind") == "delta"]


def trace_kinds(client: Client, turn_id: str) -> list[str]:
    kinds: list[str] = []
    after = 0
    while page := client.records(after, 500):
        for r in page:
            if (
                r.kind.startswith("turn.")
                and apb.TurnRecord.FromString(r.payload).turn_id == turn_id
            ):
                kinds.append(r.kind)
        after = page[-1].seq + 1
    return kinds


def test_deltas_arrive_while_the_model_is_still_answering(
    client: Client, model_server: ServerThread
) -> None:
    first, second = trio.Event(), trio.Event()
    model_server.script(Reply.held("Hello there, streaming world!", first, second, pieces=4))
    watch = Watch(client, "s-stream", "stream please")
    # The server holds everything after its first piece until `first` is set:
    # this delta can only have come from the stream, mid-answer.
    assert watch.next_delta() == "Hello th"
    model_server.run(first.set)
    assert watch.next_delta() == "ere, str"
    model_server.run(second.set)
    events = watch.rest()
    assert [e.index for e in events] == list(range(len(events)))
    shown = deltas(events)
    assert len(shown) >= 3
    assert "".join(shown) == final(events).text == "Hello there, streaming world!"
    # Deltas are presentation: the trace is one record per model message, as before.
    assert trace_kinds(client, events[0].accepted.turn_id) == [
        "turn.message",
        "turn.model",
        "turn.reply",
    ]


CALL = '{"name": "danger__echo", "arguments": {"text": "ping"}}'
TEXT_CALLS = {
    "tagged": "Let me check.\n<tool_call>" + CALL + "</tool_call>",
    "fenced": "Let me check.\n```json\n" + CALL + "\n```",
    "bare": CALL,
}


@pytest.mark.parametrize("form", TEXT_CALLS, ids=TEXT_CALLS.keys())
def test_a_tool_call_written_as_text_never_streams(
    client: Client, model_server: ServerThread, form: str
) -> None:
    model_server.script(
        Reply.answer(TEXT_CALLS[form], pieces=17), Reply.answer("The echo said ping.")
    )
    events = turn(client, f"s-textcall-{form}", "echo ping")
    kinds = [e.WhichOneof("kind") for e in events]
    assert "tool_started" in kinds  # it was a call, and it ran
    shown = deltas(events)
    for text in shown:
        for piece in ("{", "danger", "tool_call", "`"):
            assert piece not in text, shown
    lead = "" if form == "bare" else "Let me check."
    assert "".join(shown) == lead + "The echo said ping."
    assert final(events).text == "The echo said ping."


def test_abort_mid_stream(client: Client, model_server: ServerThread) -> None:
    gate = trio.Event()
    model_server.script(Reply.held("An answer that is never finished", gate, pieces=4))
    watch = Watch(client, "s-abort-stream", "go on")
    assert watch.next_delta()
    client.abort_turn("s-abort-stream")
    events = watch.rest()
    assert error(events).kind == tpb.TURN_ERROR_KIND_ABORTED
    model_server.run(gate.set)  # the abandoned model call ends; nobody sees it
    model_server.script(Reply.answer("fresh"))
    after = turn(client, "s-abort-stream", "again")
    assert "".join(deltas(after)) == final(after).text == "fresh"


def test_a_provider_crash_mid_stream_is_a_model_error(
    client: Client, model_server: ServerThread
) -> None:
    gate = trio.Event()
    model_server.script(Reply.held("This provider is about to die", gate, pieces=4))
    watch = Watch(client, "s-crash-stream", "hello")
    assert watch.next_delta()
    (provider,) = (p for p in client.status().processes if p.role.startswith("provider:"))
    os.kill(provider.pid, signal.SIGKILL)
    failed = error(watch.rest())
    assert failed.kind == tpb.TURN_ERROR_KIND_MODEL
    assert "the model provider could not be reached" in failed.message
    assert f"its worker (pid {provider.pid}) ended" in failed.message
    model_server.run(gate.set)
    model_server.script(Reply.answer("rebuilt"))
    assert final(turn(client, "s-crash-stream", "still there?")).text == "rebuilt"
