"""Compaction: history that no longer fits the window is summarised by the
model in one call, and the summary stands in for it (docs/adr/0010-prompt-budget.md).

When the prompt budget drops at least :data:`COMPACT_MIN` history entries
that no summary covers yet, the core asks the turn's model, once, for a
summary of the session's previous summary (if any) and those entries. The
summary is a ``turn.compact`` record (its text, the seqs it covers in
``dropped_seqs``, the call's request and answer as blobs, its tokens, which
are debited from the turn's budget) and from then on rides in the system
message in place of what it covers. A failed summary call changes nothing
but the words of the trace: the entries are dropped, as without compaction.

The latest summary per session is kept in memory (at most ``kept``
sessions, the most recently used); a session without one in memory (after a
restart, or pushed out) is compacted again by the next turn that drops
history, so nothing but a model call is lost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._prompt import BYTES_PER_TOKEN, Budget, cut_middle

#: The record kind of a summary.
COMPACT = "turn.compact"
#: Fewest newly dropped entries worth a summary call.
COMPACT_MIN = 4
#: Smallest window whose history is summarised. The embedded model (4,096
#: tokens, about 22 tokens/s on two cores) would spend a minute per summary
#: every few turns: its dropped history is only dropped (and said to be).
COMPACT_MIN_WINDOW = 8192
#: Tokens the summary may take: a small share of the window.
_SUMMARY_SHARE = 8

_INSTRUCTIONS = (
    "You compact a conversation for an assistant whose memory is short. Write a "
    "faithful summary of the conversation below: the facts, names, numbers, "
    "decisions and open questions the assistant needs later, in plain sentences. "
    "Do not answer anything in it; write only the summary."
)


@dataclass(frozen=True, slots=True)
class Summary:
    """A session's history up to ``upto_seq``, in ``text``."""

    upto_seq: int
    text: str
    covers: tuple[int, ...]

    def system_note(self) -> str:
        return (
            "\n\nEarlier in this conversation (a summary of "
            f"{len(self.covers)} messages, which are not shown): {self.text}"
        )


class Summaries:
    """The latest summary of each recently used session."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._by_session: OrderedDict[str, Summary] = OrderedDict()

    def get(self, session: str) -> Summary | None:
        found = self._by_session.get(session)
        if found is not None:
            self._by_session.move_to_end(session)
        return found

    def put(self, session: str, summary: Summary) -> None:
        self._by_session[session] = summary
        self._by_session.move_to_end(session)
        while len(self._by_session) > self._kept:
            self._by_session.popitem(last=False)


def summary_tokens(budget: Budget) -> int:
    """Most tokens a summary may be (asked as max_tokens of its call)."""
    return max(64, budget.window // _SUMMARY_SHARE)


def request_for(
    budget: Budget, previous: Summary | None, entries: Sequence[tpb.SessionEntry]
) -> mpb.ChatRequest:
    """The summary call: the previous summary and ``entries`` (oldest
    first), each cut so that the whole fits the window."""
    reply = summary_tokens(budget)
    room = max(0, budget.window - reply - 256) * BYTES_PER_TOKEN
    parts: list[str] = []
    if previous is not None:
        parts.append(f"Summary so far: {previous.text}")
    for entry in entries:
        who = "user" if entry.role == tpb.HISTORY_ROLE_USER else "assistant"
        parts.append(f"{who}: {entry.text}")
    each = room // max(1, len(parts))
    text = "\n\n".join(cut_middle(p, each) for p in parts)
    return mpb.ChatRequest(
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=_INSTRUCTIONS),
            mpb.ChatMessage(role=mpb.ROLE_USER, content=text),
        ],
        max_tokens=reply,
    )


__all__ = [
    "COMPACT",
    "COMPACT_MIN",
    "COMPACT_MIN_WINDOW",
    "Summaries",
    "Summary",
    "request_for",
    "summary_tokens",
]
