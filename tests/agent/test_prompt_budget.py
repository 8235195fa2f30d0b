"""No input a user can send makes a later turn of the session fail: a
200,000-character message, then a 5 MiB tool result, then 100 more turns in
the same session, through the real core, its executors and provider plugin,
against the fake model over HTTP. Every turn answers; every request the
model gets fits the window providers.json declares (at the budget's own
conservative 3 bytes a token, so the true count is lower still); the trace
(turn.model records) names what was left out, by seq."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from naga.v1 import agent_pb2 as apb
from naga.v1 import ledger_pb2 as lpb
from naga_core.agent import AgentConfig
from tests.agent.conftest import ServerThread, final, running_core
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Recorded, Reply, is_review
from tests.plugin_host.conftest import READY_S

WINDOW = 8192
#: What the budget counts a token as, and its fixed cost per message.
BYTES_PER_TOKEN = 3
MESSAGE_TOKENS = 8
AGENT = AgentConfig(
    executors=1,
    max_tokens=256,
    turn_timeout_s=120,
    # The window, not a count, bounds the history here.
    history_entries=1000,
).with_budgets(10_000_000)
BIG = 5 * 1024 * 1024
READ_ON = '{"call_id":"c1","offset":1000}'


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, AGENT, context_window=WINDOW, plugins=("bulk",)) as c:
        yield c


def _tokens(text: str) -> int:
    return MESSAGE_TOKENS + -(-len(text.encode()) // BYTES_PER_TOKEN)


def _prompt_tokens(body: dict[str, Any]) -> int:
    """The request's messages and tools as the budget counts them."""
    total = 0
    messages: list[dict[str, Any]] = body["messages"]
    for m in messages:
        total += _tokens(m.get("content") or "")
        calls: list[dict[str, Any]] = m.get("tool_calls") or []
        for call in calls:
            total += _tokens(call["id"] + call["function"]["name"] + call["function"]["arguments"])
    tools: list[dict[str, Any]] = body.get("tools") or []
    for tool in tools:
        total += _tokens(json.dumps(tool["function"], separators=(",", ":")))
    return total


def _records(c: Any, from_seq: int, kind: str) -> list[tuple[int, apb.TurnRecord]]:
    out: list[tuple[int, apb.TurnRecord]] = []
    seq = from_seq
    while True:
        page: list[lpb.Record] = c.records(seq, 500)
        if not page:
            return out
        out += [(r.seq, apb.TurnRecord.FromString(r.payload)) for r in page if r.kind == kind]
        seq = page[-1].seq + 1


def _is_compaction(request: Recorded) -> bool:
    messages: list[dict[str, Any]] = request.json()["messages"]
    return str(messages[0].get("content", "")).startswith("You compact a conversation")


def test_a_long_paste_a_huge_tool_result_and_100_more_turns(
    core: InProcessCore, model_server: ServerThread
) -> None:
    server = model_server.server
    first_request = len(server.requests)
    session = "s-long"
    summaries: list[str] = []

    def summarise(request: Recorded) -> Reply | None:
        if not _is_compaction(request):
            return None
        summaries.append(f"summary {len(summaries)}: the user asked numbered questions")
        return Reply.answer(summaries[-1])

    model_server.run(lambda: setattr(server, "responder", summarise))
    try:
        _long_session(core, model_server, session, first_request, summaries)
    finally:
        model_server.run(lambda: setattr(server, "responder", None))


def _long_session(
    core: InProcessCore,
    model_server: ServerThread,
    session: str,
    first_request: int,
    summaries: list[str],
) -> None:
    server = model_server.server
    with core.client() as c:
        start = c.head().size

        def turn(text: str) -> Any:
            events = list(c.run_turn(session, text, uuid.uuid4().hex, timeout=READY_S * 4))
            return final(events)

        paste = "".join(f"paragraph {i}: " + "lorem ipsum dolor sit amet " * 7 for i in range(1000))
        paste = (paste * 2)[:200_000]
        model_server.script(Reply.answer("I read your long text."))
        assert turn(paste).text == "I read your long text."

        model_server.script(
            Reply.answer("", tool_calls=(("c1", "bulk__text", f'{{"size":{BIG}}}'),)),
            Reply.answer(
                "", tool_calls=(("c2", "turn__read_result", '{"call_id":"c1","offset":1000}'),)
            ),
            Reply.answer("The text is made of numbered lines."),
        )
        big = turn("Fetch the bulk text and tell me what it is.")
        assert big.text == "The text is made of numbered lines."
        assert big.tool_calls == 2

        for n in range(100):
            model_server.script(Reply.answer(f"answer {n}"))
            assert turn(f"question {n}: " + "and some more words " * 40).text == f"answer {n}"

        records = _records(c, start, "turn.model")
        compactions = _records(c, start, "turn.compact")

    everything = server.requests[first_request:]
    for index, request in enumerate(everything):
        body = request.json()
        assert _prompt_tokens(body) + body["max_tokens"] <= WINDOW, index
    # The turns' own calls: the big turn's review (on by default, ADR 0060)
    # follows its reply and is answered by the fake alone.
    requests = [r for r in everything if not _is_compaction(r) and not is_review(r)]
    assert len(requests) == 1 + 3 + 100

    # The paste was cut in the middle, and the trace says so.
    first = requests[0].json()["messages"][-1]["content"]
    assert first.startswith(paste[:1000])
    assert first.endswith(paste[-1000:])
    assert "left out to fit the model's window" in first
    assert any("the middle of the user's message" in w for w in records[0][1].left_out)

    # The tool result: a stored blob, the model shown its head, size and how
    # to read on; reading on gives the next piece.
    after_tool = requests[2].json()["messages"]
    shown = json.loads(next(m for m in after_tool if m.get("tool_call_id") == "c1")["content"])
    assert shown["truncated"] is True
    assert shown["result_bytes"] > BIG
    assert shown["read_more"] == {
        "tool": "turn__read_result",
        "call_id": "c1",
        "offset": shown["shown_bytes"],
    }
    assert shown["head"].startswith('{"text": "line 0000000 of the bulk text')
    read = json.loads(requests[3].json()["messages"][-1]["content"])
    assert read["offset"] == 1000
    assert read["result_bytes"] == shown["result_bytes"]
    whole = '{"text": "' + "".join(f"line {n:07d} of the bulk text\\n" for n in range(200))
    assert read["text"] == whole[1000 : 1000 + len(read["text"])]
    assert read["next_offset"] == 1000 + len(read["text"].encode())

    # History the window could not hold was summarised by the model, each
    # summary a turn.compact record with its text and the seqs it covers,
    # and it rides in the system message of later prompts; the trace says so.
    assert compactions, "no history was compacted"
    assert [r.text for _seq, r in compactions] == summaries
    assert len(compactions) < 30, "a summary call nearly every turn"
    covered: list[int] = []
    for _seq, r in compactions:
        assert list(r.dropped_seqs) == sorted(r.dropped_seqs)
        assert list(r.dropped_seqs[: len(covered)]) == covered, "a summary forgot what it covered"
        covered = list(r.dropped_seqs)
        assert r.request_blob
        assert r.response_blob
    last = requests[-1].json()["messages"]
    assert summaries[-1] in last[0]["content"]
    late = records[-1][1]
    assert any("in the summary the prompt carries instead" in w for w in late.left_out)
    # The newest history is kept: the previous answer is in the last prompt.
    assert any(m.get("content") == "answer 98" for m in last)
