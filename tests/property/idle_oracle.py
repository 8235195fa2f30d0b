"""The idle-distillation fold's state (idle18, ADR 0055) worked out by one
straight pass over a ledger's records: what the start-up snapshot property
compares a snapshot start's and a full replay's with."""

from __future__ import annotations

from naga.v1 import agent_pb2 as apb
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.agent import DISTILL
from naga_core.ledger import Ledger


def idle_by_hand(ledger: Ledger) -> list[snpb.DistillIdle]:
    """Per session: its last message, its last turn end (seq and time) and
    the newest entry a distillation record covered (a record without
    ``through_seq`` covered what came before it; one with a negative one,
    nothing)."""
    found: dict[str, snpb.DistillIdle] = {}
    for r in ledger.iter_records():
        if r.kind == DISTILL:
            d = mmpb.MemoryDistillRecord.FromString(r.payload)
            if d.through_seq < 0:
                continue  # a call with no usable answer covered nothing (ADR 0058)
            s = found.setdefault(d.session, no_idle(d.session))
            s.covered_seq = max(s.covered_seq, d.through_seq or r.seq)
        elif r.kind in ("turn.message", "turn.reply", "turn.error"):
            t = apb.TurnRecord.FromString(r.payload)
            s = found.setdefault(t.session, no_idle(t.session))
            if r.kind == "turn.message":
                s.said_seq = r.seq
            else:
                s.ended_seq, s.ended_ns = r.seq, r.timestamp_ns
    return [found[k] for k in sorted(found)]


def no_idle(session: str) -> snpb.DistillIdle:
    return snpb.DistillIdle(session=session, said_seq=-1, ended_seq=-1, covered_seq=-1)


__all__ = ["idle_by_hand", "no_idle"]
