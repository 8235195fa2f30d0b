"""Words of a skill, for retrieval and the near-duplicate check: lowercase
ASCII words and single CJK characters, minus a few function words."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

_WORD = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u9fff]")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "for",
        "from",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "this",
        "to",
        "use",
        "used",
        "uses",
        "using",
        "was",
        "what",
        "when",
        "which",
        "with",
        "you",
        "your",
    ]
)


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def weighted(name: str, description: str, body: str) -> Counter[str]:
    """A skill's term counts: its name weighs three times, its description twice."""
    counts: Counter[str] = Counter()
    for w in words(name.replace("-", " ")):
        counts[w] += 3
    for w in words(description):
        counts[w] += 2
    counts.update(words(body))
    return counts


def cosine(a: Counter[str], b: Counter[str]) -> float:
    if not a or not b:
        return 0.0
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb)


class Bm25:
    """Okapi BM25 over a fixed set of documents (rebuilt when they change)."""

    K1 = 1.2
    B = 0.75

    def __init__(self, docs: Iterable[Counter[str]]) -> None:
        self.docs = list(docs)
        n = len(self.docs)
        self._len = [sum(d.values()) for d in self.docs]
        self._avg = (sum(self._len) / n) if n else 0.0
        df: Counter[str] = Counter()
        self._postings: dict[str, list[int]] = {}
        for i, d in enumerate(self.docs):
            for term in d:
                df[term] += 1
                self._postings.setdefault(term, []).append(i)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for term in set(words(query)):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for i in self._postings[term]:
                tf = self.docs[i][term]
                norm = self.K1 * (1 - self.B + self.B * self._len[i] / (self._avg or 1))
                out[i] = out.get(i, 0.0) + idf * tf * (self.K1 + 1) / (tf + norm)
        return out


__all__ = ["Bm25", "cosine", "weighted", "words"]
