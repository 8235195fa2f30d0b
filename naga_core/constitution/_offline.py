"""The anchor read from a stopped core's ledger, for ``naga doctor``,
``naga audit`` and ``naga constitution show`` (the running core's own
check is in ``run/constitution.check``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Protocol

from google.protobuf.message import DecodeError

from naga import values
from naga.constants import KERNEL_EFFECT_KIND, STARTUP_IMAGE_FORMAT
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga.values import Scalar
from naga_core._home import Home
from naga_core.constitution._constitution import FAMILY, Anchor
from naga_core.constitution._guard import STATUS_FILE
from naga_core.ledger import OsFileSystem, Record, SnapshotStore

#: The start-up snapshots' series (naga_core.daemon._startup).
_SNAPSHOT = "start"


class Records(Protocol):
    """What the anchor is read from: the open ledger, or a read-only view
    of a stopped core's (naga_core.ledger.LedgerView)."""

    @property
    def size(self) -> int: ...

    def leaf_hash(self, seq: int) -> bytes: ...

    def iter_records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[Record]: ...


def anchored_in(home: Home, ledger: Records) -> Anchor | None:
    """The anchor at ``ledger``'s head: from the newest start-up snapshot
    bound to it (if any) plus the effects after it, else from every effect.
    The family is pinned (no rollback names it), so its last ops decide."""
    found: dict[tuple[str, str], Scalar] = {}
    start = 0
    store = SnapshotStore(OsFileSystem(), os.path.join(home.ledger_dir, "snapshots"))

    def bound(seq: int, leaf: bytes) -> bool:
        return 0 <= seq < ledger.size and ledger.leaf_hash(seq) == leaf

    snap = store.latest(_SNAPSHOT, bound)
    if snap is not None:
        try:
            image = snpb.StartImage.FromString(snap.state)
        except DecodeError:
            image = None
        if image is not None and image.format == STARTUP_IMAGE_FORMAT and image.seq == snap.seq:
            _apply(found, image.kernel.state)
            start = image.seq + 1
    for rec in ledger.iter_records(start):
        if rec.kind != KERNEL_EFFECT_KIND:
            continue
        try:
            effect = kpb.Effect.FromString(rec.payload)
        except DecodeError:
            continue  # `naga ledger verify` judges records
        _apply(found, effect.forward)
    return Anchor.of(found)


def _apply(found: dict[tuple[str, str], Scalar], ops: Iterable[kpb.SetOp]) -> None:
    for op in ops:
        if op.family != FAMILY:
            continue
        if op.HasField("value"):
            found[(op.family, op.key)] = values.from_value(op.value)
        else:
            found.pop((op.family, op.key), None)


def last_check(run_dir: str) -> dict[str, str]:
    """The running (or last) core's last check, from ``run/constitution.check``."""
    out: dict[str, str] = {}
    try:
        with open(os.path.join(run_dir, STATUS_FILE), encoding="ascii") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key:
                    out[key] = value
    except (OSError, UnicodeDecodeError):
        return {}
    return out


__all__ = ["anchored_in", "last_check"]
