"""Record framing: pure encode/decode, no I/O.

On disk a record is a 24-byte header and a body::

    header  magic "NGL1" | version u8 | reserved 3 x 0 | body_len u32 |
            batch_pos u32 | batch_len u32 | crc32 u32          (big-endian)
    body    seq u64 | timestamp_ns i64 | prev_hash 32 | kind_len u8 | kind |
            nrefs u8 | nrefs x 32-byte blob digest | payload

The CRC covers the body and the first 20 header bytes, so a torn or
zero-filled tail never parses (the magic is non-zero as well). The body is
the Merkle leaf (leaf hash = SHA-256(0x00 || body)) and the leaf hash is what
the next record's ``prev_hash`` chains to: one hash per record serves both the
chain and the tree.

``batch_pos``/``batch_len`` say where the record sits in the single write that
carried it. They are storage bookkeeping, outside the hashed body: recovery
uses them to tell a torn, never-acknowledged last write (records of that write
may be missing in any order) from damage to data that was synced.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from naga.constants import (
    MAX_BLOB_REFS,
    MAX_KIND_BYTES,
    MAX_RECORD_BODY_BYTES,
    RECORD_HEADER_BYTES,
    RECORD_MAGIC,
    RECORD_VERSION,
)
from naga_core.errors import InvalidRecord

_HEADER = struct.Struct(">4sB3sIIII")
_BODY_FIXED = struct.Struct(">Qq32sB")
_ZERO3 = b"\x00\x00\x00"
_HEAD20 = struct.Struct(">8sIII")
_MAGIC_VERSION = RECORD_MAGIC + bytes((RECORD_VERSION,)) + _ZERO3
HASH_BYTES = 32
GENESIS_PREV = bytes(HASH_BYTES)

assert _HEADER.size == RECORD_HEADER_BYTES


def _check_kind(kind: str) -> bytes:
    try:
        raw = kind.encode("ascii")
    except UnicodeEncodeError:
        raise InvalidRecord(f"record kind {kind!r} is not ASCII") from None
    if not raw or len(raw) > MAX_KIND_BYTES:
        raise InvalidRecord(f"record kind must be 1..{MAX_KIND_BYTES} bytes, got {len(raw)}")
    if not all(0x21 <= b < 0x7F for b in raw):
        raise InvalidRecord(f"record kind {kind!r} has spaces or control characters")
    return raw


@dataclass(frozen=True, slots=True)
class Entry:
    """What a caller asks to append: a kind, a payload and blob references."""

    kind: str
    payload: bytes
    blob_refs: tuple[bytes, ...] = ()
    # The body after its fixed fields, encoded once by ``of``: an entry
    # appended many times (or staged on the hot path) is not re-encoded.
    tail: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def of(cls, kind: str, payload: bytes, blob_refs: Sequence[bytes] = ()) -> Entry:
        """Validate and build; InvalidRecord names what is wrong."""
        _check_kind(kind)
        if not isinstance(payload, bytes | bytearray | memoryview):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidRecord(f"payload must be bytes, got {type(payload).__name__}")
        refs = tuple(bytes(r) for r in blob_refs)
        if len(refs) > MAX_BLOB_REFS:
            raise InvalidRecord(f"at most {MAX_BLOB_REFS} blob references, got {len(refs)}")
        for r in refs:
            if len(r) != HASH_BYTES:
                raise InvalidRecord(f"a blob reference is a 32-byte digest, got {len(r)} bytes")
        entry = cls(kind, bytes(payload), refs, _encode_tail(kind, refs, bytes(payload)))
        size = _BODY_FIXED.size + len(entry.tail)
        if size > MAX_RECORD_BODY_BYTES:
            raise InvalidRecord(
                f"record body would be {size} bytes, over the {MAX_RECORD_BODY_BYTES} limit; "
                "put large payloads in the blob store"
            )
        return entry


@dataclass(frozen=True, slots=True)
class Record:
    """A record as read back: the decoded body plus the hashes that bind it."""

    seq: int
    timestamp_ns: int
    kind: str
    payload: bytes
    blob_refs: tuple[bytes, ...]
    prev_hash: bytes
    leaf_hash: bytes
    body: bytes


def leaf_hash_of(body: bytes | memoryview) -> bytes:
    h = hashlib.sha256(b"\x00")
    h.update(body)
    return h.digest()


def _encode_tail(kind: str, refs: tuple[bytes, ...], payload: bytes) -> bytes:
    return b"".join((kind.encode("ascii"), bytes((len(refs),)), *refs, payload))


def encode_body(entry: Entry, seq: int, timestamp_ns: int, prev_hash: bytes) -> bytes:
    tail = entry.tail or _encode_tail(entry.kind, entry.blob_refs, entry.payload)
    return _BODY_FIXED.pack(seq, timestamp_ns, prev_hash, len(entry.kind)) + tail


def frame(body: bytes, body_crc: int, batch_pos: int, batch_len: int) -> bytes:
    """Header + body. ``body_crc`` is ``zlib.crc32(body)``, computed earlier so
    that the writer, which learns the batch shape last, only CRCs 20 bytes."""
    head = _HEAD20.pack(_MAGIC_VERSION, len(body), batch_pos, batch_len)
    return head + zlib.crc32(head, body_crc).to_bytes(4, "big") + body


def decode_body(body: bytes, leaf_hash: bytes | None = None) -> Record:
    """Decode a body whose CRC already matched. InvalidRecord if the layout is
    inconsistent (which, past a good CRC, means a writer bug or forgery)."""
    seq, ts, prev, kind, refs, pos = _layout(body)
    return Record(
        seq=seq,
        timestamp_ns=ts,
        kind=kind,
        payload=body[pos:],
        blob_refs=refs,
        prev_hash=prev,
        leaf_hash=leaf_hash if leaf_hash is not None else leaf_hash_of(body),
        body=body,
    )


def blob_refs_of(body: bytes | memoryview) -> tuple[bytes, ...]:
    """The blob references of a body whose CRC already matched, its layout
    checked as :func:`decode_body` checks it, without building the record
    (the open's scan of the unsealed tail: most of its CPU was the records
    it built and dropped, issue 13)."""
    return _layout(body)[4]


def _layout(body: bytes | memoryview) -> tuple[int, int, bytes, str, tuple[bytes, ...], int]:
    """seq, timestamp, prev hash, kind, blob refs and where the payload starts."""
    if len(body) < _BODY_FIXED.size + 1:
        raise InvalidRecord(f"body of {len(body)} bytes is shorter than the fixed fields")
    seq, ts, prev, kind_len = _BODY_FIXED.unpack_from(body, 0)
    pos: int = _BODY_FIXED.size
    if kind_len == 0 or pos + kind_len + 1 > len(body):
        raise InvalidRecord(f"kind length {kind_len} does not fit the body")
    kind_raw = body[pos : pos + kind_len]
    pos += kind_len
    nrefs: int = body[pos]
    pos += 1
    if pos + nrefs * HASH_BYTES > len(body):
        raise InvalidRecord(f"{nrefs} blob references do not fit the body")
    refs = tuple(
        bytes(body[pos + i * HASH_BYTES : pos + (i + 1) * HASH_BYTES]) for i in range(nrefs)
    )
    pos += nrefs * HASH_BYTES
    try:
        kind = str(kind_raw, "ascii")
    except UnicodeDecodeError:
        raise InvalidRecord("record kind is not ASCII") from None
    return seq, ts, prev, kind, refs, pos


@dataclass(frozen=True, slots=True)
class Frame:
    """One well-formed frame found by :func:`scan`."""

    offset: int
    end: int
    seq: int
    prev_hash: bytes
    batch_pos: int
    batch_len: int
    body: memoryview


@dataclass(frozen=True, slots=True)
class FrameFault:
    """Why the bytes at ``offset`` are not a record."""

    offset: int
    reason: str


def check_frame(data: memoryview, offset: int) -> Frame | FrameFault:
    """Parse the frame starting at ``offset`` of ``data``; never raises."""
    remaining = len(data) - offset
    if remaining < RECORD_HEADER_BYTES:
        return FrameFault(offset, f"truncated header: {remaining} of {RECORD_HEADER_BYTES} bytes")
    magic, version, reserved, body_len, batch_pos, batch_len, crc = _HEADER.unpack_from(
        data, offset
    )
    if magic != RECORD_MAGIC:
        return FrameFault(offset, f"bad magic {bytes(magic).hex()}")
    if version != RECORD_VERSION:
        return FrameFault(offset, f"unsupported record version {version}")
    if reserved != _ZERO3:
        return FrameFault(offset, "reserved header bytes are not zero")
    if body_len > MAX_RECORD_BODY_BYTES or body_len < _BODY_FIXED.size + 2:
        return FrameFault(offset, f"body length {body_len} out of range")
    if batch_len == 0 or batch_pos >= batch_len:
        return FrameFault(offset, f"batch position {batch_pos} of {batch_len} is impossible")
    start = offset + RECORD_HEADER_BYTES
    end = start + body_len
    if end > len(data):
        return FrameFault(offset, f"truncated body: {len(data) - start} of {body_len} bytes")
    body = data[start:end]
    if zlib.crc32(data[offset : offset + 20], zlib.crc32(body)) != crc:
        return FrameFault(offset, "checksum mismatch")
    seq, _ts, prev, _kl = _BODY_FIXED.unpack_from(body, 0)
    return Frame(offset, end, seq, prev, batch_pos, batch_len, body)


HEADER = _HEADER
BODY_SEQ_PREV = struct.Struct(">Q8x32s")
MIN_BODY_BYTES = _BODY_FIXED.size + 2


def iter_frames(data: memoryview, offset: int = 0) -> Iterator[Frame | FrameFault]:
    """Frames from ``offset`` until the first fault (yielded last) or the end."""
    while offset < len(data):
        got = check_frame(data, offset)
        yield got
        if isinstance(got, FrameFault):
            return
        offset = got.end


def find_next_frame(data: memoryview, start: int) -> Frame | None:
    """The first well-formed frame at or after ``start``, if any.

    Used after a fault to decide whether the damage is a torn tail (nothing
    valid follows, or only records of the same torn write) or corruption in
    the middle of the log (a valid record from a later write follows).
    """
    raw = data.obj if isinstance(data.obj, bytes) else bytes(data)
    pos = start
    while True:
        pos = raw.find(RECORD_MAGIC, pos)
        if pos < 0:
            return None
        got = check_frame(data, pos)
        if isinstance(got, Frame):
            return got
        pos += 1
