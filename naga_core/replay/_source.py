"""Where an export reads the ledger from: the files themselves when no core
runs (:class:`LedgerSource`), or the running core over its socket
(:class:`CoreSource`). The bundle is built by one function
(``_bundle.export_trace``) from either, so both give the same bundle for
the same ledger state (docs/design/replay.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from naga.constants import MAX_PAGE_ENTRIES
from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga_core.ledger import BlobStore, CheckpointVerifier, Ledger, node_hash
from naga_core.replay._errors import SourceFailed


@dataclass(frozen=True, slots=True)
class Pinned:
    """The tree every record of a bundle is proven against."""

    size: int
    #: Signed checkpoint (C2SP signed note) of the first ``size`` records.
    checkpoint: str
    #: The checkpoint's verifier key, in vkey form.
    vkey: str


@dataclass(frozen=True, slots=True)
class Scanned:
    """What picking a session's records needs to see of one record."""

    seq: int
    kind: str
    payload: bytes
    blob_refs: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Proven:
    """One record's exact hashed body, leaf hash and inclusion path."""

    body: bytes
    leaf_hash: bytes
    path: tuple[bytes, ...]


class TraceSource(Protocol):
    """A ledger and blob store to export from. Errors are NagaErrors."""

    def pin(self) -> Pinned:
        """The current tree, fixed for the rest of the export."""
        ...

    def scan(self, size: int) -> Iterator[Scanned]:
        """Records 0 .. size - 1, in seq order."""
        ...

    def prove(self, seq: int, size: int) -> Proven:
        """Record ``seq`` and its path to the root of the first ``size``."""
        ...

    def blob(self, digest: bytes) -> bytes:
        """The blob, checked against ``digest``."""
        ...


class LedgerSource:
    """The ledger files, opened by this process (no core runs)."""

    def __init__(self, ledger: Ledger, blobs: BlobStore, at: int | None = None) -> None:
        """``at``: pin the first ``at`` records instead of the whole log, so
        an export can name a state the ledger has grown past (the core's
        stop appends its workers' revocations, for one)."""
        self._ledger = ledger
        self._blobs = blobs
        self._at = at
        self._levels: list[list[bytes]] | None = None

    def pin(self) -> Pinned:
        ledger = self._ledger
        size = ledger.head().size
        if self._at is not None:
            if not 1 <= self._at <= size:
                raise SourceFailed(f"--at {self._at}: the ledger holds {size} records")
            size = self._at
        return Pinned(size, ledger.checkpoint(size), ledger.signer.verifier().vkey())

    def scan(self, size: int) -> Iterator[Scanned]:
        for r in self._ledger.iter_records(0, size):
            yield Scanned(r.seq, r.kind, r.payload, r.blob_refs)

    def prove(self, seq: int, size: int) -> Proven:
        if self._levels is None or len(self._levels[0]) != size:
            self._levels = _tree_levels([self._ledger.leaf_hash(i) for i in range(size)])
        record = self._ledger.read(seq)
        return Proven(record.body, record.leaf_hash, tuple(_path(self._levels, seq)))

    def blob(self, digest: bytes) -> bytes:
        return self._blobs.get(digest)


class CoreSource:
    """The running core, through the SDK with the owner's credential. Its
    errors become :class:`SourceFailed` here, once."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def pin(self) -> Pinned:
        try:
            head = self._client.head()
            if head.size == 0:
                return Pinned(0, head.checkpoint, "")
            # The key travels with a proof only; prove the last record of
            # this very head to learn it.
            proof = self._client.prove_inclusion(head.size - 1, head.size)
        except SdkError as exc:
            raise SourceFailed(f"naga-core: {exc}") from None
        verifier = CheckpointVerifier(proof.key_name, proof.public_key)
        return Pinned(head.size, head.checkpoint, verifier.vkey())

    def scan(self, size: int) -> Iterator[Scanned]:
        seq = 0
        while seq < size:
            try:
                page = self._client.records(seq, MAX_PAGE_ENTRIES)
            except SdkError as exc:
                raise SourceFailed(f"naga-core: reading records from {seq}: {exc}") from None
            if not page:
                raise SourceFailed(f"naga-core returned no records from {seq}, below {size}")
            for r in page:
                if r.seq >= size:
                    return
                yield Scanned(r.seq, r.kind, r.payload, tuple(r.blob_refs))
            seq = page[-1].seq + 1

    def prove(self, seq: int, size: int) -> Proven:
        try:
            p = self._client.prove_inclusion(seq, size)
        except SdkError as exc:
            raise SourceFailed(f"naga-core: proving record {seq}: {exc}") from None
        return Proven(p.record_body, p.leaf_hash, tuple(p.path))

    def blob(self, digest: bytes) -> bytes:
        try:
            return self._client.blob(digest)
        except SdkError as exc:
            raise SourceFailed(f"naga-core: {exc}") from None


def _tree_levels(leaves: list[bytes]) -> list[list[bytes]]:
    """Every level of the RFC 9162 tree, leaves first. A node without a
    right sibling moves up unchanged, which builds the same tree as the
    RFC's largest-power-of-two split, in one pass instead of one per proof."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        up = [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        if len(below) % 2:
            up.append(below[-1])
        levels.append(up)
    return levels


def _path(levels: Sequence[list[bytes]], index: int) -> list[bytes]:
    path: list[bytes] = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index >>= 1
    return path


__all__ = ["CoreSource", "LedgerSource", "Pinned", "Proven", "Scanned", "TraceSource"]
