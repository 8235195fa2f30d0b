"""Sessions as the ledger holds them: the trace records of turns, and an
index of them in memory (rebuilt from the ledger at start).

Record kinds (payload: ``naga.v1.TurnRecord``; docs/design/executor.md):
``turn.message`` (the user's message, durable before the turn runs),
``turn.steer``, ``turn.model`` (one model call; request and answer in the
blob store), ``turn.tool`` (one tool call), ``turn.reply`` (the answer) and
``turn.error`` (a turn that ended without one).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.ledger import Entry, Ledger

MESSAGE = "turn.message"
STEER = "turn.steer"
MODEL = "turn.model"
TOOL = "turn.tool"
REPLY = "turn.reply"
ERROR = "turn.error"
KINDS = frozenset({MESSAGE, STEER, MODEL, TOOL, REPLY, ERROR})
#: Entries of a session kept in memory for prompts and History.
KEPT_ENTRIES = 1000
_PREVIEW_CHARS = 80


@dataclass(slots=True)
class Ended:
    """A finished turn, as a repeated idempotency key replays it."""

    turn_id: str
    message_seq: int
    text: str = ""
    reply_seq: int = 0
    error_kind: int = 0
    error_message: str = ""
    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def events(self) -> list[tpb.TurnEvent]:
        accepted = tpb.TurnAccepted(
            message_seq=self.message_seq, turn_id=self.turn_id, replayed=True
        )
        out = [tpb.TurnEvent(index=0, accepted=accepted)]
        if self.error_kind:
            error = tpb.TurnError(
                kind=tpb.TurnErrorKind.ValueType(self.error_kind),
                message=self.error_message,
                partial_text=self.text,
            )
            out.append(tpb.TurnEvent(index=1, error=error))
        else:
            final = tpb.TurnFinal(
                text=self.text,
                model_calls=self.model_calls,
                tool_calls=self.tool_calls,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=self.completion_tokens,
                reply_seq=self.reply_seq,
            )
            out.append(tpb.TurnEvent(index=1, final=final))
        return out


@dataclass(slots=True)
class Session:
    name: str
    turns: int = 0
    last_seq: int = 0
    last_time_ns: int = 0
    preview: str = ""
    entries: list[tpb.SessionEntry] = field(default_factory=list[tpb.SessionEntry])
    #: idempotency key -> the turn it ran (an Ended, or the running turn's id)
    keys: dict[str, Ended] = field(default_factory=dict[str, Ended])
    #: turn id -> its key, for turns not yet ended
    open_keys: dict[str, str] = field(default_factory=dict[str, str])

    def summary(self) -> tpb.SessionSummary:
        return tpb.SessionSummary(
            session=self.name,
            turns=self.turns,
            last_seq=self.last_seq,
            last_time_ns=self.last_time_ns,
            preview=self.preview,
        )

    def prompt(self, limit: int) -> list[mpb.ChatMessage]:
        """The latest ``limit`` entries as chat messages, oldest first."""
        out: list[mpb.ChatMessage] = []
        for e in self.entries[-limit:] if limit > 0 else []:
            role = mpb.ROLE_USER if e.role == tpb.HISTORY_ROLE_USER else mpb.ROLE_ASSISTANT
            out.append(mpb.ChatMessage(role=role, content=e.text))
        return out


class Sessions:
    """Every session's index, most recently used last (an OrderedDict)."""

    def __init__(self) -> None:
        self._by_name: OrderedDict[str, Session] = OrderedDict()

    def get(self, name: str) -> Session | None:
        return self._by_name.get(name)

    def open(self, name: str) -> Session:
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = Session(name)
        return found

    def recent(self, limit: int) -> list[Session]:
        return list(reversed(self._by_name.values()))[:limit]

    def rebuild(self, ledger: Ledger) -> None:
        """Index every turn record of ``ledger`` (at start)."""
        for rec in ledger.iter_records():
            if rec.kind in KINDS:
                try:
                    body = apb.TurnRecord.FromString(rec.payload)
                except DecodeError:
                    continue  # not ours to judge: `naga ledger verify` checks records
                self.note(rec.kind, body, rec.seq, rec.timestamp_ns)

    def note(self, kind: str, rec: apb.TurnRecord, seq: int, time_ns: int) -> None:
        """Index one turn record just written (or read at start)."""
        if kind not in (MESSAGE, REPLY, ERROR):
            return
        s = self.open(rec.session)
        self._by_name.move_to_end(rec.session)
        s.last_seq, s.last_time_ns = seq, time_ns
        if kind == MESSAGE:
            s.turns += 1
            s.preview = rec.text[:_PREVIEW_CHARS]
            s.keys[rec.idempotency_key] = Ended(rec.turn_id, seq)
            s.open_keys[rec.turn_id] = rec.idempotency_key
            self._add(s, seq, tpb.HISTORY_ROLE_USER, rec, time_ns)
            return
        key = s.open_keys.pop(rec.turn_id, None)
        ended = s.keys.get(key) if key is not None else None
        if ended is not None:
            ended.text = rec.text
            ended.model_calls, ended.tool_calls = rec.model_calls, rec.tool_calls
            ended.prompt_tokens = rec.prompt_tokens
            ended.completion_tokens = rec.completion_tokens
            if kind == REPLY:
                ended.reply_seq = seq
            else:
                ended.error_kind, ended.error_message = rec.error_kind, rec.error_message
        if kind == REPLY:
            self._add(s, seq, tpb.HISTORY_ROLE_ASSISTANT, rec, time_ns)

    @staticmethod
    def _add(
        s: Session, seq: int, role: tpb.HistoryRole.ValueType, rec: apb.TurnRecord, time_ns: int
    ) -> None:
        s.entries.append(
            tpb.SessionEntry(
                seq=seq,
                role=role,
                text=rec.text,
                peer=rec.peer,
                time_ns=time_ns,
                turn_id=rec.turn_id,
            )
        )
        if len(s.entries) > KEPT_ENTRIES:
            del s.entries[: len(s.entries) - KEPT_ENTRIES]


def stage(ledger: Ledger, kind: str, rec: apb.TurnRecord, blobs: tuple[bytes, ...] = ()) -> int:
    """Stage one turn record (durable at the next settle); its seq."""
    return ledger.stage(Entry.of(kind, rec.SerializeToString(), blobs)).seq


def now_ns() -> int:
    return time.time_ns()


__all__ = [
    "ERROR",
    "KINDS",
    "MESSAGE",
    "MODEL",
    "REPLY",
    "STEER",
    "TOOL",
    "Ended",
    "Session",
    "Sessions",
    "now_ns",
    "stage",
]
