"""Sealed turn records and blobs (docs/adr/0037-seal18-sealed-sessions.md)
as properties: a sealed record holds none of its text in the clear and
opens to exactly the record it was; a flipped bit of its box, or the box
moved to another kind, session, turn or subject, reads as unreadable
(never as text, never an exception); a forgotten subject's records and
blobs read as forgotten, through a reopened key ring too, while every
other subject's still open; a record's data key (what a replay bundle
carries) opens it with no subject key."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import agent_pb2 as apb
from naga_core._home import Home
from naga_core.memory import (
    FORGOTTEN,
    UNREADABLE,
    KeyRing,
    Sealer,
    is_sealed_blob,
    open_blob_with,
    open_turn_with,
)

KINDS = st.sampled_from(
    ["turn.message", "turn.steer", "turn.reply", "turn.error", "turn.tool", "turn.tool_call"]
)
SUBJECTS = st.sampled_from(["webchat:owner", "webchat:alice", "wechat:b1/u2", "session:s-9"])
WORDS = st.text(min_size=0, max_size=80)
#: A canary long enough not to occur in a box by chance.
CANARY = "zq9canary-sealed-text"


def _home() -> Home:
    root = tempfile.mkdtemp(prefix="naga-seal-")
    return Home(root)


def _ring(home: Home) -> KeyRing:
    return KeyRing.of_home(home)


@st.composite
def records(draw: st.DrawFn) -> apb.TurnRecord:
    return apb.TurnRecord(
        session=draw(st.sampled_from(["s-a", "s-b"])),
        turn_id=draw(st.sampled_from(["t-1", "t-2"])),
        peer=draw(st.sampled_from(["", "webchat:alice"])),
        text=CANARY + draw(WORDS),
        arguments_json=draw(st.sampled_from(["", '{"text": "' + CANARY + '"}'])),
        result_json=draw(st.sampled_from(["", '{"ok": true}'])),
        error_message=draw(st.sampled_from(["", "failed: " + CANARY])),
        model_calls=draw(st.integers(0, 5)),
        message_seq=draw(st.integers(0, 10**6)),
    )


HOME = _home()
SEALER = Sealer(_ring(HOME))


@settings(max_examples=60)
@given(kind=KINDS, subject=SUBJECTS, body=records())
def test_a_sealed_record_opens_to_itself_and_shows_no_text(
    kind: str, subject: str, body: apb.TurnRecord
) -> None:
    sealed = SEALER.seal_turn(kind, subject, body)
    raw = sealed.SerializeToString()
    assert CANARY.encode() not in raw
    assert (sealed.session, sealed.turn_id, sealed.model_calls) == (
        body.session,
        body.turn_id,
        body.model_calls,
    )
    assert sealed.sealed.subject == subject
    opened = SEALER.open_turn(kind, apb.TurnRecord.FromString(raw))
    assert opened == body
    # The data key alone opens it (a replay bundle's), with no key ring.
    dek = SEALER.turn_key(kind, sealed)
    assert isinstance(dek, bytes)
    assert open_turn_with(kind, sealed, dek) == body


@settings(max_examples=60)
@given(
    kind=KINDS,
    subject=SUBJECTS,
    body=records(),
    flip=st.tuples(
        st.sampled_from(["ciphertext", "wrapped_key"]), st.integers(0, 10**6), st.integers(0, 7)
    ),
)
def test_a_flipped_bit_reads_as_unreadable(
    kind: str, subject: str, body: apb.TurnRecord, flip: tuple[str, int, int]
) -> None:
    where, at, bit = flip
    sealed = SEALER.seal_turn(kind, subject, body)
    data = bytearray(getattr(sealed.sealed, where))
    data[at % len(data)] ^= 1 << bit
    setattr(sealed.sealed, where, bytes(data))
    opened = SEALER.open_turn(kind, sealed)
    assert opened.forgotten
    assert opened.text == UNREADABLE
    assert CANARY not in str(opened)


@settings(max_examples=60)
@given(
    kind=KINDS,
    subject=SUBJECTS,
    body=records(),
    moved=st.sampled_from(["kind", "session", "turn_id", "subject"]),
)
def test_a_box_moved_to_another_record_does_not_open(
    kind: str, subject: str, body: apb.TurnRecord, moved: str
) -> None:
    sealed = SEALER.seal_turn(kind, subject, body)
    if moved == "kind":
        kind = "turn.other"
    elif moved == "subject":
        sealed.sealed.subject = subject + "x"  # no key, or another's: never this text
    else:
        setattr(sealed, moved, getattr(sealed, moved) + "x")
    opened = SEALER.open_turn(kind, sealed)
    assert opened.forgotten
    assert opened.text in (UNREADABLE, FORGOTTEN)
    assert CANARY not in str(opened)


@settings(max_examples=25, deadline=None)
@given(
    kind=KINDS,
    bodies=st.lists(st.tuples(SUBJECTS, records()), min_size=1, max_size=6),
    gone=SUBJECTS,
    data=st.binary(min_size=1, max_size=200),
)
def test_forgetting_one_subject_leaves_every_other_readable(
    kind: str, bodies: list[tuple[str, apb.TurnRecord]], gone: str, data: bytes
) -> None:
    home = _home()
    ring = _ring(home)
    sealer = Sealer(ring)
    sealed = [(s, b, sealer.seal_turn(kind, s, b)) for s, b in bodies]
    blobs = [(s, sealer.seal_blob(s, data)) for s, _ in bodies]
    assert all(is_sealed_blob(b) for _, b in blobs)
    keys = [sealer.blob_key(b) for _, b in blobs]
    ring.destroy(gone)
    for again in (sealer, Sealer.reader(home)):  # this ring, and a reopened one
        for subject, body, box in sealed:
            opened = again.open_turn(kind, box)
            if subject == gone:
                assert opened.forgotten
                assert opened.text == FORGOTTEN
            else:
                assert opened == body
        for subject, blob in blobs:
            assert again.open_blob(blob) == (None if subject == gone else data)
    # A later record of the forgotten subject has a new key; the old stay shut.
    fresh = sealer.seal_turn(kind, gone, bodies[0][1])
    assert sealer.open_turn(kind, fresh) == bodies[0][1]
    for subject, _body, box in sealed:
        if subject == gone:
            assert sealer.open_turn(kind, box).forgotten
    # What an export took before the forget still opens (outside forgetting).
    for (_subject, blob), dek in zip(blobs, keys, strict=True):
        assert dek is not None
        assert open_blob_with(blob, dek) == data


def test_a_record_with_no_text_or_no_subject_is_left_as_it_is() -> None:
    body = apb.TurnRecord(session="s-a", turn_id="t-1", model_calls=2)
    assert SEALER.seal_turn("turn.model", "webchat:owner", body) is body
    noted = apb.TurnRecord(session="s-a", turn_id="t-1", error_message="the core stopped")
    assert SEALER.seal_turn("turn.error", "", noted) is noted
    assert SEALER.open_turn("turn.error", noted) is noted


def test_a_home_that_never_sealed_reads_sealed_boxes_as_forgotten() -> None:
    body = apb.TurnRecord(session="s-a", turn_id="t-1", text=CANARY)
    sealed = SEALER.seal_turn("turn.message", "webchat:owner", body)
    other = Sealer.reader(_home())
    opened = other.open_turn("turn.message", sealed)
    assert opened.forgotten
    assert opened.text == FORGOTTEN
    assert other.open_blob(SEALER.seal_blob("webchat:owner", b"x")) is None
    assert other.open_blob(b"plain bytes") == b"plain bytes"
