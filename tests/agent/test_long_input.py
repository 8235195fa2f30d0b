"""A long paste is taken, not refused: 120,000 characters through
``naga chat`` (the real CLI, the real core, the fake model) are answered,
the model sent what fits its window; the gateway's protocol parses a
``send`` of as much; past ``MAX_MESSAGE_BYTES`` the core refuses with a
sentence, not a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from naga.constants import MAX_MESSAGE_BYTES
from naga.sdk.errors import SdkError
from naga_core.agent import AgentConfig
from naga_core.cli import main as cli_main
from naga_gateway._protocol import SendParams, parse_request
from tests.agent.conftest import ServerThread, running_core
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Recorded, Reply

AGENT = AgentConfig(executors=1, turn_timeout_s=60)
PASTE = "".join(f"{i:06d} a line of a long paste\n" for i in range(5000))[:120_000]


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, AGENT, context_window=16_384, plugins=()) as c:
        yield c


def test_naga_chat_with_120000_characters_is_answered(
    core: InProcessCore, model_server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(model_server.server.requests)
    model_server.script(Reply.answer("I read it all."))
    capsys.readouterr()
    home = core.info.home
    assert cli_main(["chat", "--home", home, "--json", "--session", "paste", PASTE]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["ok"], said["text"]) == (True, "I read it all.")
    (sent,) = model_server.server.requests[before:]
    content = sent.json()["messages"][-1]["content"]
    assert content.startswith(PASTE[:2000])
    assert content.endswith(PASTE[-2000:])
    assert len(content.encode()) < 16_384 * 3


def test_the_gateway_protocol_takes_a_long_send() -> None:
    frame = json.dumps(
        {
            "type": "req",
            "id": "1",
            "method": "send",
            "params": {"session": "paste", "text": PASTE, "key": "k1"},
        }
    )
    _request, params = parse_request(frame)
    assert isinstance(params, SendParams)
    assert params.text == PASTE


def test_a_session_of_long_pastes_still_answers_and_shows_its_history(
    core: InProcessCore, model_server: ServerThread
) -> None:
    """Nine pastes of 900 KB: every turn answers, and History (which would
    be over the response limit whole) gives the newest entries that fit."""
    big = "".join(f"{i:07d} " for i in range(112_500))  # 900,000 bytes
    server = model_server.server

    def summarise(request: Recorded) -> Reply | None:
        system = str(request.json()["messages"][0].get("content", ""))
        return Reply.answer("a summary") if system.startswith("You compact") else None

    model_server.run(lambda: setattr(server, "responder", summarise))
    try:
        with core.client() as c:
            for n in range(9):
                model_server.script(Reply.answer(f"got {n}"))
                events = list(c.run_turn("pastes", f"{n}{big}", f"k-paste-{n}", timeout=60))
                assert events[-1].final.text == f"got {n}", events[-1]
            entries = list(c.session_history("pastes", limit=100))
    finally:
        model_server.run(lambda: setattr(server, "responder", None))
    assert entries[-1].text == "got 8"
    assert 2 <= len(entries) < 18
    assert sum(len(e.text.encode()) for e in entries) <= 4 << 20


def test_past_the_limit_the_core_says_so(core: InProcessCore) -> None:
    with core.client() as c, pytest.raises(SdkError) as caught:
        list(c.run_turn("paste", "x" * (MAX_MESSAGE_BYTES + 1), "k-too-long", timeout=30))
    assert f"at most {MAX_MESSAGE_BYTES} are accepted" in str(caught.value)
