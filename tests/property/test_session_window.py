"""The agent's bounded session index loses nothing it promises: for any
history of turns over a few sessions, a session dropped from memory and read
back from the ledger has exactly the history and idempotency window of a
session that was never dropped, whether it was dropped while the core ran
or while the index was rebuilt at start; and what an unloaded session keeps
to be read back stays bounded."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent._sessions import ERROR, MESSAGE, REPLY, STEER, Session, Sessions
from naga_core.ledger import Entry, Ledger
from tests.ledger_helpers import fixed_signer

KEYS, ENTRIES, KEPT = 3, 4, 2


@dataclass(frozen=True)
class Turn:
    session: int
    end: str  # "reply", "error" or "none" (the core stopped before it ended)
    steer: bool


turns = st.lists(
    st.builds(
        Turn,
        session=st.integers(0, 4),
        end=st.sampled_from(["reply", "reply", "error", "none"]),
        steer=st.booleans(),
    ),
    min_size=20,
    max_size=80,
)


def write(ledger: Ledger, history: list[Turn]) -> None:
    entries: list[Entry] = []
    for n, t in enumerate(history):
        session, turn_id = f"s{t.session}", f"t-{n}"
        msg = apb.TurnRecord(
            session=session, turn_id=turn_id, idempotency_key=f"k{n}", text=f"message {n}"
        )
        entries.append(Entry.of(MESSAGE, msg.SerializeToString()))
        if t.steer:
            # A steer's key is in the window too (a resend is not steered again).
            steer = apb.TurnRecord(
                session=session, turn_id=turn_id, idempotency_key=f"s{n}", text=f"steer {n}"
            )
            entries.append(Entry.of(STEER, steer.SerializeToString()))
        if t.end != "none":
            kind = REPLY if t.end == "reply" else ERROR
            end = apb.TurnRecord(session=session, turn_id=turn_id, text=f"reply {n}")
            if kind == ERROR:
                end.error_kind = tpb.TURN_ERROR_KIND_EXECUTOR
                end.error_message = f"failed {n}"
            entries.append(Entry.of(kind, end.SerializeToString()))
    if entries:
        ledger.append_many(entries)


def bounded() -> Sessions:
    return Sessions(kept=KEPT, keys_kept=KEYS, entries_kept=ENTRIES)


def view(s: Session) -> tuple[object, ...]:
    assert s.detail is not None
    d = s.detail
    return (
        s.summary().SerializeToString(),
        [(e.seq, e.role, e.text, e.turn_id) for e in d.entries],
        [(k, e.turn_id, e.message_seq, e.end_seq, e.steer) for k, e in d.keys.items()],
        dict(d.open_keys),
        dict(d.open_steers),
    )


def read_back(sessions: Sessions, ledger: Ledger, name: str) -> Session:
    packed = sessions.unloaded(name)
    if packed is not None:
        assert len(packed) <= 2 * (KEYS + ENTRIES)
        return sessions.load(name, sessions.read_detail(ledger, name, packed))
    found = sessions.get(name)
    assert found is not None
    return found


@settings(max_examples=60, deadline=None)
@given(turns)
def test_a_session_read_back_equals_one_never_dropped(history: list[Turn]) -> None:
    with tempfile.TemporaryDirectory() as d, Ledger.open(d, fixed_signer()) as ledger:
        write(ledger, history)
        whole = Sessions(kept=1000, keys_kept=KEYS, entries_kept=ENTRIES)
        whole.rebuild(ledger)
        at_start = bounded()
        at_start.rebuild(ledger)
        live = bounded()  # as the agent runs: a session is read back before it is used
        for rec in ledger.iter_records():
            body = apb.TurnRecord.FromString(rec.payload)
            if live.get(body.session) is not None:
                read_back(live, ledger, body.session)
            live.note(rec.kind, body, rec.seq, rec.timestamp_ns)
        for sessions in (at_start, live):
            assert sessions.loaded() <= KEPT
            assert len(sessions) == len(whole)
            for s in whole.recent(len(whole)):
                assert len(s.keys) <= KEYS
                assert len(s.entries) <= ENTRIES
                assert view(read_back(sessions, ledger, s.name)) == view(s)
