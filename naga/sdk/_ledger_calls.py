"""The client's calls of the LedgerService: reading, proving, subscribing,
and reading blobs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from naga.sdk import errors
from naga.sdk._rpc import Events, Rpc, decode
from naga.sdk._transport import StreamCall
from naga.v1 import ledger_pb2 as lpb

_LEDGER = "/naga.v1.LedgerService/"


class Subscription(Events[lpb.SubscribeEvent]):
    """An open Subscribe stream: iterate for :class:`SubscribeEvent`s.
    ``cancel()`` ends it; iteration stops without an error."""

    def __init__(self, call: StreamCall) -> None:
        super().__init__(call, lpb.SubscribeEvent, "Subscribe")


class LedgerCalls(Rpc):
    def head(self, *, timeout: float | None = None) -> lpb.Head:
        """The ledger's size and root, with a checkpoint signed for them."""
        return self._read(_LEDGER + "GetHead", lpb.GetHeadRequest(), lpb.Head, timeout)

    def records(
        self, from_seq: int = 0, limit: int = 0, *, timeout: float | None = None
    ) -> list[lpb.Record]:
        """A page of records from ``from_seq`` (empty past the end); page on
        from the last seq + 1."""
        req = lpb.GetRecordsRequest(from_seq=from_seq, limit=limit)
        answer = self._read(_LEDGER + "GetRecords", req, lpb.GetRecordsResponse, timeout)
        return list(answer.records)

    def prove_inclusion(
        self, seq: int, tree_size: int = 0, *, timeout: float | None = None
    ) -> lpb.InclusionProof:
        """Record ``seq`` and its proof against the tree of ``tree_size``
        records (0: the current head)."""
        req = lpb.ProveInclusionRequest(seq=seq, tree_size=tree_size)
        return self._read(_LEDGER + "ProveInclusion", req, lpb.InclusionProof, timeout)

    def prove_consistency(
        self, old_size: int, new_size: int, *, timeout: float | None = None
    ) -> lpb.ConsistencyProof:
        req = lpb.ProveConsistencyRequest(old_size=old_size, new_size=new_size)
        return self._read(_LEDGER + "ProveConsistency", req, lpb.ConsistencyProof, timeout)

    def subscribe(
        self,
        from_seq: int = 0,
        kinds: Iterable[str] = (),
        *,
        effect_families: Iterable[str] = (),
        caught_up_after_records: bool = False,
        timeout: float | None = None,
    ) -> Subscription:
        """Records from ``from_seq`` on, then new ones as they are appended,
        of the given kinds only (all when empty); kernel effects only those
        touching ``effect_families`` (or restoring any; all when empty);
        ``caught_up_after_records``: a caught-up mark only after records were
        sent. Iterate it; ``cancel()`` ends it from another thread."""
        req = lpb.SubscribeRequest(
            from_seq=from_seq,
            kinds=list(kinds),
            effect_families=list(effect_families),
            caught_up_after_records=caught_up_after_records,
        )
        return Subscription(self._stream(_LEDGER + "Subscribe", req, timeout))

    def blob(self, digest: bytes, *, timeout: float | None = None) -> bytes:
        """The blob whose SHA-256 is ``digest`` (owner only), checked against
        it here too: :class:`~naga.sdk.errors.NotFound` if the core has no
        such blob, :class:`~naga.sdk.errors.CoreFailure` if its content is
        corrupt (the core's DATA_LOSS) or arrived cut short."""
        req = lpb.GetBlobRequest(digest=digest)
        parts: list[bytes] = []
        expected = -1
        for raw in self._stream(_LEDGER + "GetBlob", req, timeout):
            chunk = decode(lpb.BlobChunk, raw, "GetBlob: undecodable chunk")
            expected = chunk.size
            parts.append(chunk.data)
        data = b"".join(parts)
        if len(data) != expected:
            raise errors.CoreFailure(
                f"GetBlob {digest.hex()}: got {len(data)} bytes of a {expected}-byte blob"
            )
        if hashlib.sha256(data).digest() != digest:
            raise errors.CoreFailure(f"GetBlob {digest.hex()}: the data does not hash to it")
        return data


__all__ = ["LedgerCalls", "Subscription"]
