"""The memory store's part of the core's start-up fold
(docs/adr/0036-hands-one-start-pass.md): every ``memory.item`` record's
body and seq, and whether a ``memory.forget`` of its subject came after
it. A pure function of the records, imaged into the start-up snapshot and
continued from it; the store opens the items from it at start
(:meth:`MemoryStore.load`). Nothing here is decrypted: an item is its
ledger record, and a forgotten one loses its ciphertext and wrapped key
(its key is destroyed; the image need not carry what nothing can open)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from naga.v1 import memory_pb2 as mmpb
from naga.v1 import startparts_pb2 as sppb
from naga_core.ledger import Record
from naga_core.memory._store import FORGET, ITEM

log = logging.getLogger("naga.memory")


@dataclass(slots=True)
class Folded:
    seq: int
    record: mmpb.MemoryItemRecord
    forgotten: bool = False


class MemoryFold:
    """Every item the ledger holds, in ledger order."""

    def __init__(self) -> None:
        self._items: dict[str, Folded] = {}
        self._by_subject: dict[str, list[str]] = {}

    def see(self, record: Record) -> None:
        if record.kind == ITEM:
            try:
                body = mmpb.MemoryItemRecord.FromString(record.payload)
            except DecodeError:
                log.warning("memory: record %d is not a memory item; skipped", record.seq)
                return
            self._items[body.id] = Folded(record.seq, body)
            self._by_subject.setdefault(body.subject, []).append(body.id)
        elif record.kind == FORGET:
            try:
                body = mmpb.MemoryForgetRecord.FromString(record.payload)
            except DecodeError:
                log.warning("memory: record %d is not a forget record; skipped", record.seq)
                return
            for item_id in self._by_subject.get(body.subject, []):
                _forget(self._items[item_id])

    def items(self) -> Iterator[tuple[int, mmpb.MemoryItemRecord, bool]]:
        """(seq, body, forgotten) of every item, in ledger order."""
        for f in self._items.values():
            yield f.seq, f.record, f.forgotten

    def __len__(self) -> int:
        return len(self._items)

    def image(self) -> sppb.MemoryImage:
        return sppb.MemoryImage(
            items=[
                sppb.MemoryImageItem(seq=f.seq, record=f.record, forgotten=f.forgotten)
                for f in self._items.values()
            ]
        )

    @classmethod
    def restore(cls, img: sppb.MemoryImage, through: int) -> MemoryFold:
        """The fold imaged at record ``through``; ValueError when the image
        does not hold together (an item after ``through``, out of order,
        twice, or without an id)."""
        fold = cls()
        last = -1
        for it in img.items:
            if not it.record.id or it.record.id in fold._items:
                raise ValueError("a memory item without an id, or twice")
            if it.seq <= last or it.seq > through:
                raise ValueError(f"memory item {it.record.id} at seq {it.seq} is out of order")
            last = it.seq
            folded = Folded(it.seq, it.record, it.forgotten)
            if it.forgotten:
                _forget(folded)
            fold._items[it.record.id] = folded
            fold._by_subject.setdefault(it.record.subject, []).append(it.record.id)
        return fold


def _forget(f: Folded) -> None:
    if not f.forgotten or f.record.ciphertext or f.record.wrapped_key:
        f.forgotten = True
        # A copy: the body may be shared with the image it came from.
        body = mmpb.MemoryItemRecord()
        body.CopyFrom(f.record)
        body.ClearField("ciphertext")
        body.ClearField("wrapped_key")
        f.record = body


__all__ = ["MemoryFold"]
