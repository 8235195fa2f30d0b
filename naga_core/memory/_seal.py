"""A subject's sessions sealed under the subject's key
(docs/adr/0037-seal18-sealed-sessions.md).

The text fields of a turn record (what a person said, was answered, a
tool's arguments and results) are sealed as one box before the record is
staged: a fresh data key wrapped by the subject's KEK (the memory store's,
:class:`KeyRing`), the fields under the data key, with the record's kind,
session, turn and subject as associated data. What the core needs without
keys (session, turn, seqs, counts, kinds) stays in the clear; the hash
chain, Merkle proofs and projection are over the sealed bytes, so they
verify before and after a forget.

Blobs holding a subject's words (model requests and answers, large tool
results) are sealed the same way, self-describing (a magic line, then a
``SealedBox``), and content-addressed over the ciphertext.

Reading opens through the same key ring: once the subject's key is gone a
record's text fields hold :data:`FORGOTTEN` and ``forgotten`` is set, a
blob opens to None. Nothing here raises on a forgotten or broken box.
"""

from __future__ import annotations

import json
import logging
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import sealed_pb2 as slpb
from naga_core._home import Home
from naga_core.memory._crypto import KEY_BYTES, new_key, open_box, seal
from naga_core.memory._errors import MemoryKeyError
from naga_core.memory._keys import KeyRing, load_master, master_key_path

log = logging.getLogger("naga.memory.seal")

#: What a forgotten record's text fields say instead of the text.
FORGOTTEN = "[forgotten: the key of its subject was destroyed]"
#: What a record that does not open says (tampered, or a broken key file).
UNREADABLE = "[unreadable: its sealed text does not open]"
#: The JSON fields' form of the marker (a tool's arguments and result).
FORGOTTEN_JSON = json.dumps({"forgotten": FORGOTTEN})
#: The first bytes of a sealed blob (then a serialized SealedBox).
BLOB_MAGIC = b"naga-sealed-blob v1\n"
_TURN_DEK = b"naga-turn-dek v1\0"
_TURN_TEXT = b"naga-turn-text v1\0"
_BLOB_DEK = b"naga-blob-dek v1\0"
_BLOB_DATA = b"naga-blob-data v1\0"
_TEXT_DEK = b"naga-text-dek v1\0"
_TEXT_DATA = b"naga-text-data v1\0"
#: The TurnRecord fields that carry a person's words.
_TEXT_FIELDS = ("text", "arguments_json", "result_json", "error", "error_message")


def _aad(prefix: bytes, *parts: str) -> bytes:
    out = bytearray(prefix)
    for p in parts:
        raw = p.encode()
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


class Sealer:
    """Seals and opens a subject's records and blobs under its key ring.
    Shares the memory store's ring, so a forget (which drops the key from
    the ring and the disk) is seen here at once."""

    def __init__(self, keys: KeyRing | None) -> None:
        #: None: no master key (a reader of a home that never sealed): every
        #: sealed box reads as forgotten.
        self._keys = keys

    @classmethod
    def reader(cls, home: Home) -> Sealer:
        """For a process reading the home's files (the CLI with no core):
        never creates a key."""
        if not os.path.exists(master_key_path(home)):
            return cls(None)
        return cls(KeyRing(home, load_master(home, create=False)))

    def key_id(self, subject: str) -> str | None:
        """The id of ``subject``'s key on disk now; None if it has none."""
        if self._keys is None:
            return None
        got = self._keys.current(subject)
        return got[0] if got is not None else None

    @property
    def generation(self) -> int:
        """Moves with every forget (a key destroyed): what a reader opened
        and cached before it may no longer be readable."""
        return 0 if self._keys is None else self._keys.generation

    def derived_key(self, subject: str, label: bytes, *, create: bool) -> bytes | None:
        """A key for one use (``label`` names it) derived with HKDF-SHA256 from
        ``subject``'s key (made on first use if ``create``); None if the
        subject has no key (never had one, or was forgotten): what it keyed
        can no longer be recomputed, so ids it made are unlinkable."""
        if self._keys is None:
            return None
        got = self._keys.ensure(subject) if create else self._keys.current(subject)
        if got is None:
            return None
        kek_id, kek = got
        hkdf = HKDF(
            algorithm=hashes.SHA256(),
            length=KEY_BYTES,
            salt=None,
            info=label + b"\0" + kek_id.encode(),
        )
        return hkdf.derive(kek)

    # --- short texts ------------------------------------------------------------------

    def seal_text(self, subject: str, text: str, *context: str) -> slpb.SealedBox:
        """``text`` sealed under ``subject``'s key, bound to ``context`` (the
        record it sits in); an empty box when there is no key ring."""
        if self._keys is None or not subject:
            return slpb.SealedBox()
        kek_id, kek = self._keys.ensure(subject)
        dek = new_key()
        box = slpb.SealedBox(subject=subject, kek_id=kek_id)
        box.wrapped_key = seal(kek, dek, _aad(_TEXT_DEK, subject, kek_id, *context))
        box.ciphertext = seal(dek, text.encode(), _aad(_TEXT_DATA, subject, kek_id, *context))
        return box

    def open_text(self, box: slpb.SealedBox, *context: str) -> str:
        """What :meth:`seal_text` sealed, or :data:`FORGOTTEN` (its key is
        gone) / :data:`UNREADABLE` (it does not open)."""
        dek = self._data_key(box, _aad(_TEXT_DEK, box.subject, box.kek_id, *context), "text")
        if isinstance(dek, str):
            return dek
        try:
            raw = open_box(
                dek, box.ciphertext, _aad(_TEXT_DATA, box.subject, box.kek_id, *context), "text"
            )
            return raw.decode()
        except (MemoryKeyError, UnicodeDecodeError):
            return UNREADABLE

    # --- turn records -----------------------------------------------------------------

    def seal_turn(self, kind: str, subject: str, body: apb.TurnRecord) -> apb.TurnRecord:
        """``body`` with its text fields sealed under ``subject``'s key (made
        on first use); ``body`` itself if it holds no text."""
        inner = apb.TurnRecord()
        for name in _TEXT_FIELDS:
            value = getattr(body, name)
            if value:
                setattr(inner, name, value)
        if inner.ByteSize() == 0 or self._keys is None or not subject:
            return body  # no text, or no subject (the core's own words)
        kek_id, kek = self._keys.ensure(subject)
        dek = new_key()
        out = apb.TurnRecord()
        out.CopyFrom(body)
        for name in _TEXT_FIELDS:
            out.ClearField(name)
        out.sealed.subject, out.sealed.kek_id = subject, kek_id
        out.sealed.wrapped_key = seal(kek, dek, _turn_aad(_TURN_DEK, kind, out))
        out.sealed.ciphertext = seal(
            dek, inner.SerializeToString(), _turn_aad(_TURN_TEXT, kind, out)
        )
        return out

    def open_turn(self, kind: str, body: apb.TurnRecord) -> apb.TurnRecord:
        """``body`` with its text fields back (``body`` itself if nothing
        was sealed); marked ``forgotten`` when its subject's key is gone."""
        if not body.HasField("sealed"):
            return body
        dek = self.turn_key(kind, body)
        if isinstance(dek, str):
            out = apb.TurnRecord()
            out.CopyFrom(body)
            out.ClearField("sealed")
            return _marked(kind, out, dek)
        return open_turn_with(kind, body, dek)

    def turn_key(self, kind: str, body: apb.TurnRecord) -> bytes | str:
        """The data key of a sealed record (what an export hands a replay,
        which then needs no subject key), or the marker saying why not."""
        return self._data_key(body.sealed, _turn_aad(_TURN_DEK, kind, body), kind)

    # --- blobs ------------------------------------------------------------------------

    def seal_blob(self, subject: str, data: bytes) -> bytes:
        """``data`` as a sealed blob of ``subject`` (store it as it is)."""
        if self._keys is None:
            return data
        kek_id, kek = self._keys.ensure(subject)
        dek = new_key()
        box = slpb.SealedBox(
            subject=subject,
            kek_id=kek_id,
            wrapped_key=seal(kek, dek, _aad(_BLOB_DEK, subject, kek_id)),
            ciphertext=seal(dek, data, _aad(_BLOB_DATA, subject, kek_id)),
        )
        return BLOB_MAGIC + box.SerializeToString()

    def open_blob(self, data: bytes) -> bytes | None:
        """A blob's content: ``data`` itself if it was not sealed; None if
        its subject was forgotten (or it does not open)."""
        if not data.startswith(BLOB_MAGIC):
            return data
        dek = self.blob_key(data)
        return None if dek is None else open_blob_with(data, dek)

    def blob_subject(self, data: bytes) -> str | None:
        """Whose key sealed a blob (its box's subject, bound into both its
        keys' AAD, so not forgeable); None if it is not a sealed blob."""
        if not data.startswith(BLOB_MAGIC):
            return None
        box = _blob_box(data)
        return box.subject if box is not None and box.subject else None

    def blob_key(self, data: bytes) -> bytes | None:
        """The data key of a sealed blob; None if it has none to give."""
        box = _blob_box(data)
        if box is None:
            return None
        dek = self._data_key(box, _aad(_BLOB_DEK, box.subject, box.kek_id), "blob")
        return None if isinstance(dek, str) else dek

    def _data_key(self, box: slpb.SealedBox, dek_aad: bytes, what: str) -> bytes | str:
        """The box's data key, or the marker saying why there is none."""
        if self._keys is None:
            return FORGOTTEN
        try:
            key = self._keys.current(box.subject)
        except MemoryKeyError as exc:
            log.warning("a sealed %s of %s: its key does not load: %s", what, box.subject, exc)
            return UNREADABLE
        if key is None or key[0] != box.kek_id:
            return FORGOTTEN
        try:
            dek = open_box(key[1], box.wrapped_key, dek_aad, f"the data key of a {what}")
        except MemoryKeyError as exc:
            log.warning("a sealed %s of %s does not open: %s", what, box.subject, exc)
            return UNREADABLE
        return dek if len(dek) == KEY_BYTES else UNREADABLE


def _turn_aad(prefix: bytes, kind: str, body: apb.TurnRecord) -> bytes:
    box = body.sealed
    return _aad(prefix, kind, box.subject, box.kek_id, body.session, body.turn_id)


def _blob_box(data: bytes) -> slpb.SealedBox | None:
    try:
        return slpb.SealedBox.FromString(data[len(BLOB_MAGIC) :])
    except DecodeError:
        return None


def open_turn_with(kind: str, body: apb.TurnRecord, dek: bytes | None) -> apb.TurnRecord:
    """A sealed record opened with its data key (:meth:`Sealer.turn_key`);
    marked forgotten with none, unreadable if it does not open."""
    if not body.HasField("sealed"):
        return body
    out = apb.TurnRecord()
    out.CopyFrom(body)
    out.ClearField("sealed")
    if dek is None:
        return _marked(kind, out, FORGOTTEN)
    try:
        raw = open_box(dek, body.sealed.ciphertext, _turn_aad(_TURN_TEXT, kind, body), kind)
        inner = apb.TurnRecord.FromString(raw)
    except (MemoryKeyError, DecodeError) as exc:
        log.warning("a sealed %s record of %s does not open: %s", kind, body.sealed.subject, exc)
        return _marked(kind, out, UNREADABLE)
    for name in _TEXT_FIELDS:
        value = getattr(inner, name)
        if value:
            setattr(out, name, value)
    return out


def open_blob_with(data: bytes, dek: bytes) -> bytes | None:
    """A sealed blob opened with its data key (:meth:`Sealer.blob_key`);
    None if it does not open."""
    box = _blob_box(data)
    if box is None:
        return None
    try:
        return open_box(dek, box.ciphertext, _aad(_BLOB_DATA, box.subject, box.kek_id), "blob")
    except MemoryKeyError:
        return None


def is_sealed_blob(data: bytes) -> bool:
    return data.startswith(BLOB_MAGIC)


def _marked(kind: str, out: apb.TurnRecord, marker: str) -> apb.TurnRecord:
    """A record whose sealed fields cannot be read: each field its kind
    carries says ``marker``, so no reader takes an empty string for text."""
    out.forgotten = True
    out.text = marker
    if kind in ("turn.tool", "turn.tool_call"):
        out.arguments_json = json.dumps({"forgotten": marker})
        out.result_json = out.arguments_json
        if not out.ok:
            out.error = marker
    if kind == "turn.error":
        out.error_message = marker
    return out


__all__ = [
    "BLOB_MAGIC",
    "FORGOTTEN",
    "FORGOTTEN_JSON",
    "UNREADABLE",
    "Sealer",
    "is_sealed_blob",
    "open_blob_with",
    "open_turn_with",
]
