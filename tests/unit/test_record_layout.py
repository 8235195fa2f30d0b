"""The open's scan of the unsealed tail checks each body's layout without
building its record (issue 13): it accepts and refuses exactly what
decode_body does, with the same words, and a refused body is damage."""

from __future__ import annotations

import struct
import zlib

import pytest

from naga_core.errors import InvalidRecord
from naga_core.ledger._record import (
    GENESIS_PREV,
    Entry,
    blob_refs_of,
    decode_body,
    encode_body,
    frame,
    leaf_hash_of,
)
from naga_core.ledger._segment import scan_segment

_FIXED = struct.Struct(">Qq32sB")
REFS = (bytes(range(32)), bytes(range(32, 64)))


def _body(seq: int, tail: bytes, kind_len: int, prev: bytes = GENESIS_PREV) -> bytes:
    return _FIXED.pack(seq, 1_700_000_000, prev, kind_len) + tail


MALFORMED = {
    "short": b"\x00" * 20,
    "no kind": _body(0, b"\x00payload", 0),
    "kind past the end": _body(0, b"abc", 9),
    "refs past the end": _body(0, b"kind\x03" + bytes(40), 4),
    "kind not ASCII": _body(0, "kïnd".encode() + b"\x00", 5),
}


@pytest.mark.parametrize("refs", [(), REFS])
def test_a_good_body_gives_the_refs_decode_gives(refs: tuple[bytes, ...]) -> None:
    body = encode_body(Entry.of("turn.message", b"payload", refs), 7, 1, GENESIS_PREV)
    assert blob_refs_of(body) == decode_body(body).blob_refs == refs
    assert blob_refs_of(memoryview(body)) == refs


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_bad_layout_is_refused_with_decode_bodys_words(name: str) -> None:
    body = MALFORMED[name]
    with pytest.raises(InvalidRecord) as decoded:
        decode_body(body)
    with pytest.raises(InvalidRecord) as scanned:
        blob_refs_of(memoryview(body))
    assert str(scanned.value) == str(decoded.value)


def test_the_scan_calls_a_bad_layout_past_a_good_crc_damage() -> None:
    good = encode_body(Entry.of("turn.message", b"one", REFS), 0, 1, GENESIS_PREV)
    bad = _body(1, b"kind\x03" + bytes(40), 4, prev=leaf_hash_of(good))
    data = b"".join(frame(b, zlib.crc32(b), 0, 1) for b in (good, bad))
    res = scan_segment(data, 0, GENESIS_PREV, collect_refs=True)
    assert res.count == 1
    assert res.blob_refs == list(REFS)
    assert res.damage is not None
    assert res.damage.reason == "seq 1: 3 blob references do not fit the body"
