"""The scheduler task: fires each job at its schedule's instants, on trio's
clock (docs/design/scheduler.md).

Each wake, for every running job, the newest instant of its schedule at or
before now is compared with its anchor (the last fire recorded):

* not past the anchor: nothing is due; the task sleeps until the next one;
* within ``misfire_grace_s`` of now: it fires (on time, or a little late);
* older (the core was down, or asleep): policy ``once`` fires it once as a
  catch-up standing for all it missed; ``skip`` records a skipped fire and
  runs nothing. Never a burst: one fire per job per wake, anchored at the
  newest instant.

A fire: the creator's trust now is read first (a creator whose trust fell
below the job's snapshot pauses the job, an entry in the ledger, and a note
in the owner's history, and nothing runs); then the ``job.fire`` record is
made durable; only then does its turn start (the :class:`Runner`). A crash
after the record and before the turn's message is mended at the next start
(the recorded fire's turn starts then, under the same key); a crash after
the message is the core's turn recovery's (the turn is re-run once or ends
with a recorded error). So a fire never runs twice and is never dropped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import trio

from naga.trust import TrustLevel, UnknownTrustLevel
from naga.v1 import job_pb2 as jpb
from naga_core.errors import NagaError
from naga_core.kernel import Kernel, TrustTable
from naga_core.ledger import Entry, Ledger
from naga_core.scheduler._cron import Schedule
from naga_core.scheduler._errors import InvalidSchedule, SchedulerError
from naga_core.scheduler._fires import FIRE_KIND, FireLog, fire_key, read_fires
from naga_core.scheduler._jobs import Jobs, anchor_of

log = logging.getLogger("naga.scheduler")
T = TypeVar("T")
_NS = 1_000_000_000


class Core(Protocol):
    @property
    def kernel(self) -> Kernel: ...
    @property
    def ledger(self) -> Ledger: ...
    def write(self, fn: Callable[[], T]) -> T: ...
    def settle(self) -> bool: ...
    def notify_appended(self) -> None: ...


class Runner(Protocol):
    """Starts a fire's turn (the core's agent; a test's recorder)."""

    async def run(self, job: jpb.Job, fire: jpb.JobFire, trust: TrustLevel) -> None:
        """Run the turn of ``fire`` in ``job``'s session at ``trust``, to its end."""
        ...


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    #: A fire found later than this after its instant counts as missed.
    misfire_grace_s: float = 60.0
    #: The longest sleep between looks at the wall clock (it may jump).
    recheck_s: float = 300.0


def creator_trust(kernel: Kernel, creator: str) -> TrustLevel:
    """The creator's trust now: the owner's is the owner's; a peer's, the
    trust table's row (none: untrusted)."""
    if not creator:
        return TrustLevel.OWNER
    return TrustTable(kernel).level(creator)


def snapshot_of(job: jpb.Job) -> TrustLevel:
    try:
        return TrustLevel.parse(job.creator_trust)
    except UnknownTrustLevel:
        return TrustLevel.UNTRUSTED


class Scheduler:
    def __init__(
        self,
        core: Core,
        runner: Runner,
        *,
        clock: Callable[[], int],
        config: SchedulerConfig | None = None,
    ) -> None:
        self._core = core
        self._runner = runner
        self._clock = clock
        self.config = config or SchedulerConfig()
        self.jobs = Jobs(core, clock)
        self.fires = FireLog()
        #: the seq the fire log was read through (-1: not read yet)
        self._fires_seq = -1
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._schedules: dict[str, tuple[str, str, Schedule]] = {}
        self._next: dict[str, tuple[tuple[Schedule, int], int | None]] = {}

    # --- the task ------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[Scheduler]) -> None:
        """Read the fires from the ledger (after the start-up fold's, when
        :meth:`begin` gave one), start the turns of recorded fires that have
        none (a crash between the two), then fire on schedule."""
        if self._fires_seq < 0:
            self.fires = await trio.to_thread.run_sync(read_fires, self._core.ledger)
        else:
            await trio.to_thread.run_sync(self._read_tail)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for fire in list(self.fires.unstarted.values()):
                self._resume(fire)
            task_status.started(self)
            while True:
                try:
                    wake = await self._tick()
                except NagaError:
                    # The core serves on (a failed ledger stops it anyway);
                    # the next look tries again.
                    log.exception("the scheduler could not look at its jobs")
                    wake = self._clock() + self.config.recheck_s * _NS
                delay = min(self.config.recheck_s, max(0.0, (wake - self._clock()) / _NS))
                with trio.move_on_after(delay):
                    await self._changed.wait()
                self._changed = trio.Event()

    def begin(self, fires: FireLog, seq: int) -> None:
        """Start from ``fires``, the log folded through record ``seq`` (the
        core's start-up fold: docs/adr/0036-hands-one-start-pass.md); what
        came after it is read at :meth:`serve`."""
        self.fires = fires
        self._fires_seq = seq

    def _read_tail(self) -> None:
        for record in self._core.ledger.iter_records(self._fires_seq + 1):
            self.fires.see(record)

    def poke(self) -> None:
        """Look at the jobs again now (one was made, changed, rolled back)."""
        self._changed.set()

    def _resume(self, fire: jpb.JobFire) -> None:
        try:
            job = self.jobs.get(fire.job_id)
        except SchedulerError:
            log.info("fire %s: its job is gone; nothing runs", fire.key)
            self.fires.started(fire.key)
            return
        if job.paused:
            self.fires.started(fire.key)
            return
        log.info("fire %s was recorded before the last stop without its turn: running it", fire.key)
        self._start(job, fire, min(snapshot_of(job), self._trust_now(job)))

    def schedule(self, job: jpb.Job) -> Schedule | None:
        cached = self._schedules.get(job.id)
        if cached is not None and cached[:2] == (job.cron, job.tz):
            return cached[2]
        try:
            schedule = Schedule.parse(job.cron, job.tz)
        except InvalidSchedule as exc:  # stored by an older release's rules
            log.warning("job %s has a schedule this core cannot read: %s", job.id, exc)
            return None
        self._schedules[job.id] = (job.cron, job.tz, schedule)
        return schedule

    def next_fire(self, job: jpb.Job) -> int | None:
        """When ``job`` fires next (None: paused or never)."""
        schedule = self.schedule(job)
        if job.paused or schedule is None:
            return None
        anchor = anchor_of(job, self.fires.anchor.get(job.id, 0))
        return schedule.next_after(anchor)

    async def _tick(self) -> float:
        """Fire what is due; the wall-clock instant (ns) of the next look."""
        now = self._clock()
        wake = math.inf
        for job in self.jobs.all():
            if job.paused:
                continue
            schedule = self.schedule(job)
            if schedule is None:
                continue
            anchor = anchor_of(job, self.fires.anchor.get(job.id, 0))
            nxt = self._next_after(job, schedule, anchor)
            if nxt is None:
                continue
            if nxt > now:
                wake = min(wake, nxt)
                continue
            latest = schedule.last_at_or_before(now)
            assert latest is not None  # nxt <= now is one
            await self._due(job, schedule, anchor, latest, now)
            after = schedule.next_after(latest)
            if after is not None:
                wake = min(wake, after)
        return wake

    def _next_after(self, job: jpb.Job, schedule: Schedule, anchor: int) -> int | None:
        """``schedule.next_after(anchor)``, remembered per job: most wakes
        find nothing due and compute nothing."""
        key = (schedule, anchor)
        cached = self._next.get(job.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        nxt = schedule.next_after(anchor)
        self._next[job.id] = (key, nxt)
        return nxt

    async def _due(
        self, job: jpb.Job, schedule: Schedule, anchor: int, latest: int, now: int
    ) -> None:
        late = now - latest > self.config.misfire_grace_s * _NS
        missed = _count_between(schedule, anchor, latest)
        if not late:
            await self.fire(job, latest, catch_up=missed > 1, missed=missed)
        elif job.misfire == jpb.MISFIRE_POLICY_SKIP:
            skipped = jpb.JobFire(
                job_id=job.id,
                scheduled_ns=latest,
                fired_ns=now,
                session=job.session,
                skipped=True,
                missed=missed,
            )
            await self._record(skipped)
        else:
            await self.fire(job, latest, catch_up=True, missed=missed)

    # --- firing --------------------------------------------------------------------

    def _trust_now(self, job: jpb.Job) -> TrustLevel:
        return creator_trust(self._core.kernel, job.creator)

    async def fire(
        self,
        job: jpb.Job,
        scheduled_ns: int,
        *,
        catch_up: bool = False,
        missed: int = 1,
        manual: bool = False,
    ) -> tuple[jpb.JobFire, int] | None:
        """Fire ``job`` for ``scheduled_ns``: the trust check, the durable
        record, then the turn. None if the check paused the job."""
        snapshot, now = snapshot_of(job), self._trust_now(job)
        if now < snapshot:
            reason = (
                f"its creator {job.creator or 'the owner'}'s trust fell from {snapshot.label} "
                f"to {now.label} since the job was made; the owner may resume it"
            )
            await self._pause(job, reason)
            return None
        fire = jpb.JobFire(
            job_id=job.id,
            scheduled_ns=scheduled_ns,
            fired_ns=self._clock(),
            key=fire_key(job.id, scheduled_ns, manual=manual),
            session=job.session,
            catch_up=catch_up,
            missed=missed if catch_up else 0,
            manual=manual,
        )
        seq = await self._record(fire)
        self._start(job, fire, snapshot)
        return fire, seq

    async def _record(self, fire: jpb.JobFire) -> int:
        payload = fire.SerializeToString(deterministic=True)
        seq = self._core.write(
            lambda: self._core.ledger.stage(Entry.of(FIRE_KIND, payload, ())).seq
        )
        # Durable before the turn starts: that is what makes a crash here safe.
        await self._settle()
        self.fires.add(fire)
        return seq

    async def _pause(self, job: jpb.Job, reason: str) -> None:
        def pause() -> None:
            self.jobs.set_paused(job.id, True, reason)
            # The owner's note: `naga history` and `naga job list` say it.
            self._core.kernel.perform(
                [],
                None,
                description=f"note to the owner: job {job.id} paused before a fire: {reason}",
            )

        self._core.write(pause)
        await self._settle()
        log.warning("job %s paused: %s", job.id, reason)

    def _start(self, job: jpb.Job, fire: jpb.JobFire, trust: TrustLevel) -> None:
        assert self._nursery is not None

        async def run() -> None:
            try:
                await self._runner.run(job, fire, trust)
            except NagaError as exc:  # its turn could not start; the core serves on
                log.warning("fire %s: %s", fire.key, exc)
            finally:
                self.fires.started(fire.key)

        self._nursery.start_soon(run)

    async def _settle(self) -> None:
        if await trio.to_thread.run_sync(self._core.settle):
            self._core.notify_appended()

    # --- the owner's calls (JobService) ------------------------------------------------

    def view(self, job: jpb.Job) -> jpb.JobView:
        return jpb.JobView(
            job=job,
            next_ns=self.next_fire(job) or 0,
            last_fired_ns=self.fires.last_fired.get(job.id, 0),
            fires=self.fires.count.get(job.id, 0),
        )

    def recent(self, job_id: str) -> list[jpb.JobFire]:
        return list(self.fires.recent.get(job_id, ()))

    def upcoming(self, job: jpb.Job, count: int = 3) -> list[int]:
        schedule = self.schedule(job)
        return [] if schedule is None else schedule.upcoming(self._clock(), count)

    def set_paused(self, job_id: str, paused: bool, reason: str = "") -> tuple[jpb.Job, int]:
        """Staged (the caller settles); the loop looks again."""
        out = self.jobs.set_paused(job_id, paused, reason)
        self.poke()
        return out

    def remove(self, job_id: str) -> tuple[jpb.Job, int]:
        out = self.jobs.remove(job_id)
        self.poke()
        return out

    async def run_now(self, job_id: str) -> tuple[jpb.JobFire, int] | None:
        """Fire ``job_id`` now, outside its schedule (its trust check too)."""
        job = self.jobs.get(job_id)
        return await self.fire(job, self._clock(), manual=True)

    async def note(self, text: str) -> int:
        """A durable entry in the owner's history (``naga history``)."""
        seq = self._core.write(lambda: self._core.kernel.perform([], None, description=text))
        await self._settle()
        return seq

    async def committed(self) -> None:
        """Make what was staged durable, and look at the jobs again."""
        await self._settle()
        self.poke()


def _count_between(schedule: Schedule, anchor: int, latest: int, cap: int = 1000) -> int:
    """How many instants lie in (anchor, latest] (at most ``cap``: counted
    for the record, never run)."""
    count, at = 0, anchor
    while count < cap:
        nxt = schedule.next_after(at)
        if nxt is None or nxt > latest:
            break
        count, at = count + 1, nxt
    return count


__all__ = ["Core", "Runner", "Scheduler", "SchedulerConfig", "creator_trust", "snapshot_of"]
