"""The prompt budget's algebra (naga_core/agent/_prompt.py), property-tested:
whatever the history and the message, the job's prompt fits the budget,
keeps the newest entries without gaps and names every dropped seq; a
request grown by tool steps is fitted in place and keeps its shape."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._prompt import Budget, build, cut_middle, fit_request, message_tokens

texts = st.text(alphabet=st.sampled_from("ab c\n\u00e9\u4e2d\U0001f600"), min_size=0, max_size=4000)


def _entries(bodies: list[str]) -> list[tpb.SessionEntry]:
    roles = (tpb.HISTORY_ROLE_USER, tpb.HISTORY_ROLE_ASSISTANT)
    return [
        tpb.SessionEntry(seq=10 + i, role=roles[i % 2], text=body or "x")
        for i, body in enumerate(bodies)
    ]


@settings(max_examples=60, deadline=None)
@given(
    bodies=st.lists(texts, max_size=30),
    text=texts.filter(bool),
    window=st.integers(1024, 6000),
    limit=st.integers(0, 40),
)
def test_the_job_prompt_fits_and_drops_only_the_oldest(
    bodies: list[str], text: str, window: int, limit: int
) -> None:
    budget = Budget.of(window, 128, [])
    entries = _entries(bodies)
    fitted = build(budget, "be brief", entries, text, history_limit=limit)
    assert sum(message_tokens(m) for m in fitted.messages) <= budget.prompt
    assert fitted.messages[0].role == mpb.ROLE_SYSTEM
    assert fitted.messages[-1].role == mpb.ROLE_USER
    kept = len(fitted.messages) - 2
    # The dropped are exactly the oldest, all of them named; the rest kept.
    assert fitted.dropped_seqs == [e.seq for e in entries[: len(entries) - kept]]
    assert 0 <= fitted.by_window <= len(fitted.dropped_seqs)
    assert len(fitted.dropped_seqs) - fitted.by_window == max(0, len(entries) - limit)
    assert bool(fitted.dropped_seqs) == any("earlier messages" in w for w in fitted.left_out)
    for message, entry in zip(fitted.messages[1:-1], entries[len(entries) - kept :], strict=True):
        assert message.content == entry.text or "left out" in message.content


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(texts, max_size=10),
    results=st.lists(texts, min_size=1, max_size=6),
    window=st.integers(1024, 4000),
)
def test_a_grown_request_is_fitted_in_place(
    history: list[str], results: list[str], window: int
) -> None:
    budget = Budget.of(window, 128, [])
    request = mpb.ChatRequest(
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content="be brief"),
            *(
                mpb.ChatMessage(role=mpb.ROLE_USER if i % 2 == 0 else mpb.ROLE_ASSISTANT, content=h)
                for i, h in enumerate(history)
            ),
            mpb.ChatMessage(role=mpb.ROLE_USER, content="go"),
        ]
    )
    for n, body in enumerate(results):
        call = mpb.ToolCall(id=f"c{n}", name="t", arguments_json="{}")
        request.messages.append(mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, tool_calls=[call]))
        request.messages.append(
            mpb.ChatMessage(role=mpb.ROLE_TOOL, content=body, tool_call_id=f"c{n}")
        )
    before = sum(message_tokens(m) for m in request.messages)
    left_out = fit_request(budget, request, (1, 1 + len(history)))
    after = sum(message_tokens(m) for m in request.messages)
    assert after <= budget.prompt
    assert bool(left_out) == (before > budget.prompt)
    # Every call still has its result right after it (strict servers refuse less).
    roles = [m.role for m in request.messages]
    for i, m in enumerate(request.messages):
        if m.tool_calls:
            assert roles[i + 1] == mpb.ROLE_TOOL
            assert request.messages[i + 1].tool_call_id == m.tool_calls[0].id


@given(text=texts, keep=st.integers(0, 5000))
def test_a_cut_keeps_both_ends_and_says_how_much_went(text: str, keep: int) -> None:
    out = cut_middle(text, keep)
    if len(text.encode()) <= keep:
        assert out == text
    else:
        assert "left out" in out
        assert len(out.encode()) <= max(64, keep) + 128
