"""The tool calls of one model step through the real core and its sandboxed
plugins, on the fake model over loopback HTTP: independent reads run
together (``meet`` calls that wait for each other, which run one at a time
would never meet), their answers and their ledger records in the model's
order whatever order they finished in; a step with a write in it runs one
call at a time, in order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import ledger_pb2 as lpb
from tests.plugin_host.conftest import READY_S
from tests.tools._turns import Call, last_seq, results, tool_turn
from tests.tools.conftest import ToolsCore

#: Long enough for any load: run one at a time, the first ``meet`` call of a
#: pair waits this long alone and answers ``met: false``, failing the test.
MEET_S = 30.0
_TRACE = ("turn.tool_call", "turn.tool")


@pytest.fixture(scope="module")
def reader(tools_core: ToolsCore, owner: Client) -> Iterator[Client]:
    owner.enable_plugin("meet", wait=READY_S)
    yield owner
    owner.disable_plugin("meet")


def _trace(client: Client, after: int) -> list[tuple[str, str]]:
    """The tool records after seq ``after``: (kind, call id), in ledger order."""
    out: list[tuple[str, str]] = []
    seq = after + 1
    while page := list[lpb.Record](client.records(seq, 500)):
        for r in page:
            if r.kind in _TRACE:
                out.append((r.kind, apb.TurnRecord.FromString(r.payload).call_id))
        seq = page[-1].seq + 1
    return out


def _ids(n: int) -> list[str]:
    return [f"c{i}" for i in range(n)]


def test_reads_of_one_step_run_together_and_answer_in_order(
    tools_core: ToolsCore, reader: Client
) -> None:
    root = tools_core.workspace
    for name, text in (("a.txt", "alpha"), ("b.txt", "beta")):
        with open(f"{root}/{name}", "w") as f:
            f.write(text)
    group = uuid.uuid4().hex
    meet: Call = ("meet.wait", {"group": group, "parties": 2, "timeout_s": MEET_S})
    calls: list[Call] = [("fs.read", {"path": "a.txt"}), meet, meet, ("fs.read", {"path": "b.txt"})]
    mark = last_seq(reader)
    answers = results(tool_turn(tools_core, reader, "step-reads", calls))
    assert [a.call_id for a in answers] == _ids(4)
    assert all(a.ok for a in answers), answers
    first, met1, met2, second = (json.loads(a.result_json) for a in answers)
    assert (first["content"], second["content"]) == ("alpha", "beta")
    assert (met1["met"], met2["met"]) == (True, True), (met1, met2)
    # Every intent (durable before any ran), then every result, each in the
    # model's order.
    assert _trace(reader, mark) == [("turn.tool_call", c) for c in _ids(4)] + [
        ("turn.tool", c) for c in _ids(4)
    ]


@pytest.mark.parametrize(
    "write",
    [
        ("fs.write", {"path": "mixed.txt", "content": "x"}),
        ("shell.run", {"command": "echo y > mixed-shell.txt", "timeout_s": 20}),
    ],
    ids=["fs.write", "shell.run"],
)
def test_a_step_with_a_write_runs_one_call_at_a_time(
    tools_core: ToolsCore, reader: Client, write: Call
) -> None:
    group = uuid.uuid4().hex
    # Run one at a time, the first call waits out its timeout alone and the
    # second finds it arrived: that is what this step must show.
    meet: Call = ("meet.wait", {"group": group, "parties": 2, "timeout_s": 0.5})
    mark = last_seq(reader)
    answers = results(tool_turn(tools_core, reader, "step-mixed", [meet, write, meet]))
    assert [a.ok for a in answers] == [True] * 3, answers
    alone, _, after = (json.loads(a.result_json) for a in (answers[0], answers[1], answers[2]))
    assert (alone["met"], alone["arrived"]) == (False, 1), alone
    assert (after["met"], after["arrived"]) == (True, 2), after
    assert _trace(reader, mark) == [(k, c) for c in _ids(3) for k in _TRACE]


@st.composite
def _steps(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A step of ``meet.rank`` calls finishing in a random order (ranks, a
    permutation) with fs.read calls at random places (their indexes)."""
    ranks = draw(st.permutations(range(draw(st.integers(2, 4)))))
    reads = draw(st.lists(st.integers(0, len(ranks)), max_size=2))
    return list(ranks), reads


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(step=_steps())
def test_results_and_records_keep_the_model_order_whatever_finishes_first(
    tools_core: ToolsCore, reader: Client, step: tuple[list[int], list[int]]
) -> None:
    ranks, reads = step
    with open(f"{tools_core.workspace}/r.txt", "w") as f:
        f.write("read")
    group = uuid.uuid4().hex
    calls: list[Call] = [
        ("meet.rank", {"group": group, "rank": r, "timeout_s": MEET_S}) for r in ranks
    ]
    for at in sorted(reads, reverse=True):
        calls.insert(at, ("fs.read", {"path": "r.txt"}))
    mark = last_seq(reader)
    answers = results(tool_turn(tools_core, reader, "step-order", calls))
    n = len(calls)
    assert [a.call_id for a in answers] == _ids(n), step
    shown = [json.loads(a.result_json) for a in answers]
    ranked = [s for s in shown if "rank" in s]
    # Each finished in its rank's turn (so not in the model's order) ...
    assert [(s["rank"], s["finished_before"], s["in_time"]) for s in ranked] == [
        (r, r, True) for r in ranks
    ], step
    assert all(s["content"] == "read" for s in shown if "rank" not in s), step
    # ... and the ledger still has them in the model's order.
    assert _trace(reader, mark) == [("turn.tool_call", c) for c in _ids(n)] + [
        ("turn.tool", c) for c in _ids(n)
    ], step
