"""Replay bundles: one session's trace records and the blobs they name, in
one file that can be checked against the ledger it came from
(docs/design/replay.md).

A file is a header and a ``naga.v1.ReplayBundle``::

    magic "NAGARPL\\n" | format u32 | body_len u64 | SHA-256(body) | body

The header catches what a proto parser would not (an empty file, another
file, a cut that falls on a field boundary); the records carry their leaf
hashes and inclusion proofs to a signed checkpoint, which catch edits.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import replay_pb2 as rpb
from naga.v1 import sealed_pb2 as slpb
from naga_core.agent import TRACE_KINDS
from naga_core.errors import InvalidRecord, NagaError, ProofError
from naga_core.ledger import (
    BlobStore,
    CheckpointVerifier,
    Ledger,
    decode_body,
    leaf_hash_of,
    verify_inclusion,
)
from naga_core.memory import (
    BLOB_MAGIC,
    Sealer,
    is_sealed_blob,
    open_blob_with,
    open_turn_with,
)
from naga_core.replay._errors import BundleInvalid, BundleTampered, NothingToExport
from naga_core.replay._source import LedgerSource, Scanned, TraceSource

MAGIC = b"NAGARPL\n"
#: The one format this code writes and reads.
FORMAT = 1
_HEADER = struct.Struct(">8sIQ32s")


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One verified turn.* record of the bundle."""

    seq: int
    kind: str
    body: apb.TurnRecord
    blob_refs: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle read back and checked. Build with :func:`read_bundle`."""

    session: str
    records: tuple[TraceRecord, ...]
    blobs: dict[bytes, bytes]
    tree_size: int
    key_name: str
    #: Seqs of records that no longer match their proofs (only when the
    #: reader allowed edited records).
    edited: tuple[int, ...]


# --- export ----------------------------------------------------------------------------


def export_trace(
    source: TraceSource, session: str, sealer: Sealer | None = None
) -> rpb.ReplayBundle:
    """Every turn.* record of ``session``, its blobs, proofs to one
    checkpoint: the tree as ``source`` had it when the export began; the
    data keys ``sealer`` gives of their sealed boxes (docs/adr/0037)."""
    pinned = source.pin()
    size = pinned.size
    out = rpb.ReplayBundle(session=session, tree_size=size, naga_version=_version())
    picked: list[Scanned] = []
    for r in source.scan(size):
        if r.kind not in TRACE_KINDS:
            continue
        try:
            body = apb.TurnRecord.FromString(r.payload)
        except DecodeError:
            continue  # not a trace record after all: `naga ledger verify` judges it
        if body.session == session:
            picked.append(r)
    if not picked:
        raise NothingToExport(f"the ledger has no trace of session {session!r}")
    seen: set[bytes] = set()
    keys = _Keys(out, sealer)
    for r in picked:
        proven = source.prove(r.seq, size)
        keys.of_record(r.kind, decode_body(proven.body).payload)
        out.records.append(
            rpb.BundleRecord(
                body=proven.body,
                seq=r.seq,
                kind=r.kind,
                leaf_hash=proven.leaf_hash,
                proof=proven.path,
            )
        )
        for digest in r.blob_refs:
            if digest in seen:
                continue
            seen.add(digest)
            try:
                data = source.blob(digest)
            except NagaError as exc:
                raise NothingToExport(
                    f"record {r.seq} names blob {digest.hex()}, which cannot be read: {exc}"
                ) from None
            out.blobs.append(rpb.BundleBlob(digest=digest, data=data))
            keys.of_blob(data)
    out.checkpoint = pinned.checkpoint
    out.vkey = pinned.vkey
    out.exported_ns = time.time_ns()
    return out


class _Keys:
    """The data keys an export hands over, once each."""

    def __init__(self, out: rpb.ReplayBundle, sealer: Sealer | None) -> None:
        self._out = out
        self._sealer = sealer
        self._seen: set[bytes] = set()

    def of_record(self, kind: str, payload: bytes) -> None:
        try:
            body = apb.TurnRecord.FromString(payload)
        except DecodeError:
            return
        if self._sealer is not None and body.HasField("sealed"):
            dek = self._sealer.turn_key(kind, body)
            self._add(body.sealed.wrapped_key, None if isinstance(dek, str) else dek)

    def of_blob(self, data: bytes) -> None:
        if self._sealer is not None and is_sealed_blob(data):
            box = slpb.SealedBox.FromString(data[len(BLOB_MAGIC) :])
            self._add(box.wrapped_key, self._sealer.blob_key(data))

    def _add(self, wrapped: bytes, dek: bytes | None) -> None:
        if dek is not None and wrapped not in self._seen:
            self._seen.add(wrapped)
            self._out.keys.append(rpb.BundleKey(wrapped_key=wrapped, data_key=dek))


def export_session(
    ledger: Ledger, blobs: BlobStore, session: str, sealer: Sealer | None = None
) -> rpb.ReplayBundle:
    """:func:`export_trace` from ledger files this process opened."""
    return export_trace(LedgerSource(ledger, blobs), session, sealer)


def _version() -> str:
    try:
        return importlib.metadata.version("naga")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


def encode_bundle(bundle: rpb.ReplayBundle) -> bytes:
    body = bundle.SerializeToString()
    return _HEADER.pack(MAGIC, FORMAT, len(body), hashlib.sha256(body).digest()) + body


# --- reading and checking --------------------------------------------------------------


def decode_bundle(data: bytes) -> rpb.ReplayBundle:
    """The message inside a bundle file; BundleInvalid says what is wrong."""
    if not data:
        raise BundleInvalid("the file is empty: not a replay bundle")
    if len(data) < _HEADER.size or not data.startswith(MAGIC):
        if MAGIC.startswith(data[: len(MAGIC)]) and len(data) < _HEADER.size:
            raise BundleInvalid(
                f"the bundle is truncated: {len(data)} bytes, shorter than its "
                f"{_HEADER.size}-byte header"
            )
        raise BundleInvalid("not a replay bundle (the file does not start with NAGARPL)")
    _, fmt, length, digest = _HEADER.unpack_from(data)
    if fmt != FORMAT:
        raise BundleInvalid(
            f"bundle format {fmt} is not supported: this naga reads format {FORMAT}"
        )
    body = data[_HEADER.size :]
    if len(body) < length:
        raise BundleInvalid(
            f"the bundle is truncated: its header promises {length} bytes, the file has {len(body)}"
        )
    if len(body) > length:
        raise BundleInvalid(
            f"the bundle has {len(body) - length} bytes after the {length} its header promises"
        )
    if hashlib.sha256(body).digest() != digest:
        raise BundleInvalid("the bundle's body does not match its SHA-256: corrupted or edited")
    try:
        return rpb.ReplayBundle.FromString(body)
    except DecodeError as exc:
        raise BundleInvalid(f"the bundle's body is not a ReplayBundle: {exc}") from None


def read_bundle(data: bytes, *, allow_edited: bool = False) -> Bundle:
    """Decode and check everything: the checkpoint's signature, every
    record against its leaf hash and proof, every blob against its digest,
    every named blob present."""
    msg = decode_bundle(data)
    try:
        verifier = CheckpointVerifier.from_vkey(msg.vkey)
        checkpoint = verifier.verify(msg.checkpoint)
    except (ValueError, ProofError) as exc:
        raise BundleInvalid(f"the bundle's checkpoint does not verify: {exc}") from None
    if checkpoint.size != msg.tree_size:
        raise BundleInvalid(
            f"the checkpoint covers {checkpoint.size} records, the bundle says {msg.tree_size}"
        )
    records: list[TraceRecord] = []
    edited: list[int] = []
    keys = {k.wrapped_key: k.data_key for k in msg.keys}
    for i, br in enumerate(msg.records):
        rec, intact = _check_record(br, i, msg, checkpoint.root, keys)
        if records and rec.seq <= records[-1].seq:
            raise BundleInvalid(f"record {rec.seq} comes after record {records[-1].seq}")
        if not intact:
            if not allow_edited:
                raise BundleTampered(
                    f"record {rec.seq} ({rec.kind}) does not match its leaf hash and "
                    "inclusion proof: it was edited after export (replay it anyway with "
                    "--allow-edited)"
                )
            edited.append(rec.seq)
        records.append(rec)
    if not records:
        raise BundleInvalid("the bundle holds no records")
    return Bundle(
        session=msg.session,
        records=tuple(records),
        blobs=_check_blobs(msg.blobs, records, keys),
        tree_size=msg.tree_size,
        key_name=verifier.key_name,
        edited=tuple(edited),
    )


def _check_record(
    br: rpb.BundleRecord, index: int, msg: rpb.ReplayBundle, root: bytes, keys: dict[bytes, bytes]
) -> tuple[TraceRecord, bool]:
    try:
        decoded = decode_body(br.body)
    except InvalidRecord as exc:
        raise BundleInvalid(
            f"record #{index} of the bundle is not a ledger record: {exc}"
        ) from None
    if (decoded.seq, decoded.kind) != (br.seq, br.kind):
        raise BundleInvalid(
            f"record #{index} says seq {br.seq} kind {br.kind!r}, its body seq "
            f"{decoded.seq} kind {decoded.kind!r}"
        )
    if decoded.kind not in TRACE_KINDS:
        raise BundleInvalid(f"record {decoded.seq} is a {decoded.kind!r}, not a turn record")
    try:
        body = apb.TurnRecord.FromString(decoded.payload)
    except DecodeError as exc:
        raise BundleInvalid(f"record {decoded.seq}'s payload is not a TurnRecord: {exc}") from None
    if body.session != msg.session:
        raise BundleInvalid(
            f"record {decoded.seq} belongs to session {body.session!r}, the bundle to "
            f"{msg.session!r}"
        )
    leaf = leaf_hash_of(br.body)
    intact = leaf == br.leaf_hash
    if intact:
        try:
            verify_inclusion(leaf, decoded.seq, msg.tree_size, list(br.proof), root)
        except ProofError:
            intact = False
    if body.HasField("sealed"):  # opened with its key; none: it reads as forgotten
        body = open_turn_with(decoded.kind, body, keys.get(body.sealed.wrapped_key))
    return TraceRecord(decoded.seq, decoded.kind, body, decoded.blob_refs), intact


def _check_blobs(
    blobs: Iterable[rpb.BundleBlob], records: Sequence[TraceRecord], keys: dict[bytes, bytes]
) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for b in blobs:
        actual = hashlib.sha256(b.data).digest()
        if actual != b.digest:
            users = [r.seq for r in records if b.digest in r.blob_refs]
            where = f" (named by record {users[0]})" if users else ""
            raise BundleInvalid(
                f"blob {b.digest.hex()[:16]}…{where} fails its checksum: its content hashes "
                f"to {actual.hex()[:16]}…"
            )
        out[b.digest] = _opened_blob(b, keys, records)
    for r in records:
        for digest in r.blob_refs:
            if digest not in out:
                raise BundleInvalid(
                    f"record {r.seq} ({r.kind}) names blob {digest.hex()[:16]}…, which the "
                    "bundle lacks"
                )
    return out


def _opened_blob(
    b: rpb.BundleBlob, keys: dict[bytes, bytes], records: Sequence[TraceRecord]
) -> bytes:
    """A checked blob's content, opened with its data key if it is sealed."""
    if not is_sealed_blob(b.data):
        return b.data
    try:
        box = slpb.SealedBox.FromString(b.data[len(BLOB_MAGIC) :])
    except DecodeError:
        box = slpb.SealedBox()
    dek = keys.get(box.wrapped_key)
    opened = open_blob_with(b.data, dek) if dek is not None else None
    if opened is None:
        users = [r.seq for r in records if b.digest in r.blob_refs]
        where = f" (named by record {users[0]})" if users else ""
        raise BundleInvalid(
            f"blob {b.digest.hex()[:16]}…{where} is sealed under the key of "
            f"{box.subject or 'a subject'}, which the bundle does not carry (forgotten, or "
            "exported without it): this session cannot be replayed"
        )
    return opened


__all__ = [
    "FORMAT",
    "MAGIC",
    "Bundle",
    "TraceRecord",
    "decode_bundle",
    "encode_bundle",
    "export_session",
    "export_trace",
    "read_bundle",
]
