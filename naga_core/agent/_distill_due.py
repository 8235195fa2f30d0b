"""Which archived sessions still want their distillation (distill18,
docs/adr/0050-distill18-background-distillation.md): a part of the start
fold, so what is due is derived from the ledger, never kept beside it.

A record whose kernel ops mark a session archived (the archive's
registration, or a rollback that brings the mark back) makes it due from
that record; the session's next ``memory.distill`` record, or a record that
takes the mark away (unarchive, a rollback or undo of the archive), makes it
not due. A distillation the core's stop cancelled, or a crash cut short,
left no record: its session is still due at the next start, which queues
it again; one that was recorded is not redone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from naga.v1 import kernel_pb2 as kpb
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.ledger import Record

log = logging.getLogger("naga.agent")

#: Kernel family of the owner's archive marks (True: archived).
ARCHIVED_FAMILY = "session.archived"
#: Record kind of one distillation call (naga_core.agent._distill).
DISTILL = "memory.distill"


class DueFold:
    """Session -> the seq of the record that archived it, while no
    distillation of it was recorded after that record."""

    def __init__(self) -> None:
        self._due: dict[str, int] = {}

    def see_effect(self, seq: int, effect: kpb.Effect) -> None:
        """An effect record, already parsed (the fold parses each once)."""
        for op in effect.forward:
            if op.family != ARCHIVED_FAMILY:
                continue
            if op.HasField("value"):
                self._due[op.key] = seq
            else:
                self._due.pop(op.key, None)

    def see(self, record: Record) -> None:
        """Any other record: only ``memory.distill`` ones matter."""
        if record.kind != DISTILL or not self._due:
            return
        try:
            body = mmpb.MemoryDistillRecord.FromString(record.payload)
        except DecodeError:
            log.warning("distill: record %d is not a distillation; skipped", record.seq)
            return
        self._due.pop(body.session, None)

    def due(self) -> list[tuple[str, int]]:
        """(session, archive seq) of each session due, oldest archive first."""
        return sorted(self._due.items(), key=lambda kv: kv[1])

    def image(self) -> list[snpb.DistillDue]:
        return [snpb.DistillDue(session=s, archive_seq=seq) for s, seq in self.due()]

    @classmethod
    def restore(cls, items: Iterable[snpb.DistillDue], *, through: int) -> DueFold:
        """The fold imaged at seq ``through``; ValueError if it cannot be."""
        fold = cls()
        for item in items:
            if not item.session or not 0 <= item.archive_seq <= through:
                raise ValueError(f"a due distillation is not of a record up to {through}")
            fold._due[item.session] = item.archive_seq
        return fold


__all__ = ["ARCHIVED_FAMILY", "DISTILL", "DueFold"]
