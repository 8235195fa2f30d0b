"""``naga.v1.LedgerService``: the ledger's read side, and Subscribe.

A Subscribe stream shows a token holder only the record kinds its role may
see (``_policy.VISIBLE_KINDS``), whatever kinds it asks for. GetBlob streams
one blob of the store in chunks (a blob may be far larger than a response)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import trio
from google.protobuf.message import DecodeError, Message

from naga.constants import (
    BLOB_CHUNK_BYTES,
    KERNEL_EFFECT_KIND,
    MAX_BLOB_REFS,
    MAX_SUBSCRIBERS,
    RECORDS_PAGE_MAX_BYTES,
)
from naga.v1 import agent_pb2 as apb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import ledger_pb2 as lpb
from naga_core._store import blob_store
from naga_core.daemon import _checks, _convert
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Stream, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._errors import CoreStopping, RequestRefused
from naga_core.daemon._policy import VISIBLE_KINDS
from naga_core.ledger import BlobStore, Record
from naga_core.memory import Sealer

SERVICE = "naga.v1.LedgerService"
RECORDS_DEFAULT = 100
#: Most kinds one Subscribe may name.
MAX_KINDS = MAX_BLOB_REFS
#: Most effect families one Subscribe may name.
MAX_EFFECT_FAMILIES = 16
#: Effects that may restore state of any family.
_RESTORING = (kpb.EFFECT_FORM_ROLLBACK, kpb.EFFECT_FORM_ABORT)
#: Records a subscriber is sent per batch (one hop to the loop each).
SUBSCRIBE_BATCH = 256
#: GetBlob streams open at once (each holds a server thread, and a whole
#: blob of up to MAX_BLOB_BYTES in memory while it is sent).
MAX_BLOB_STREAMS = 4
#: Bytes of a blob digest (SHA-256).
DIGEST_BYTES = 32


class LedgerServicer:
    def __init__(self, core: Core, sealer: Sealer | None = None) -> None:
        self._core = core
        self._blobs = blob_store(core.home)
        #: Opens the turn records' sealed text for the reader (docs/adr/0037);
        #: None: served as stored.
        self._sealer = sealer

    def methods(self) -> list[Method]:
        return [
            Unary("GetHead", lpb.GetHeadRequest, self.get_head),
            Unary("GetRecords", lpb.GetRecordsRequest, self.get_records, check_get_records),
            Unary("ProveInclusion", lpb.ProveInclusionRequest, self.prove_inclusion),
            Unary(
                "ProveConsistency",
                lpb.ProveConsistencyRequest,
                self.prove_consistency,
                check_prove_consistency,
            ),
            Stream(
                "Subscribe",
                lpb.SubscribeRequest,
                self.subscribe,
                max_open=MAX_SUBSCRIBERS,
                check=check_subscribe,
            ),
            Stream(
                "GetBlob",
                lpb.GetBlobRequest,
                self.get_blob,
                max_open=MAX_BLOB_STREAMS,
                check=check_get_blob,
            ),
        ]

    def get_head(self, _p: Principal, _req: lpb.GetHeadRequest) -> lpb.Head:
        ledger = self._core.ledger
        head = ledger.head()
        return lpb.Head(
            size=head.size,
            last_seq=max(head.size - 1, 0),
            root=head.root,
            checkpoint=ledger.checkpoint(head.size),
        )

    def get_records(self, _p: Principal, req: lpb.GetRecordsRequest) -> lpb.GetRecordsResponse:
        limit = _checks.page_limit("limit", req.limit, default=RECORDS_DEFAULT)
        records = _page(self._core, req.from_seq, limit, only=_Filter(None), sealer=self._sealer)[0]
        return lpb.GetRecordsResponse(records=records)

    def prove_inclusion(self, _p: Principal, req: lpb.ProveInclusionRequest) -> lpb.InclusionProof:
        size = self._core.ledger.size
        tree = _checks.seq_at_most("tree_size", req.tree_size, size) or size
        if req.seq >= tree:
            end = (
                f"the ledger's end (it has {size} records)"
                if req.tree_size == 0
                else f"the end of the tree proven against ({tree} records)"
            )
            raise RequestRefused.out_of_range(f"seq {req.seq} is past {end}")
        p = self._core.ledger.prove_inclusion(req.seq, tree)
        return lpb.InclusionProof(
            seq=p.seq,
            leaf_hash=p.leaf_hash,
            record_body=p.record_body,
            tree_size=p.tree_size,
            root=p.root,
            path=list(p.path),
            checkpoint=p.checkpoint,
            public_key=p.public_key,
            key_name=p.key_name,
        )

    def prove_consistency(
        self, _p: Principal, req: lpb.ProveConsistencyRequest
    ) -> lpb.ConsistencyProof:
        ledger = self._core.ledger
        _checks.seq_at_most("new_size", req.new_size, ledger.size)
        return lpb.ConsistencyProof(
            old_size=req.old_size,
            new_size=req.new_size,
            old_root=ledger.root_at(req.old_size),
            new_root=ledger.root_at(req.new_size),
            path=ledger.prove_consistency(req.old_size, req.new_size),
        )

    def subscribe(self, p: Principal, req: lpb.SubscribeRequest) -> _Subscription:
        _checks.seq_at_most("from_seq", req.from_seq, self._core.ledger.size)
        kinds = visible_kinds(p, frozenset(req.kinds))
        return _Subscription(
            self._core,
            req.from_seq,
            _Filter(kinds, frozenset(req.effect_families) or None),
            self._sealer,
            quiet=req.caught_up_after_records,
        )

    def get_blob(self, _p: Principal, req: lpb.GetBlobRequest) -> _BlobChunks:
        return _BlobChunks(self._blobs, req.digest)


def visible_kinds(p: Principal, asked: frozenset[str]) -> frozenset[str] | None:
    """The kinds a stream shows ``p`` when it asks for ``asked`` (empty: all
    it may see); None means every kind."""
    visible = None if p.owner else VISIBLE_KINDS.get(p.role, frozenset())
    if visible is None:
        return asked or None
    return asked & visible if asked else visible


@dataclasses.dataclass(frozen=True, slots=True)
class _Filter:
    """Which records a stream sends: of ``kinds`` (None: any), and of the
    kernel's effects those touching ``families`` (None: every one) or
    restoring any."""

    kinds: frozenset[str] | None
    families: frozenset[str] | None = None

    def passes(self, rec: Record) -> bool:
        if self.kinds is not None and rec.kind not in self.kinds:
            return False
        if self.families is None or rec.kind != KERNEL_EFFECT_KIND:
            return True
        try:
            effect = kpb.Effect.FromString(rec.payload)
        except DecodeError:
            return True  # not ours to judge: the reader sees it and decides
        if effect.form in _RESTORING:
            return True
        return any(op.family in self.families for op in (*effect.forward, *effect.inverse))


class _Subscription:
    """One Subscribe stream's position; the bridge pulls batches from it.
    ``quiet``: CaughtUp only after records were sent (and at first)."""

    def __init__(
        self,
        core: Core,
        next_seq: int,
        only: _Filter,
        sealer: Sealer | None,
        *,
        quiet: bool = False,
    ) -> None:
        self._core = core
        self._sealer = sealer
        self._next = next_seq
        self._only = only
        self._quiet = quiet
        self._announced = -1
        #: Records sent since the last CaughtUp.
        self._unannounced = 0

    async def next(self) -> Sequence[Message] | None:
        core = self._core
        if self._next >= core.ledger.size and self._announced == self._next:
            await core.wait_past(self._next)
        if core.stopping.is_set():
            raise CoreStopping("naga-core is shutting down; subscribe again to the next one")
        records, self._next = _page(
            core, self._next, SUBSCRIBE_BATCH, only=self._only, sealer=self._sealer
        )
        events: list[Message] = [lpb.SubscribeEvent(record=r) for r in records]
        self._unannounced += len(records)
        at_end = self._next >= core.ledger.size and self._announced != self._next
        if at_end and (not self._quiet or self._unannounced or self._announced < 0):
            events.append(lpb.SubscribeEvent(caught_up=lpb.CaughtUp(next_seq=self._next)))
            self._unannounced = 0
        if at_end:
            # Quiet and nothing sent: this end counts as told (the stream
            # waits for the next record instead of spinning on this one).
            self._announced = self._next
        return events


class _BlobChunks:
    """One GetBlob stream: the blob read and checked off the loop, then
    sent a chunk per batch."""

    def __init__(self, blobs: BlobStore, digest: bytes) -> None:
        self._blobs = blobs
        self._digest = digest
        self._data: bytes | None = None
        self._offset = 0

    async def next(self) -> Sequence[Message] | None:
        if self._data is None:
            # Off the loop: a blob may be hundreds of MiB. NotFound and
            # BlobCorrupt end the stream with their status (_status).
            self._data = await trio.to_thread.run_sync(self._blobs.get, self._digest)
            return [self._chunk()]
        if self._offset >= len(self._data):
            return None
        return [self._chunk()]

    def _chunk(self) -> lpb.BlobChunk:
        data = self._data or b""
        piece = data[self._offset : self._offset + BLOB_CHUNK_BYTES]
        self._offset += BLOB_CHUNK_BYTES
        return lpb.BlobChunk(data=piece, size=len(data))


def _page(
    core: Core,
    from_seq: int,
    limit: int,
    *,
    only: _Filter,
    sealer: Sealer | None = None,
) -> tuple[list[lpb.Record], int]:
    """Records from ``from_seq`` (at most ``limit``, and about
    RECORDS_PAGE_MAX_BYTES, at least one), those ``only`` passes; and
    the next seq. A turn record's sealed text is opened by ``sealer`` (its
    hashes are the stored record's: proofs come from ProveInclusion)."""
    ledger = core.ledger
    end = ledger.size
    out: list[lpb.Record] = []
    size = 0
    seq = from_seq
    scanned = 0
    while seq < end and scanned < limit:
        rec: Record = ledger.read(seq)
        scanned += 1
        if only.passes(rec):
            n = len(rec.payload) + 32 * len(rec.blob_refs)
            if out and size + n > RECORDS_PAGE_MAX_BYTES:
                break
            size += n
            out.append(_convert.record(rec if sealer is None else _opened(sealer, rec)))
        seq += 1
    return out, seq


def _opened(sealer: Sealer, rec: Record) -> Record:
    if not rec.kind.startswith("turn."):
        return rec
    try:
        body = apb.TurnRecord.FromString(rec.payload)
    except DecodeError:
        return rec
    if not body.HasField("sealed"):
        return rec
    return dataclasses.replace(rec, payload=sealer.open_turn(rec.kind, body).SerializeToString())


def check_get_records(req: lpb.GetRecordsRequest) -> None:
    _checks.page_limit("limit", req.limit, default=RECORDS_DEFAULT)


def check_prove_consistency(req: lpb.ProveConsistencyRequest) -> None:
    if not 0 < req.old_size <= req.new_size:
        raise RequestRefused.invalid(
            f"old_size {req.old_size} and new_size {req.new_size}: need 0 < old_size <= new_size"
        )


def check_get_blob(req: lpb.GetBlobRequest) -> None:
    if len(req.digest) != DIGEST_BYTES:
        raise RequestRefused.invalid(
            f"digest is {len(req.digest)} bytes; a blob digest is {DIGEST_BYTES} (SHA-256)"
        )


def check_subscribe(req: lpb.SubscribeRequest) -> None:
    if len(req.kinds) > MAX_KINDS:
        raise RequestRefused.invalid(f"kinds names {len(req.kinds)} kinds; at most {MAX_KINDS}")
    for kind in req.kinds:
        _checks.record_kind("kinds entry", kind)
    if len(req.effect_families) > MAX_EFFECT_FAMILIES:
        raise RequestRefused.invalid(
            f"effect_families names {len(req.effect_families)} families; "
            f"at most {MAX_EFFECT_FAMILIES}"
        )
    for family in req.effect_families:
        _checks.record_kind("effect_families entry", family)


__all__ = ["SERVICE", "LedgerServicer"]
