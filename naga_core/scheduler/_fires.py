"""The ``job.fire`` records: what each job last fired, and which recorded
fires never got their turn's message (a crash between the two).

A fire is a plain ledger record, not a kernel effect: a rollback undoes
what a job's turn changed (its own effects), never the fact that it ran,
so rolling back never makes a job fire again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from naga.v1 import agent_pb2 as apb
from naga.v1 import job_pb2 as jpb
from naga.v1 import startparts_pb2 as sppb
from naga_core.agent import TRACE_MESSAGE
from naga_core.ledger import Ledger, Record
from naga_core.scheduler._jobs import is_job_session

FIRE_KIND = "job.fire"
#: Fires kept per job for ``naga job show``.
RECENT = 10


def fire_key(job_id: str, scheduled_ns: int, *, manual: bool = False) -> str:
    """The turn's idempotency key: one fire, one turn, whatever restarts."""
    return f"job:{job_id}:{'run:' if manual else ''}{scheduled_ns}"


@dataclass(slots=True)
class FireLog:
    """Per job: the newest scheduled fire (the anchor the next is computed
    from), its fire count and its recent fires; the fires with no turn."""

    anchor: dict[str, int] = field(default_factory=dict[str, int])
    count: dict[str, int] = field(default_factory=dict[str, int])
    last_fired: dict[str, int] = field(default_factory=dict[str, int])
    recent: dict[str, deque[jpb.JobFire]] = field(default_factory=dict[str, deque[jpb.JobFire]])
    #: key -> fire, for fires whose turn message is not (yet) recorded
    unstarted: dict[str, jpb.JobFire] = field(default_factory=dict[str, jpb.JobFire])

    def see(self, record: Record) -> None:
        if record.kind == FIRE_KIND:
            try:
                fire = jpb.JobFire.FromString(record.payload)
            except DecodeError:
                return  # not ours to judge: `naga ledger verify` checks records
            self.add(fire)
        elif record.kind == TRACE_MESSAGE and self.unstarted:
            try:
                body = apb.TurnRecord.FromString(record.payload)
            except DecodeError:
                return
            if is_job_session(body.session):
                self.unstarted.pop(body.idempotency_key, None)

    def add(self, fire: jpb.JobFire) -> None:
        job = fire.job_id
        if not fire.manual:
            self.anchor[job] = max(self.anchor.get(job, 0), fire.scheduled_ns)
        if fire.skipped:
            return
        self.count[job] = self.count.get(job, 0) + 1
        self.last_fired[job] = fire.fired_ns
        self.recent.setdefault(job, deque(maxlen=RECENT)).append(fire)
        self.unstarted[fire.key] = fire

    def started(self, key: str) -> None:
        self.unstarted.pop(key, None)

    def copy(self) -> FireLog:
        return FireLog(
            dict(self.anchor),
            dict(self.count),
            dict(self.last_fired),
            {job: deque(fires, maxlen=RECENT) for job, fires in self.recent.items()},
            dict(self.unstarted),
        )

    # The start-up image (docs/adr/0036-hands-one-start-pass.md).
    def image(self) -> sppb.FireLogImage:
        img = sppb.FireLogImage(unstarted=list(self.unstarted.values()))
        jobs = dict.fromkeys([*self.anchor, *self.count, *self.last_fired, *self.recent])
        for job in jobs:
            img.jobs.append(
                sppb.JobFiresImage(
                    job_id=job,
                    anchor=self.anchor.get(job, 0),
                    has_anchor=job in self.anchor,
                    count=self.count.get(job, 0),
                    last_fired_ns=self.last_fired.get(job, 0),
                    has_last_fired=job in self.last_fired,
                    recent=list(self.recent.get(job, ())),
                )
            )
        return img

    @classmethod
    def restore(cls, img: sppb.FireLogImage) -> FireLog:
        """ValueError when the image does not hold together."""
        log = cls()
        seen: set[str] = set()
        for j in img.jobs:
            if not j.job_id or j.job_id in seen:
                raise ValueError("a job's fires without an id, or twice")
            seen.add(j.job_id)
            if len(j.recent) > RECENT or any(f.job_id != j.job_id for f in j.recent):
                raise ValueError(f"job {j.job_id}: its recent fires do not hold together")
            if j.has_anchor:
                log.anchor[j.job_id] = j.anchor
            if j.count:
                log.count[j.job_id] = j.count
            if j.has_last_fired:
                log.last_fired[j.job_id] = j.last_fired_ns
            if j.recent:
                log.recent[j.job_id] = deque(j.recent, maxlen=RECENT)
        for fire in img.unstarted:
            if not fire.key or fire.key in log.unstarted:
                raise ValueError("an unstarted fire without a key, or twice")
            log.unstarted[fire.key] = fire
        return log


def read_fires(ledger: Ledger) -> FireLog:
    """One pass over the ledger (on a worker thread)."""
    log = FireLog()
    for record in ledger.iter_records():
        log.see(record)
    return log


__all__ = ["FIRE_KIND", "RECENT", "FireLog", "fire_key", "read_fires"]
