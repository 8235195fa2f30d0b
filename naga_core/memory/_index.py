"""The recall index: words of each subject's items, in the core's memory
only (rebuilt from the decrypted items at start, never written anywhere).

Lexical, not vectors: deterministic, no model, and good enough for the
facts a person states ("my daughter is called Mei"). Scores are summed
inverse document frequencies within the subject's own items, so a subject's
ranking never depends on another subject's words.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STOP_WORDS = (
    "a an and are as at be been but by do does did for from has have had he her his i if in "
    "into is it its me my of on or our she so that the their them they this to was we were "
    "what when where which who why will with you your about can could would should please "
    "tell know remember"
)
_STOP = frozenset(_STOP_WORDS.split())


def words(text: str) -> set[str]:
    """The index terms of ``text``: lowercased words, crude plurals folded,
    stop words dropped; runs of CJK characters as character pairs."""
    out: set[str] = set()
    for raw in _WORD.findall(text.lower()):
        w = raw
        if _CJK.search(w):
            chars = [c for c in w if _CJK.match(c)]
            out.update(a + b for a, b in itertools.pairwise(chars))
            if len(chars) == 1:
                out.add(chars[0])
            continue
        if w in _STOP or len(w) < 2:
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.add(w)
    return out


class SubjectIndex:
    """The terms of one subject's items."""

    def __init__(self) -> None:
        self._terms: dict[str, set[str]] = {}
        # Insertion-ordered (oldest first): the newest of a long posting are
        # its last entries.
        self._postings: defaultdict[str, dict[str, None]] = defaultdict(dict)

    def __len__(self) -> int:
        return len(self._terms)

    def add(self, item_id: str, text: str) -> None:
        terms = words(text)
        self._terms[item_id] = terms
        for t in terms:
            self._postings[t][item_id] = None

    def remove(self, item_id: str) -> None:
        for t in self._terms.pop(item_id, set()):
            posting = self._postings.get(t)
            if posting is not None:
                posting.pop(item_id, None)
                if not posting:
                    del self._postings[t]

    def scores(self, query: str) -> dict[str, float]:
        """Item id -> relevance to ``query`` (only items sharing a term).

        The rarest terms name the candidates, newest first, until there
        are :data:`_CANDIDATES`; every term scores them. Common terms would
        otherwise make every recall walk most of the subject's items. The
        price: an old item sharing only common terms with the query may not
        be found (it would rank low), bounded work whatever the store holds."""
        n = len(self._terms)
        present = [(t, p) for t in words(query) if (p := self._postings.get(t))]
        if not present:
            return {}
        present.sort(key=lambda tp: len(tp[1]))
        idf = {t: math.log(1.0 + n / len(p)) for t, p in present}
        candidates: set[str] = set()
        for _t, posting in present:
            for item_id in reversed(posting):  # newest first
                if len(candidates) >= _CANDIDATES:
                    break
                candidates.add(item_id)
        out: dict[str, float] = {}
        for item_id in candidates:
            terms = self._terms[item_id]
            out[item_id] = sum(w for t, w in idf.items() if t in terms)
        return out


#: Enough candidates to fill any recall: terms past this add no more.
_CANDIDATES = 256


__all__ = ["SubjectIndex", "words"]
