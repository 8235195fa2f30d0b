"""The ledger's state: what one open ledger directory holds in memory.

:class:`~naga_core.ledger.Ledger` is cut by concern into a chain of private
bases, each a module of its own (state, then reading, proofs, writing): this
one builds every field the others use, so that each layer is typed against
them and the locks that guard them are declared, and explained, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from naga_core.errors import LedgerFailed
from naga_core.ledger._checkpoint import CheckpointSigner
from naga_core.ledger._fs import FileHandle, FileSystem
from naga_core.ledger._recovery import RecoveryReport, SegmentState
from naga_core.ledger._segment import Seal


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where an appended record sits: durable once its commit returned."""

    seq: int
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class Head:
    """The durable end of the ledger."""

    size: int
    last_leaf_hash: bytes
    root: bytes
    sealed_segments: int


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """Everything an offline RFC 9162 verifier needs, nothing else."""

    seq: int
    leaf_hash: bytes
    record_body: bytes
    tree_size: int
    root: bytes
    path: tuple[bytes, ...]
    checkpoint: str
    public_key: bytes
    key_name: str


@dataclass(slots=True)
class Staged:
    seq: int
    body: bytes
    crc: int
    leaf: bytes


@dataclass(slots=True)
class Active:
    first_seq: int
    path: str
    handle: FileHandle | None
    bytes: int
    offsets: array[int] = field(default_factory=lambda: array("Q"))


class LedgerState:
    """Every field of an open ledger; the layers above add the behaviour."""

    def __init__(
        self,
        *,
        fs: FileSystem,
        directory: str,
        signer: CheckpointSigner,
        state: SegmentState,
        clock: Callable[[], int],
        segment_max_bytes: int,
        exit_stack: contextlib.ExitStack,
        report: RecoveryReport,
    ) -> None:
        self._fs = fs
        self._dir = directory
        self._seg_dir = os.path.join(directory, "segments")
        self._signer = signer
        self._seal_key = Ed25519PrivateKey.from_private_bytes(signer.private_bytes)
        self._clock = clock
        self._segment_max = segment_max_bytes
        self._exit = exit_stack
        self.report = report
        self._sealed: list[Seal] = list(state.seals)
        # Leaf hashes in memory for the unsealed tail only, from seq _base: a
        # sealed segment's offsets and leaves are read back from its index
        # (checked against its signed seal) when asked, a few kept, so the
        # memory held does not grow with the ledger. Declared: the write path
        # (a subclass in another module) extends it in place with +=.
        self._leaves: bytearray = state.leaves
        self._base = self._sealed[-1].tree_size if self._sealed else 0
        self._firsts = [seal.first_seq for seal in self._sealed]
        self._indexes: OrderedDict[int, tuple[array[int], bytes]] = OrderedDict()
        self._index_lock = threading.Lock()
        self._frontier = state.frontier
        self._durable = state.size
        self._last_ts = state.last_timestamp_ns
        self._active: Active | None = None
        if state.active_path is not None:
            self._active = Active(
                first_seq=state.active_first_seq,
                path=state.active_path,
                handle=state.active_handle,
                bytes=state.active_bytes,
                offsets=state.active_offsets,
            )
        self._next_seq = state.size
        self._staged_prev = state.last_leaf
        self._pending: list[Staged] = []
        # What the next commit waits for before it writes (commit_after).
        self._barriers: list[Future[Any]] = []
        # The frames of the last records committed, for the readers that
        # follow the head (Subscribe streams read each new record).
        self._recent: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()  # guards staging and the durable view
        self._commit_lock = threading.Lock()  # one committer at a time
        self._failed: LedgerFailed | None = None
        self._closed = False


def sha256_digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
