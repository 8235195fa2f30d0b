"""Steering a running turn through the real core (its executor, its
provider plugin; the model is the fake on loopback): a steer that arrives
while the model writes the turn's last answer is seen by one more model
call of the turn, whose answer is the turn's reply (docs/adr/0059)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.sdk.errors import FailedPrecondition
from naga.v1 import turn_pb2 as tpb
from naga_core.cli import main as cli_main
from tests.agent.conftest import AGENT, ServerThread, final, running_core
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    # A minute for the model's next byte: a held answer stays held until
    # the test lets it go, however slow the machine.
    with running_core(model_server, replace(AGENT, model_read_timeout_s=60.0)) as core:
        yield core


@pytest.fixture
def client(core: InProcessCore) -> Iterator[Client]:
    with core.client() as c:
        yield c


def _held(model_server: ServerThread, name: str) -> None:
    async def arrived() -> None:
        with trio.fail_after(30):
            await model_server.server.held(name)

    trio.from_thread.run(arrived, trio_token=model_server.token)


def _start(core: InProcessCore, session: str, text: str) -> tuple[threading.Thread, list[Any]]:
    events: list[tpb.TurnEvent] = []

    def run() -> None:
        with core.client() as c:
            events.extend(c.run_turn(session, text, uuid.uuid4().hex, timeout=60.0))

    runner = threading.Thread(target=run)
    runner.start()
    return runner, events


def _tail(model_server: ServerThread, n: int) -> list[tuple[str, str]]:
    """The last ``n`` messages of the model's latest request: (role, text)."""

    def latest() -> dict[str, Any]:  # read on the server's own thread
        return model_server.server.requests[-1].json()

    body = model_server.run(latest)
    return [(m["role"], m.get("content") or "") for m in body["messages"][-n:]]


def test_a_steer_during_the_last_answer_is_seen_by_one_more_model_call(
    client: Client,
    core: InProcessCore,
    model_server: ServerThread,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = "s-steer-last"
    model_server.script(
        Reply.answer("paris, as a place", hold=session), Reply.answer("paris, in one line")
    )
    runner, events = _start(core, session, "tell me about paris")
    _held(model_server, session)
    # The model is writing what would be the turn's last answer (no tool call).
    seq = client.steer_turn(session, "keep it to one line", "steer-1")
    model_server.run(lambda: model_server.server.release(session))
    runner.join(60)
    assert not runner.is_alive()
    # The turn asked once more: its earlier answer, then the steer.
    assert _tail(model_server, 3) == [
        ("user", "tell me about paris"),
        ("assistant", "paris, as a place"),
        ("user", "keep it to one line"),
    ]
    end = final(events)
    assert end.text == "paris, in one line"
    # Both answers streamed (the later one as a paragraph of its own); the
    # reply, in the history too, is the later one (a steer is the turn's,
    # not an entry of the history).
    streamed = "".join(e.delta.text for e in events if e.WhichOneof("kind") == "delta")
    assert streamed == "paris, as a place\n\nparis, in one line"
    history = client.session_history(session)
    assert [e.text for e in history] == ["tell me about paris", "paris, in one line"]
    # A resend of the steer's key (a client after a reconnect) steers
    # nothing again: its seq, the turn over.
    assert client.steer_turn(session, "keep it to one line", "steer-1") == seq
    with pytest.raises(FailedPrecondition, match="runs no turn"):
        client.steer_turn(session, "too late", "steer-2")
    # The recording replays: the loop is told of the steering where the
    # core told it (an answer with no tool call that another call followed).
    bundle = str(tmp_path / "s.bundle")
    home = core.info.home
    assert cli_main(["replay", "export", session, "-o", bundle, "--home", home]) == 0
    capsys.readouterr()
    assert cli_main(["replay", "run", bundle, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert (ran["reproduced"], ran["divergence"]) == (1, None), ran
    assert [(t["model_calls"], t["tool_calls"]) for t in ran["turns"]] == [(2, 0)]
