"""Sessions as the ledger holds them: the trace records of turns, and an
index of them in memory (rebuilt from the ledger at start).

Record kinds (payload: ``naga.v1.TurnRecord``; docs/design/executor.md):
``turn.message`` (the user's message, durable before the turn runs),
``turn.steer``, ``turn.model`` (one model call; request and answer in the
blob store), ``turn.tool`` (one tool call), ``turn.reply`` (the answer) and
``turn.error`` (a turn that ended without one).
"""

from __future__ import annotations

import itertools
import operator
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from naga.constants import IDEMPOTENCY_KEYS_KEPT, SESSIONS_KEPT
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import snapshot_pb2 as snpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._errors import AgentError
from naga_core.ledger import Entry, Ledger, Record

MESSAGE = "turn.message"
STEER = "turn.steer"
MODEL = "turn.model"
TOOL = "turn.tool"
REPLY = "turn.reply"
ERROR = "turn.error"
KINDS = frozenset({MESSAGE, STEER, MODEL, TOOL, REPLY, ERROR})
#: The core's own word in a session (a job's reply WeChat did not carry):
#: no turn's trace and no history entry, so never in a prompt; ``naga log``
#: and the console's session view show it where it happened.
NOTE = "turn.note"
# Kind codes of the records an unloaded session lists (Session.reload).
_MSG, _REPLY, _STEER, _END = 0, 1, 2, 3  # _END: a reply or an error
# An error is never an entry, so it is an _END whichever way the list was
# made (noted at start, or from a detail's seqs()): a snapshot start and a
# full replay then list the same codes.
_CODES = {MESSAGE: _MSG, STEER: _STEER, REPLY: _REPLY, ERROR: _END}
#: Entries of a session kept in memory for prompts and History.
KEPT_ENTRIES = 1000
_PREVIEW_CHARS = 80


@dataclass(slots=True)
class Ended:
    """The turn an idempotency key ran: what a repeat of the key needs to
    replay it. Never the reply's text: a replay reads the turn's last
    record from the ledger by ``end_seq``, so a window of keys costs a few
    ints each, whatever the replies' length."""

    turn_id: str
    message_seq: int
    #: the seq of its ``turn.reply`` or ``turn.error``; 0 while it runs
    #: (a turn the core stopped in is ended or re-run by the next start,
    #: docs/design/recovery.md)
    end_seq: int = 0
    #: the key is a steering message's (``message_seq`` its ``turn.steer``),
    #: ``turn_id`` the turn it steered: a resend gets that turn's end, so a
    #: steer, too, runs once however often it is sent
    steer: bool = False


#: Opens a turn record's sealed text fields (naga_core.memory.Sealer.open_turn).
Opener = Callable[[str, apb.TurnRecord], apb.TurnRecord]


def _as_is(_kind: str, body: apb.TurnRecord) -> apb.TurnRecord:
    return body


def replay(ended: Ended, end: Record | None, opener: Opener = _as_is) -> list[tpb.TurnEvent]:
    """The events a repeated key gets: the turn's acceptance and its recorded
    end (``end``: the record at ``ended.end_seq``, None when there is none;
    its text opened by ``opener``)."""
    accepted = tpb.TurnAccepted(message_seq=ended.message_seq, turn_id=ended.turn_id, replayed=True)
    out = [tpb.TurnEvent(index=0, accepted=accepted)]
    body = apb.TurnRecord()
    if end is not None:
        try:
            body = opener(end.kind, apb.TurnRecord.FromString(end.payload))
        except DecodeError:
            raise AgentError(
                f"the recorded end (seq {end.seq}) of turn {ended.turn_id} does not decode"
            ) from None
    if end is None:
        # Never an empty final: a key with no recorded end and no running
        # turn (which would have been joined) has nothing to answer yet.
        error = tpb.TurnError(
            kind=tpb.TURN_ERROR_KIND_INTERRUPTED,
            message=f"turn {ended.turn_id} has no recorded end yet; send it again later",
        )
        out.append(tpb.TurnEvent(index=1, error=error))
    elif end.kind == ERROR:
        error = tpb.TurnError(
            kind=tpb.TurnErrorKind.ValueType(body.error_kind or tpb.TURN_ERROR_KIND_INTERNAL),
            message=body.error_message,
            partial_text=body.text,
        )
        out.append(tpb.TurnEvent(index=1, error=error))
    else:
        out.append(tpb.TurnEvent(index=1, final=turn_final(body, end.seq)))
    return out


@dataclass(slots=True)
class Detail:
    """What a session in memory holds beyond its summary."""

    #: its latest KEPT_ENTRIES messages and replies, oldest first
    entries: list[tpb.SessionEntry] = field(default_factory=list[tpb.SessionEntry])
    #: its latest keys (at most the window), oldest first -> the turn each ran
    keys: dict[str, Ended] = field(default_factory=dict[str, Ended])
    #: turn id -> its key, for turns not yet ended
    open_keys: dict[str, str] = field(default_factory=dict[str, str])
    #: turn id -> the keys of the steering messages it took, while it runs
    open_steers: dict[str, list[str]] = field(default_factory=dict[str, list[str]])

    def seqs(self) -> array[int]:
        """The records a reload reads to rebuild this detail, ascending, each
        packed as ``seq << 2 | kind code`` (see :func:`_compact`)."""
        codes: dict[int, int] = {}
        for e in self.keys.values():
            codes[e.message_seq] = _STEER if e.steer else _MSG
            if e.end_seq:
                codes[e.end_seq] = _END
        for e in self.entries:
            codes[e.seq] = _MSG if e.role == tpb.HISTORY_ROLE_USER else _REPLY
        return array("Q", sorted(seq << 2 | code for seq, code in codes.items()))


@dataclass(slots=True)
class Session:
    """A session's summary; ``detail`` while it is in memory, else None and
    ``reload`` lists the records a reload reads (8 bytes each: at most about
    twice the key window plus the kept entries, 24 KB with the defaults).
    ``shared``: ``reload`` is also another index's (:meth:`Sessions.adopt`),
    so it is copied before it changes."""

    name: str
    turns: int = 0
    last_seq: int = 0
    last_time_ns: int = 0
    preview: str = ""
    detail: Detail | None = None
    reload: array[int] | None = None
    shared: bool = False

    @property
    def entries(self) -> list[tpb.SessionEntry]:
        return self.detail.entries if self.detail is not None else []

    @property
    def keys(self) -> dict[str, Ended]:
        return self.detail.keys if self.detail is not None else {}

    def summary(self) -> tpb.SessionSummary:
        return tpb.SessionSummary(
            session=self.name,
            turns=self.turns,
            last_seq=self.last_seq,
            last_time_ns=self.last_time_ns,
            preview=self.preview,
        )

    def prompt(self, limit: int, exclude: set[str] | None = None) -> list[mpb.ChatMessage]:
        """The latest ``limit`` entries as chat messages, oldest first,
        without those of the turns ``exclude`` names."""
        entries = self.entries
        if exclude:
            entries = [e for e in entries if e.turn_id not in exclude]
        out: list[mpb.ChatMessage] = []
        for e in entries[-limit:] if limit > 0 else []:
            role = mpb.ROLE_USER if e.role == tpb.HISTORY_ROLE_USER else mpb.ROLE_ASSISTANT
            out.append(mpb.ChatMessage(role=role, content=e.text))
        return out


class Sessions:
    """Every session's summary, most recently used last; the detail (history
    and idempotency keys) of at most ``kept`` of them, the most recently
    used, each with at most ``keys_kept`` keys. A session whose detail was
    dropped is reloaded from the ledger (:meth:`load`) before it is used
    again; ``busy`` names sessions whose detail must stay (a turn runs)."""

    def __init__(
        self,
        *,
        kept: int = SESSIONS_KEPT,
        keys_kept: int = IDEMPOTENCY_KEYS_KEPT,
        entries_kept: int = KEPT_ENTRIES,
        busy: Callable[[str], bool] = lambda _name: False,
        opener: Opener = _as_is,
    ) -> None:
        self._by_name: OrderedDict[str, Session] = OrderedDict()
        self._loaded: OrderedDict[str, None] = OrderedDict()  # names with a detail, LRU first
        self._kept = kept
        self._keys_kept = keys_kept
        self._entries_kept = entries_kept
        self._busy = busy
        #: Opens what a record sealed (the agent's sessions hold the text in
        #: memory; the start-up fold's keep it sealed: its image is a file).
        self.opener = opener
        self._dropped = 0  # drop_details() calls: a preview read before one is stale

    def get(self, name: str) -> Session | None:
        return self._by_name.get(name)

    def loaded(self) -> int:
        """How many sessions hold their detail (at most ``kept`` plus busy ones)."""
        return len(self._loaded)

    def __len__(self) -> int:
        return len(self._by_name)

    def open(self, name: str) -> Session:
        """The session ``name``, created (loaded, empty) if new. Not for a
        known session whose detail was dropped: :meth:`load` it first."""
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = Session(name, detail=Detail())
            self._mark_loaded(name)
        return found

    def recent(self, limit: int) -> list[Session]:
        return list(itertools.islice(reversed(self._by_name.values()), max(limit, 0)))

    def rebuild(self, ledger: Ledger, also: Callable[[Record], None] | None = None) -> None:
        """Index every turn record of ``ledger`` (at start): every session's
        summary, and the detail of those the bounds keep. ``also`` is shown
        every record too (one pass over the ledger for whatever else the
        start needs)."""
        for rec in ledger.iter_records():
            if also is not None:
                also(rec)
            body = _body(rec)
            if body is not None:
                self.note(rec.kind, self.opener(rec.kind, body), rec.seq, rec.timestamp_ns)

    def image(self) -> list[snpb.SessionImage]:
        """Every session's summary and reload list, least recently used
        first: what a start-up snapshot holds of them (no detail: a session
        restored from it is reloaded from the ledger when next used)."""
        out: list[snpb.SessionImage] = []
        for s in self._by_name.values():
            reload = s.detail.seqs() if s.detail is not None else (s.reload or array("Q"))
            out.append(
                snpb.SessionImage(
                    name=s.name,
                    turns=s.turns,
                    last_seq=s.last_seq,
                    last_time_ns=s.last_time_ns,
                    preview=s.preview,
                    reload=reload,
                )
            )
        return out

    def restore(self, images: Iterable[snpb.SessionImage], *, through: int) -> None:
        """Take the sessions of an :meth:`image` of records ``..through`` (into
        an empty index); ValueError names what does not hold together."""
        if self._by_name:
            raise ValueError("restore into a sessions index that is not empty")
        for img in images:
            reload = array("Q", img.reload)
            if not img.name or img.name in self._by_name:
                raise ValueError(f"session name {img.name!r} is empty or repeated")
            # Ascending, compared in C (map over the array, not a generator:
            # 0.6 s of a 1M-record home's start, ADR 0057).
            ascending = all(map(operator.lt, reload, itertools.islice(reload, 1, None)))
            if img.last_seq > through or not ascending:
                raise ValueError(f"session {img.name!r}: its records are not within the image")
            if reload and reload[-1] >> 2 > through:
                raise ValueError(f"session {img.name!r}: a record past the image")
            self._by_name[img.name] = Session(
                img.name,
                turns=img.turns,
                last_seq=img.last_seq,
                last_time_ns=img.last_time_ns,
                preview=img.preview,
                reload=reload,
            )

    def adopt(self, other: Sessions) -> None:
        """Take every session of ``other`` (the start-up fold's, already
        checked by its restore or built by its replay) into an empty index,
        summaries copied and reload lists shared, not copied: the fold goes
        on following the ledger, and each index copies a shared list before
        it changes it (one copy of them at start instead of two; issue 19,
        ADR 0061)."""
        if self._by_name:
            raise ValueError("adopt into a sessions index that is not empty")
        for s in other._by_name.values():
            shared = s.detail is None and s.reload is not None
            self._by_name[s.name] = Session(
                s.name,
                turns=s.turns,
                last_seq=s.last_seq,
                last_time_ns=s.last_time_ns,
                preview=s.preview,
                reload=s.reload if s.detail is None else s.detail.seqs(),
                shared=shared,
            )
            s.shared = s.shared or shared

    def unloaded(self, name: str) -> array[int] | None:
        """The records to read back if ``name`` is known but not in memory."""
        found = self._by_name.get(name)
        if found is None or found.detail is not None:
            return None
        return array("Q", found.reload or ())

    def read_detail(self, ledger: Ledger, name: str, packed: array[int]) -> Detail:
        """``name``'s detail rebuilt from the records ``packed`` lists (from
        :meth:`unloaded`; on a worker thread: it reads the disk). Reads only
        those, so a reload costs the same however long the ledger grew."""
        detail = Detail()
        for p in packed:
            rec = ledger.read(p >> 2)
            body = _body(rec)
            if body is not None and body.session == name:
                body = self.opener(rec.kind, body)
                self._note_detail(detail, rec.kind, body, rec.seq, rec.timestamp_ns)
        return detail

    def load(self, name: str, detail: Detail) -> Session:
        """Put a reloaded detail back (unless another reload did meanwhile)."""
        s = self._by_name[name]
        if s.detail is None:
            s.detail = detail
            # Rebuilt from the detail when it is dropped again: not kept twice.
            s.reload, s.shared = None, False
            if not s.preview:  # restored from a (sealed) snapshot, or after a forget
                said = [e for e in detail.entries if e.role == tpb.HISTORY_ROLE_USER]
                s.preview = said[-1].text[:_PREVIEW_CHARS] if said else ""
            self._mark_loaded(name)
        return s

    def unknown_previews(self, shown: Iterable[Session]) -> tuple[int, list[tuple[str, int]]]:
        """Of ``shown``, the sessions whose preview is not known (restored
        at start: the start-up fold keeps records sealed, so its image has
        none; or after a forget), each with the seq of its last message, to
        :meth:`read_previews`; and a mark for :meth:`take_previews`."""
        wanted: list[tuple[str, int]] = []
        for s in shown:
            if s.preview or s.detail is not None or not s.reload:
                continue
            last = next((p >> 2 for p in reversed(s.reload) if p & 3 == _MSG), None)
            if last is not None:
                wanted.append((s.name, last))
        return self._dropped, wanted

    def read_previews(self, ledger: Ledger, wanted: Iterable[tuple[str, int]]) -> dict[str, str]:
        """The previews of ``wanted`` (from :meth:`unknown_previews`), each
        one record read and opened (on a worker thread: it reads the disk)."""
        found: dict[str, str] = {}
        for name, seq in wanted:
            body = _body(ledger.read(seq))
            if body is not None and body.session == name:
                found[name] = self.opener(MESSAGE, body).text[:_PREVIEW_CHARS]
        return found

    def take_previews(self, mark: int, found: dict[str, str]) -> None:
        """Keep what :meth:`read_previews` found, unless details were dropped
        since ``mark`` (a forget: the text may be one it made unreadable)."""
        if mark != self._dropped:
            return
        for name, text in found.items():
            s = self._by_name.get(name)
            if s is not None and not s.preview:
                s.preview = text

    def note(self, kind: str, rec: apb.TurnRecord, seq: int, time_ns: int) -> None:
        """Index one turn record just written (or read at start)."""
        if kind not in _CODES:
            return
        s = self._by_name.get(rec.session)
        if s is None:
            s = self.open(rec.session)
        self._by_name.move_to_end(rec.session)
        if kind != STEER:  # a steer is part of its turn: no entry of its own
            s.last_seq, s.last_time_ns = seq, time_ns
        if kind == MESSAGE:
            s.turns += 1
            s.preview = rec.text[:_PREVIEW_CHARS]
        if s.detail is None:
            # Only at start (a live turn loads its session first): a reload
            # will read this record too; keep the list bounded.
            reload = s.reload if s.reload is not None else array("Q")
            if s.shared:  # also the other index's: never changed under it
                reload, s.shared = array("Q", reload), False
            reload.append(seq << 2 | _CODES[kind])
            s.reload = reload
            if len(reload) > 2 * (self._keys_kept + self._entries_kept):
                s.reload = _compact(reload, self._keys_kept, self._entries_kept)
            return
        self._loaded.move_to_end(rec.session)
        self._note_detail(s.detail, kind, rec, seq, time_ns)

    def _note_detail(
        self, d: Detail, kind: str, rec: apb.TurnRecord, seq: int, time_ns: int
    ) -> None:
        if kind in (MESSAGE, STEER):
            # Re-inserted, so the dict's order stays the order of use.
            d.keys.pop(rec.idempotency_key, None)
            d.keys[rec.idempotency_key] = Ended(rec.turn_id, seq, steer=kind == STEER)
            if kind == STEER:
                d.open_steers.setdefault(rec.turn_id, []).append(rec.idempotency_key)
            else:
                d.open_keys[rec.turn_id] = rec.idempotency_key
            while len(d.keys) > self._keys_kept:
                old_key = next(iter(d.keys))
                old = d.keys.pop(old_key)
                if d.open_keys.get(old.turn_id) == old_key:
                    del d.open_keys[old.turn_id]
                steers = d.open_steers.get(old.turn_id, [])
                if old_key in steers:
                    steers.remove(old_key)
                    if not steers:
                        del d.open_steers[old.turn_id]
            if kind == MESSAGE:
                _add(d, seq, tpb.HISTORY_ROLE_USER, rec, time_ns, kept=self._entries_kept)
            return
        if kind not in (REPLY, ERROR):
            return
        key = d.open_keys.pop(rec.turn_id, None)
        for k in [key, *d.open_steers.pop(rec.turn_id, ())]:
            ended = d.keys.get(k) if k is not None else None
            if ended is not None and ended.turn_id == rec.turn_id:
                ended.end_seq = seq
        if kind == REPLY:
            _add(d, seq, tpb.HISTORY_ROLE_ASSISTANT, rec, time_ns, kept=self._entries_kept)

    def drop_details(self) -> int:
        """Drop the detail and preview of every session no turn runs in (read
        back from the ledger when next used, through :attr:`opener`): after a
        forget, the texts of its subject then read as forgotten. How many."""
        dropped = 0
        self._dropped += 1
        for s in self._by_name.values():
            if s.detail is None or not self._busy(s.name):
                s.preview = ""  # which subject's it was is not known here
        for name in list(self._loaded):
            if self._busy(name):
                continue
            s = self._by_name[name]
            assert s.detail is not None
            s.reload, s.shared = s.detail.seqs(), False
            s.detail = None
            del self._loaded[name]
            dropped += 1
        return dropped

    def _mark_loaded(self, name: str) -> None:
        self._loaded[name] = None
        self._loaded.move_to_end(name)
        if len(self._loaded) <= self._kept:
            return
        for old in list(self._loaded):
            if len(self._loaded) <= self._kept:
                break
            if old == name or self._busy(old):
                continue
            s = self._by_name[old]
            assert s.detail is not None
            s.reload, s.shared = s.detail.seqs(), False
            s.detail = None
            del self._loaded[old]


def _compact(packed: array[int], keys_kept: int, entries_kept: int) -> array[int]:
    """``packed`` without the records a reload would note and then drop: it
    keeps everything from the oldest of the last ``keys_kept`` messages (the
    key window; their ends come after them) or of the last ``entries_kept``
    known entries (messages and replies), whichever is older. An ``_END``
    (a reply or an error, not told apart) is not counted as an entry, so the
    cut is never too late."""
    keyed = [p for p in packed if p & 3 in (_MSG, _STEER)]  # each a key of the window
    entries = [p for p in packed if p & 3 in (_MSG, _REPLY)]
    cuts = [packed[0]]
    if len(keyed) >= keys_kept and len(entries) >= entries_kept:
        cuts = [keyed[-keys_kept], entries[-entries_kept]]
    cut = min(cuts) >> 2
    return array("Q", (p for p in packed if p >> 2 >= cut))


def body_of(rec: Record) -> apb.TurnRecord | None:
    """The TurnRecord of a turn record; None for other kinds (or garbage)."""
    return _body(rec)


def _body(rec: Record) -> apb.TurnRecord | None:
    if rec.kind not in KINDS:
        return None
    try:
        return apb.TurnRecord.FromString(rec.payload)
    except DecodeError:
        return None  # not ours to judge: `naga ledger verify` checks records


def _add(
    d: Detail,
    seq: int,
    role: tpb.HistoryRole.ValueType,
    rec: apb.TurnRecord,
    time_ns: int,
    *,
    kept: int,
) -> None:
    d.entries.append(
        tpb.SessionEntry(
            seq=seq,
            role=role,
            text=rec.text,
            peer=rec.peer,
            time_ns=time_ns,
            turn_id=rec.turn_id,
        )
    )
    if len(d.entries) > kept:
        del d.entries[: len(d.entries) - kept]


def turn_final(ended: apb.TurnRecord | apb.ExecutorOutcome, reply_seq: int) -> tpb.TurnFinal:
    """The final event of a turn that ended with ``ended`` (the executor's
    outcome as it ends, or its recorded reply when a key is replayed)."""
    return tpb.TurnFinal(
        text=ended.text,
        model_calls=ended.model_calls,
        tool_calls=ended.tool_calls,
        prompt_tokens=ended.prompt_tokens,
        completion_tokens=ended.completion_tokens,
        reply_seq=reply_seq,
    )


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
    "NOTE",
    "REPLY",
    "STEER",
    "TOOL",
    "Detail",
    "Ended",
    "Opener",
    "Session",
    "Sessions",
    "now_ns",
    "replay",
    "stage",
    "turn_final",
]
