"""What the start's fold keeps of an open turn for its resumption
(docs/adr/0042-recover13b-resume.md): its steps in ledger order, and which
started calls were answered (replayed) and which were in flight (judged)."""

from __future__ import annotations

from naga.v1 import agent_pb2 as apb
from naga_core.agent import StartFold
from naga_core.ledger import Record


def _record(seq: int, kind: str, **fields: object) -> Record:
    body = apb.TurnRecord(session="s", turn_id="t1", **fields)  # pyright: ignore[reportArgumentType]
    return Record(seq, 0, kind, body.SerializeToString(), (), b"", b"", b"")


def test_steps_and_answered_calls() -> None:
    fold = StartFold()
    records = [
        _record(0, "turn.message", text="hi", trust="owner", idempotency_key="k"),
        _record(1, "turn.model"),
        _record(2, "turn.tool_call", call_id="a", tool="web.fetch"),
        _record(3, "turn.tool", call_id="a", tool="web.fetch", ok=True),
        # Refused: no intent, a result the model saw; no call started.
        _record(4, "turn.tool", call_id="r", tool="shell.run", ok=False, error="no"),
        _record(5, "turn.model", failed=True),  # not a step: asked again
        _record(6, "turn.model"),
        _record(7, "turn.tool_call", call_id="b", tool="memory.write"),
        _record(8, "turn.tool_call", call_id="c", tool="fs.write"),
        _record(9, "turn.tool", call_id="c", tool="fs.write", ok=False, error="failed"),
    ]
    for r in records:
        fold.see(r)
    (turn,) = fold.open.found()
    assert turn.steps == [1, 3, 4, 6, 9]
    assert {c.call_id: c.answered for c in turn.calls.values()} == {
        "a": True,
        "b": False,
        "c": True,  # it failed, and the model was told so
    }
    assert [c.call_id for c in turn.pending] == ["b"]
    restored = StartFold.restore(fold.image(), fold.seq)
    (again,) = restored.open.found()
    assert again.steps == turn.steps
    assert [c.call_id for c in again.pending] == ["b"]
