"""Segment files, their index and seal formats, and the scan that recovery
and verification share. Pure functions over bytes; no I/O here.

A segment is ``<first seq, 20 digits>.log``. When it is full it gets
``.idx`` (offset and leaf hash of every record, so proofs and reads need no
rescan) and ``.seal`` (signed: the segment's and index's SHA-256, the Merkle
frontier and root at its end, a signed checkpoint, and the consistency proof
from the previous seal's checkpoint).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any

from naga.constants import (
    MAX_RECORD_BODY_BYTES,
    RECORD_HEADER_BYTES,
    RECORD_MAGIC,
    RECORD_VERSION,
    SEGMENT_NAME_DIGITS,
)
from naga_core.errors import InvalidRecord
from naga_core.ledger._record import (
    BODY_SEQ_PREV,
    HEADER,
    MIN_BODY_BYTES,
    FrameFault,
    blob_refs_of,
    check_frame,
    find_next_frame,
)

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".idx"
SEAL_SUFFIX = ".seal"
_NAME = re.compile(rf"^(\d{{{SEGMENT_NAME_DIGITS}}})\.(log|idx|seal)$")
_INDEX_MAGIC = b"NGLIDX1\n"
_INDEX_ENTRY = struct.Struct(">Q32s")
#: An index file: its magic and entry count, then one entry a record.
INDEX_HEADER_BYTES = len(_INDEX_MAGIC) + 8
INDEX_ENTRY_BYTES = _INDEX_ENTRY.size
_SEAL_VERSION = 1


def segment_stem(first_seq: int) -> str:
    return f"{first_seq:0{SEGMENT_NAME_DIGITS}d}"


def parse_name(name: str) -> tuple[int, str] | None:
    """(first_seq, suffix without dot) for a segment-family file, else None."""
    m = _NAME.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2)


# --- scan ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TornTail:
    """The segment ends in a write that never completed: cut it at ``offset``."""

    offset: int
    reason: str
    bytes_cut: int


@dataclass(frozen=True, slots=True)
class Damage:
    """Something recovery must not repair: named, with its offset."""

    offset: int
    reason: str


@dataclass(slots=True)
class ScanResult:
    """What a segment holds up to its first fault."""

    first_seq: int
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    leaves: bytearray = field(default_factory=bytearray)
    end: int = 0  # offset just past the last whole record
    last_leaf: bytes = b""
    blob_refs: list[bytes] = field(default_factory=lambda: [])
    torn: TornTail | None = None
    damage: Damage | None = None
    # The last record's write was incomplete (records missing at its end);
    # legal only for the newest write.
    open_batch: bool = False

    @property
    def count(self) -> int:
        return len(self.offsets)


def scan_segment(
    data: bytes,
    first_seq: int,
    prev_leaf: bytes,
    *,
    collect_refs: bool = False,
) -> ScanResult:
    """Walk every record of one segment, checking frame, sequence and chain.

    A fault ends the walk. It is a torn tail only when no valid record from a
    *later* write follows it: records of the torn write itself may survive out
    of order (unsynced writes are not ordered), but a valid record from a
    later write means data that had been synced is damaged.
    """
    res = ScanResult(first_seq=first_seq, last_leaf=prev_leaf)
    view = memoryview(data)
    offsets = res.offsets
    leaves = res.leaves
    sha = hashlib.sha256
    crc32 = zlib.crc32
    unpack_header = HEADER.unpack_from
    unpack_seq_prev = BODY_SEQ_PREV.unpack_from
    magic_ok, version_ok, zero3 = RECORD_MAGIC, RECORD_VERSION, b"\x00\x00\x00"
    expected = first_seq
    prev = prev_leaf
    pos = 0
    last_pos = last_len = 0  # batch shape of the last whole record
    size = len(data)
    while pos < size:
        # Fast path inlined for the recovery scan's throughput; anything
        # unusual falls through to check_frame, which names the fault.
        body = None
        bpos = blen = end = 0
        if size - pos >= RECORD_HEADER_BYTES:
            magic, version, reserved, body_len, bpos, blen, crc = unpack_header(view, pos)
            end = pos + RECORD_HEADER_BYTES + body_len
            if (
                magic == magic_ok
                and version == version_ok
                and reserved == zero3
                and MIN_BODY_BYTES <= body_len <= MAX_RECORD_BODY_BYTES
                and bpos < blen
                and end <= size
            ):
                body = view[pos + RECORD_HEADER_BYTES : end]
                if crc32(view[pos : pos + 20], crc32(body)) != crc:
                    body = None
        if body is None:
            got = check_frame(view, pos)
            assert isinstance(got, FrameFault)
            _classify_fault(res, view, got, last_pos=last_pos, last_len=last_len, expected=expected)
            break
        seq, prev_hash = unpack_seq_prev(body)
        if seq != expected:
            res.damage = Damage(pos, f"record has seq {seq}, expected {expected}")
            break
        if prev_hash != prev:
            res.damage = Damage(pos, f"broken chain: seq {seq} does not link to seq {expected - 1}")
            break
        h = sha(b"\x00")
        h.update(body)
        leaf = h.digest()
        if collect_refs:
            # Full decode only when asked (verify, and the unsealed tail at
            # open): past a good CRC a bad layout means a writer bug or forgery.
            try:
                refs = blob_refs_of(body)
            except InvalidRecord as exc:
                res.damage = Damage(pos, f"seq {seq}: {exc}")
                break
            res.blob_refs.extend(refs)
        offsets.append(pos)
        leaves += leaf
        prev = leaf
        expected += 1
        last_pos, last_len = bpos, blen
        pos = end
    res.end = pos if res.torn is None and res.damage is None else _fault_offset(res)
    res.last_leaf = prev
    res.open_batch = last_pos + 1 < last_len
    return res


def _fault_offset(res: ScanResult) -> int:
    if res.torn is not None:
        return res.torn.offset
    assert res.damage is not None
    return res.damage.offset


def _classify_fault(
    res: ScanResult,
    view: memoryview,
    fault: FrameFault,
    *,
    last_pos: int,
    last_len: int,
    expected: int,
) -> None:
    # Which write was in flight: the last whole record's, if that write was
    # cut short, else a new one starting at the expected seq.
    torn_first = expected - 1 - last_pos if last_pos + 1 < last_len else expected
    search = fault.offset + 1
    while True:
        nxt = find_next_frame(view, search)
        if nxt is None:
            res.torn = TornTail(fault.offset, fault.reason, len(view) - fault.offset)
            return
        if nxt.seq - nxt.batch_pos != torn_first or nxt.seq < expected:
            res.damage = Damage(
                fault.offset,
                f"{fault.reason}, followed by a valid record (seq {nxt.seq}) at offset "
                f"{nxt.offset}: damage inside the log, not a torn tail",
            )
            return
        search = nxt.offset + 1


# --- index file ---------------------------------------------------------------------


def encode_index(offsets: array[int], leaves: bytes) -> bytes:
    n = len(offsets)
    parts = [_INDEX_MAGIC, n.to_bytes(8, "big")]
    parts.extend(_INDEX_ENTRY.pack(offsets[i], leaves[32 * i : 32 * i + 32]) for i in range(n))
    return b"".join(parts)


def index_summary(data: bytes, *, size: int | None = None) -> tuple[int, int, bytes]:
    """(entries, last offset, last leaf hash) of an index, read from its
    header and last entry only; ValueError naming the problem (as
    :func:`decode_index`, which reads every entry). ``size``: the file's
    size when ``data`` is its header and last entry only."""
    if not data.startswith(_INDEX_MAGIC) or len(data) < len(_INDEX_MAGIC) + 8:
        raise ValueError("not a segment index (bad magic)")
    n = int.from_bytes(data[8:16], "big")
    size = len(data) if size is None else size
    if size != 16 + n * _INDEX_ENTRY.size:
        raise ValueError(f"index claims {n} entries but has {size - 16} bytes of entries")
    if n == 0:
        return 0, 0, b""
    offset, leaf = _INDEX_ENTRY.unpack_from(data, len(data) - _INDEX_ENTRY.size)
    return n, offset, leaf


def decode_index(data: bytes) -> tuple[array[int], bytes]:
    """(offsets, concatenated leaf hashes); ValueError naming the problem."""
    if not data.startswith(_INDEX_MAGIC) or len(data) < len(_INDEX_MAGIC) + 8:
        raise ValueError("not a segment index (bad magic)")
    n = int.from_bytes(data[8:16], "big")
    if len(data) != 16 + n * _INDEX_ENTRY.size:
        raise ValueError(f"index claims {n} entries but has {len(data) - 16} bytes of entries")
    # Read back at every start (the snapshot's record, the kernel's open
    # brackets) and by reads of old records: sliced in C, not entry by
    # entry (27 ms an 8 MB segment's index in Python, on the start's CPU).
    words = memoryview(data)[16:].cast("Q")  # 5 words an entry: offset, leaf
    offsets = array("Q", words[0::5])
    if sys.byteorder == "little":
        offsets.byteswap()
    leaves = b"".join([data[i : i + 32] for i in range(24, len(data), 40)])
    return offsets, leaves


# --- seal file -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seal:
    """The signed summary of a sealed segment."""

    segment: str
    first_seq: int
    count: int
    bytes: int
    segment_sha256: bytes
    index_sha256: bytes
    last_leaf_hash: bytes
    tree_size: int
    frontier: bytes
    root: bytes
    checkpoint: str
    prev_tree_size: int
    consistency: tuple[bytes, ...]

    def body(self) -> bytes:
        doc: dict[str, Any] = {
            "version": _SEAL_VERSION,
            "segment": self.segment,
            "first_seq": self.first_seq,
            "count": self.count,
            "bytes": self.bytes,
            "segment_sha256": self.segment_sha256.hex(),
            "index_sha256": self.index_sha256.hex(),
            "last_leaf_hash": self.last_leaf_hash.hex(),
            "tree_size": self.tree_size,
            "frontier": self.frontier.hex(),
            "root": self.root.hex(),
            "checkpoint": self.checkpoint,
            "prev_tree_size": self.prev_tree_size,
            "consistency": [h.hex() for h in self.consistency],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def encode_seal(seal: Seal, signature: bytes) -> bytes:
    return seal.body() + b"\nsig " + signature.hex().encode() + b"\n"


def decode_seal(data: bytes) -> tuple[Seal, bytes, bytes]:
    """(seal, signed body bytes, signature); ValueError naming the problem."""
    body, sep, tail = data.rpartition(b"\nsig ")
    if not sep or not tail.endswith(b"\n"):
        raise ValueError("seal has no signature line")
    try:
        signature = bytes.fromhex(tail[:-1].decode("ascii"))
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"seal is not valid JSON + signature: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("seal body is not a JSON object")  # noqa: TRY004 - one error type for bad files
    d: dict[str, Any] = doc  # pyright: ignore[reportUnknownVariableType]
    try:
        if d["version"] != _SEAL_VERSION:
            raise ValueError(f"unsupported seal version {d['version']!r}")
        seal = Seal(
            segment=_str(d, "segment"),
            first_seq=_int(d, "first_seq"),
            count=_int(d, "count"),
            bytes=_int(d, "bytes"),
            segment_sha256=_hex(d, "segment_sha256", 32),
            index_sha256=_hex(d, "index_sha256", 32),
            last_leaf_hash=_hex(d, "last_leaf_hash", 32),
            tree_size=_int(d, "tree_size"),
            frontier=_hex(d, "frontier", None),
            root=_hex(d, "root", 32),
            checkpoint=_str(d, "checkpoint"),
            prev_tree_size=_int(d, "prev_tree_size"),
            consistency=tuple(_hexval(v, 32) for v in _list(d, "consistency")),
        )
    except KeyError as exc:
        raise ValueError(f"seal lacks field {exc}") from None
    # Only Naga's own spelling is accepted (bytes.fromhex also reads "AB"
    # as "ab"), so that every changed byte of a seal is a detected change.
    if seal.body() != body or encode_seal(seal, signature) != data:
        raise ValueError("seal file is not in canonical form")
    return seal, body, signature


def _str(d: dict[str, Any], key: str) -> str:
    v = d[key]
    if not isinstance(v, str):
        raise ValueError(f"seal field {key} must be a string")  # noqa: TRY004
    return v


def _int(d: dict[str, Any], key: str) -> int:
    v = d[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"seal field {key} must be a non-negative integer")
    return v


def _list(d: dict[str, Any], key: str) -> list[Any]:
    v = d[key]
    if not isinstance(v, list):
        raise ValueError(f"seal field {key} must be a list")  # noqa: TRY004
    return v  # pyright: ignore[reportUnknownVariableType]


def _hexval(v: Any, length: int | None) -> bytes:
    if not isinstance(v, str):
        raise ValueError("expected a hex string")  # noqa: TRY004
    raw = bytes.fromhex(v)
    if length is not None and len(raw) != length:
        raise ValueError(f"expected {length} bytes, got {len(raw)}")
    return raw


def _hex(d: dict[str, Any], key: str, length: int | None) -> bytes:
    try:
        return _hexval(d[key], length)
    except ValueError as exc:
        raise ValueError(f"seal field {key}: {exc}") from None
