"""Where the agent seals a subject's turn records and blobs, and opens them
(docs/adr/0037-seal18-sealed-sessions.md): at the record's write
(``Agent._stage``) and at every read that needs the text (the sessions'
reload, a replayed key, the turns a start re-runs, the skills' review).

The subject of a record is its turn's (``subject_of`` its peer and trust,
as memory's); a record written with no running turn (a start ending a
turn it does not re-run) carries no text, so nothing is sealed.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from naga.trust import TrustLevel, UnknownTrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga_core.agent import _sessions as rec
from naga_core.agent._recover import OpenTurn
from naga_core.agent._turn import Running
from naga_core.errors import BlobError
from naga_core.ledger import BlobStore, Ledger, Record
from naga_core.memory import Sealer, subject_of


def record_subject(running: Running | None, body: apb.TurnRecord) -> str:
    """Whose key seals ``body``: its running turn's subject, else the one its
    own fields name (a message carries its peer and trust); "" for none."""
    if running is not None:
        return subject_of(running.peer, running.trust, running.session)
    if not body.trust:
        return ""  # not a message: the core's own words (a start ending a turn)
    try:
        trust = TrustLevel.parse(body.trust)
    except UnknownTrustLevel:
        trust = TrustLevel.UNTRUSTED
    return subject_of(body.peer, trust, body.session)


def open_record(sealer: Sealer, record: Record) -> apb.TurnRecord | None:
    """The opened TurnRecord of a ``turn.*`` record; None for another kind
    or one that does not decode."""
    if not record.kind.startswith("turn."):
        return None
    try:
        body = apb.TurnRecord.FromString(record.payload)
    except DecodeError:
        return None
    return sealer.open_turn(record.kind, body)


def reopen_turns(
    sealer: Sealer, ledger: Ledger, turns: Iterable[OpenTurn], blobs: BlobStore | None = None
) -> None:
    """Give the open turns a start re-runs their text back: the start-up
    fold keeps records sealed (its image is a file), so their message and
    steering texts are read from the ledger and opened (a forgotten one
    reads as forgotten); with ``blobs``, their recorded steps too, as the
    model saw them (:func:`read_steps`). Reads the disk: only after a stop
    left turns open."""
    for turn in turns:
        message = open_record(sealer, ledger.read(turn.message_seq))
        if message is not None and message.text:
            turn.text = message.text
        if blobs is not None:
            read_steps(sealer, ledger, blobs, turn)
        if not turn.steering:
            continue
        steers = [
            body.text
            for r in ledger.iter_records(turn.message_seq + 1, ledger.size)
            if r.kind == rec.STEER
            and (body := open_record(sealer, r)) is not None
            and body.turn_id == turn.turn_id
        ]
        if len(steers) == len(turn.steering):
            turn.steering = steers


def read_steps(sealer: Sealer, ledger: Ledger, blobs: BlobStore, turn: OpenTurn) -> None:
    """``turn.replay``: its recorded steps as the messages the model was
    sent after the turn's message (each answered model call's assistant
    message, each tool result), so a re-run resumes where it stopped
    (docs/adr/0042-recover13b-resume.md); or ``turn.unreadable`` saying why
    they cannot be (a forgotten subject, a missing blob)."""
    out: list[mpb.ChatMessage] = []
    for seq in turn.steps:
        record = ledger.read(seq)
        body = open_record(sealer, record)
        if body is None or body.turn_id != turn.turn_id or body.forgotten:
            turn.unreadable = f"its recorded step {seq} cannot be read back"
            return
        if record.kind == rec.MODEL:
            try:
                raw = sealer.open_blob(blobs.get(body.response_blob))
                response = None if raw is None else mpb.ChatResponse.FromString(raw)
            except (BlobError, DecodeError):
                response = None
            if response is None:
                turn.unreadable = f"the model's answer of its recorded step {seq} cannot be read"
                return
            out.append(response.message)
            continue
        out.append(
            mpb.ChatMessage(
                role=mpb.ROLE_TOOL,
                content=body.result_json if body.ok else body.error,
                tool_call_id=body.call_id,
                tool_error=not body.ok,
            )
        )
        if body.result_blob:
            turn.stored[body.call_id] = (body.result_blob, body.result_bytes)
    turn.replay = out


__all__ = ["open_record", "read_steps", "record_subject", "reopen_turns"]
