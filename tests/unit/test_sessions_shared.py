"""The agent's sessions index takes the start-up fold's reload lists without
copying them (ADR 0061: they were held twice at start, 3.3 MB each at 1M
records), and neither index changes a list the other still holds."""

from __future__ import annotations

import tracemalloc

from naga.v1 import agent_pb2 as apb
from naga_core.agent._sessions import MESSAGE, REPLY, Detail, Sessions

SESSIONS = 50
TURNS = 200


def _folded() -> Sessions:
    """A start-up fold's index (no detail kept) over TURNS turns a session."""
    fold = Sessions(kept=0)
    seq = 0
    for turn in range(TURNS):
        for i in range(SESSIONS):
            name = f"s-{i}"
            msg = apb.TurnRecord(session=name, turn_id=f"t{turn}-{i}", idempotency_key=f"k{seq}")
            fold.note(MESSAGE, msg, seq, seq)
            reply = apb.TurnRecord(session=name, turn_id=f"t{turn}-{i}", text="answer")
            fold.note(REPLY, reply, seq + 1, seq + 1)
            seq += 2
    return fold


def _reload_bytes(sessions: Sessions) -> int:
    total = 0
    for s in sessions.recent(len(sessions)):
        if s.reload is not None:  # the last one noted has its detail still
            total += s.reload.itemsize * len(s.reload)
    return total


def test_adopting_the_folds_sessions_does_not_copy_their_reload_lists() -> None:
    fold = _folded()
    held = _reload_bytes(fold)
    assert held >= (SESSIONS - 1) * 2 * TURNS * 8
    agent = Sessions()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        agent.adopt(fold)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The summaries only (a Session and its name a session), not the lists.
    assert grown < held / 4, (grown, held)
    for s in fold.recent(SESSIONS)[1:]:
        got = agent.get(s.name)
        assert got is not None
        assert got.reload is s.reload
    # What a snapshot of either holds is what the copy through an image held.
    copied = Sessions()
    copied.restore(fold.image(), through=2 * SESSIONS * TURNS)
    assert agent.image() == copied.image() == fold.image()


def test_a_record_the_fold_notes_after_the_adoption_leaves_the_agents_list_alone() -> None:
    fold = _folded()
    agent = Sessions()
    agent.adopt(fold)
    before = list(agent.unloaded("s-3") or ())
    seq = 2 * SESSIONS * TURNS
    fold.note(MESSAGE, apb.TurnRecord(session="s-3", turn_id="new", idempotency_key="kn"), seq, 0)
    assert list(agent.unloaded("s-3") or ()) == before
    fold_s3 = fold.get("s-3")
    assert fold_s3 is not None
    assert fold_s3.reload is not None
    assert list(fold_s3.reload) == [*before, seq << 2]
    # The other sessions are still shared.
    s4, fold_s4 = agent.get("s-4"), fold.get("s-4")
    assert s4 is not None
    assert fold_s4 is not None
    assert s4.reload is fold_s4.reload


def test_a_record_the_agent_notes_in_an_unloaded_session_leaves_the_folds_list_alone() -> None:
    fold = _folded()
    agent = Sessions()
    agent.adopt(fold)
    fold_s5 = fold.get("s-5")
    assert fold_s5 is not None
    assert fold_s5.reload is not None
    before = list(fold_s5.reload)
    seq = 2 * SESSIONS * TURNS
    agent.note(MESSAGE, apb.TurnRecord(session="s-5", turn_id="new", idempotency_key="kn"), seq, 0)
    assert list(fold_s5.reload) == before
    assert list(agent.unloaded("s-5") or ()) == [*before, seq << 2]


def test_a_loaded_session_does_not_keep_its_reload_list() -> None:
    fold = _folded()
    agent = Sessions()
    agent.adopt(fold)
    packed = agent.unloaded("s-1")
    assert packed
    s = agent.load("s-1", Detail())
    assert s.reload is None
    assert s.detail is not None
    fold_s1 = fold.get("s-1")
    assert fold_s1 is not None
    assert list(fold_s1.reload or ()) == list(packed)
