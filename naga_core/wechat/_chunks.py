"""Reply text in pieces the iLink server will carry whole: at most
``LIMIT`` code points each (reports say the server cuts near 2,000
characters; ILINK_PROTOCOL.md section 3).

A piece ends at the last paragraph break within the limit, else the last
sentence end, else the last space, else at the limit; never inside a
grapheme cluster as far as the standard library can tell (a combining
mark, a variation selector, an emoji modifier, a zero-width joiner and the
code point after it, the second half of a flag pair, a CR LF pair stay
with what precedes them). Concatenating the pieces gives the text back
exactly: no code point is lost, doubled or reordered.
"""

from __future__ import annotations

import unicodedata

#: Code points per message.
LIMIT = 2000
#: CJK sentence ends (ideographic full stop; fullwidth ! ? ;; ellipsis) need no space.
_CJK_ENDS = frozenset("\u3002\uff01\uff1f\u2026\uff1b")
_SENTENCE_ENDS = frozenset(".!?;") | _CJK_ENDS
_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """Whether ``ch`` belongs to the grapheme cluster before it."""
    cp = ord(ch)
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    return (
        0xFE00 <= cp <= 0xFE0F  # variation selectors
        or 0xE0100 <= cp <= 0xE01EF
        or 0x1F3FB <= cp <= 0x1F3FF  # emoji skin tone modifiers
        or 0xE0020 <= cp <= 0xE007F  # tag characters (subdivision flags)
        or ch == _ZWJ
    )


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def can_break(text: str, i: int) -> bool:
    """Whether a piece may end before ``text[i]`` (0 < i < len)."""
    before, after = text[i - 1], text[i]
    if _extends(after) or before == _ZWJ:
        return False
    if before == "\r" and after == "\n":
        return False
    if _regional(before) and _regional(after):
        # Flags are pairs: count the regional indicators before this one.
        run = 0
        j = i - 1
        while j >= 0 and _regional(text[j]):
            run += 1
            j -= 1
        return run % 2 == 0
    return True


def _cut(text: str, limit: int) -> int:
    """Where the first piece of ``text`` (longer than ``limit``) ends."""
    window = text[: limit + 1]

    def last(found: list[int]) -> int:
        for end in reversed(found):
            if 0 < end <= limit and can_break(text, end):
                return end
        return 0

    paragraph = [i + 2 for i in range(len(window) - 1) if window[i : i + 2] == "\n\n"]
    end = last(paragraph)
    if end:
        return end
    # A sentence's end takes the space after it along (the next piece
    # starts with its first word); CJK ends need no space.
    sentence = [
        i + 2 if window[i + 1].isspace() else i + 1
        for i, ch in enumerate(window[:-1])
        if ch in _SENTENCE_ENDS and (window[i + 1].isspace() or ch in _CJK_ENDS)
    ]
    end = last(sentence)
    if end:
        return end
    space = [i + 1 for i, ch in enumerate(window[:-1]) if ch.isspace()]
    end = last(space)
    if end:
        return end
    for end in range(limit, 0, -1):
        if can_break(text, end):
            return end
    # One cluster longer than the limit (pathological): cut it at the limit.
    return limit


def chunks(text: str, limit: int = LIMIT) -> list[str]:
    """``text`` in pieces of at most ``limit`` code points, in order."""
    if limit < 1:
        raise ValueError("limit must be positive")
    out: list[str] = []
    rest = text
    while len(rest) > limit:
        end = _cut(rest, limit)
        out.append(rest[:end])
        rest = rest[end:]
    if rest or not out:
        out.append(rest)
    return [piece for piece in out if piece] or [""]


__all__ = ["LIMIT", "can_break", "chunks"]
