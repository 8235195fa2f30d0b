"""Reply chunking: no code point lost or moved, every piece within the
limit, breaks at paragraphs, then sentences, then words, never inside a
grapheme cluster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.wechat import can_break, chunks

PIECES = st.sampled_from(
    [
        "hello",
        " ",
        "\n\n",
        "\n",
        ". ",
        "。",
        "e\u0301",
        "👍🏽",
        "👨\u200d👩\u200d👧",
        "🇫🇷",
        "\r\n",
        "中文字符",
        "word",
        "x" * 50,
        "!",
        "\ufe0f",
    ]
)
TEXT = st.lists(PIECES, max_size=400).map("".join) | st.text(max_size=5000)


@settings(max_examples=300)
@given(TEXT, st.integers(min_value=1, max_value=300))
def test_pieces_rebuild_the_text_in_order_within_the_limit(text: str, limit: int) -> None:
    out = chunks(text, limit)
    assert "".join(out) == text
    assert all(len(p) <= limit for p in out)
    assert all(p for p in out) or out == [""]


@settings(max_examples=200)
@given(st.lists(PIECES, max_size=400).map("".join), st.integers(min_value=8, max_value=300))
def test_no_break_inside_a_cluster_when_one_fits(text: str, limit: int) -> None:
    out = chunks(text, limit)
    position = 0
    for piece in out[:-1]:
        position += len(piece)
        assert can_break(text, position), (text[position - 3 : position + 3], limit)


def test_paragraph_then_sentence_then_word() -> None:
    para = "a" * 10 + "\n\n" + "b" * 10
    assert chunks(para, 15) == ["a" * 10 + "\n\n", "b" * 10]
    sentence = "one two. three four five"
    assert chunks(sentence, 15) == ["one two. ", "three four five"]
    words = "alpha beta gamma delta"
    assert chunks(words, 12) == ["alpha beta ", "gamma delta"]
    assert chunks("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_the_default_limit_is_2000_code_points() -> None:
    text = ("字" * 1500 + "。") * 3
    out = chunks(text)
    assert [len(p) for p in out] == [1501, 1501, 1501]
    assert all(len(p) <= 2000 for p in chunks("🙂" * 4100))


def test_flags_and_families_are_not_split() -> None:
    flags = "🇫🇷" * 10
    for piece in chunks(flags, 5):
        assert len(piece) % 2 == 0
    family = "👨\u200d👩\u200d👧" * 4
    assert all(not p.startswith("\u200d") for p in chunks(family, 6))
