"""What of a streamed reply the user sees before it is whole
(naga_plugins.models.VisibleText): text streams, a tool call written as text
never does, and what was shown adds up to the answer's text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import model_pb2
from naga_plugins.models import VisibleText, extract_text_tool_calls

TOOLS = frozenset({"notes__write"})
CALL = '{"name": "notes__write", "arguments": {"text": "x"}}'


def shown_while_streaming(deltas: list[str], *, hold: bool = True) -> tuple[list[str], str]:
    """What feed() showed per delta, and what finish() showed at the end."""
    visible = VisibleText(hold_calls=hold)
    during = [visible.feed(d) for d in deltas]
    content, _ = extract_text_tool_calls("".join(deltas), TOOLS)
    return during, visible.finish(content)


def test_without_tools_every_delta_is_shown_as_it_comes() -> None:
    request = model_pb2.ChatRequest(messages=[model_pb2.ChatMessage(content="hi")])
    visible = VisibleText.for_request(request, text_calls=True)
    assert [visible.feed(d) for d in ["{", "not ", "a call "]] == ["{", "not ", "a call "]
    assert visible.finish("{not a call ") == ""


CASES = {
    # deltas -> what each feed shows, what finish shows
    "plain text": (["Hel", "lo ", "world"], ["Hel", "lo", " world"], ""),
    "tagged call": (
        ["Sure.", "\n<tool", "_call>", CALL, "</tool_call>"],
        ["Sure.", "", "", "", ""],
        "",
    ),
    "fenced call": (["Ok ```js", "on\n", CALL, "\n```"], ["Ok", "", "", ""], ""),
    "bare call": (["  ", CALL[:5], CALL[5:]], ["", "", ""], ""),
    "a code fence is text": (
        ["See ```py", "thon\nx = 1\n```", " done"],
        ["See ```py", "thon\nx = 1", "\n``` done"],
        "",
    ),
    "json that calls no tool is shown at the end": (
        ["Example: <tool_call>", '{"a": 1}', "</tool_call>"],
        ["Example:", "", ""],
        ' <tool_call>{"a": 1}</tool_call>',
    ),
    "a lone angle bracket": (["a <", "b"], ["a", " <b"], ""),
}


@pytest.mark.parametrize("case", CASES, ids=CASES.keys())
def test_the_hold_back_rule(case: str) -> None:
    deltas, during, end = CASES[case]
    assert shown_while_streaming(deltas) == (during, end)


_words = st.sampled_from(["Hi", "there", "{x}", "a<b", "`code`", "```", "\n", " ", "ok."])


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(_words, max_size=6),
    form=st.sampled_from(["none", "tag", "fence", "bare"]),
    after=st.lists(_words, max_size=4),
    data=st.data(),
)
def test_no_call_json_is_shown_and_what_is_shown_is_the_answer(
    before: list[str], form: str, after: list[str], data: st.DataObject
) -> None:
    head = "".join(before).lstrip()
    call = {
        "none": "",
        "tag": "<tool_call>" + CALL + "</tool_call>",
        "fence": "```json\n" + CALL + "\n```",
        "bare": CALL,
    }[form]
    text = CALL if form == "bare" else head + " " + call + ("".join(after) if call else "")
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b]
    during, end = shown_while_streaming(deltas)
    content, calls = extract_text_tool_calls(text, TOOLS)
    if call:
        assert calls, text
        assert "notes__write" not in "".join(during)
    assert "".join(during) + end == content
