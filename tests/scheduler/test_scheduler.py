"""The scheduler on trio's virtual clock (MockClock, autojump): a year of
fires for a table of expressions and zones against an oracle built from
zoneinfo alone (DST spring gaps: once, at the first valid instant after;
autumn repeats: once); a three-day downtime under each misfire policy
(one catch-up or none, never a burst); a creator whose trust fell (the job
pauses, with ledger entries); a rollback of a job's creation (gone; back
when the rollback is rolled back)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import trio
import trio.testing

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import job_pb2 as jpb
from naga.v1 import kernel_pb2 as kpb
from naga_core.kernel import EFFECT_KIND, TrustTable
from naga_core.ledger import SimulatedFileSystem
from naga_core.scheduler import FIRE_KIND, JOB_FAMILY, Scheduler, read_fires
from tests.scheduler.harness import NS, Recorder, opened, scheduler, utc_ns, wall

DAY = 86_400


def _run(fn: Callable[[], object]) -> None:
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


def _local_fire(day: date, hour: int, minute: int, tz: ZoneInfo) -> int:
    """The oracle, from zoneinfo alone: the instant a fixed-time cron fires
    on ``day``. A time in a spring gap: the first valid instant after it
    (the transition); a time repeated in autumn: its first occurrence."""
    naive = datetime(day.year, day.month, day.day, hour, minute)
    first = naive.replace(tzinfo=tz, fold=0)
    back = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
    if back == naive:
        return int(first.timestamp()) * NS
    # In a gap: walk the instants from the earlier reading until the local
    # clock reaches the time asked for.
    t = int(naive.replace(tzinfo=tz, fold=1).timestamp()) // 60 * 60
    while datetime.fromtimestamp(t, tz=tz).replace(tzinfo=None) < naive:
        t += 60
    return t * NS


@dataclass(frozen=True)
class Row:
    cron: str
    tz: str
    hour: int
    minute: int
    day: Callable[[date], bool]


EVERY_DAY: Callable[[date], bool] = lambda _d: True  # noqa: E731

TABLE = (
    Row("0 7 * * *", "Europe/Paris", 7, 0, EVERY_DAY),
    # In New York's spring gap (2027-03-14 02:00-03:00 does not exist).
    Row("30 2 * * *", "America/New_York", 2, 30, EVERY_DAY),
    # In New York's autumn repeat (2027-11-07 01:00-02:00 happens twice).
    Row("30 1 * * *", "America/New_York", 1, 30, EVERY_DAY),
    # London's gap (2027-03-28 01:00-02:00) and repeat (2027-10-31 01:00-02:00).
    Row("15 1 * * *", "Europe/London", 1, 15, EVERY_DAY),
    Row("0 9 * * 1", "Asia/Tokyo", 9, 0, lambda d: d.weekday() == 0),
    Row("45 23 * * 1-5", "Australia/Sydney", 23, 45, lambda d: d.weekday() < 5),
    Row("0 12 1 * *", "UTC", 12, 0, lambda d: d.day == 1),
)


def _expected(row: Row, after_ns: int, until_ns: int) -> list[int]:
    tz = ZoneInfo(row.tz)
    first = datetime.fromtimestamp(after_ns // NS, tz=tz).date() - timedelta(days=1)
    out: list[int] = []
    for i in range(370):
        d = first + timedelta(days=i)
        if row.day(d):
            at = _local_fire(d, row.hour, row.minute, tz)
            if after_ns < at < until_ns:
                out.append(at)
    return out


def _add(s: Scheduler, cron: str, tz: str, **kw: object) -> jpb.Job:
    spec = jpb.JobSpec(cron=cron, tz=tz, prompt=f"run {cron} in {tz}", **kw)  # type: ignore[arg-type]
    job, _ = s.jobs.add(spec, creator="", trust=TrustLevel.OWNER, risk=Risk.R4)
    return job


def test_a_year_of_fires_for_a_table_of_expressions_and_zones() -> None:
    start, end = utc_ns(2027, 1, 1), utc_ns(2028, 1, 1)

    async def main() -> None:
        with opened() as core:
            runner = Recorder(until_ns=end)
            # Looking at the wall clock every 6 h instead of every 5 min
            # changes no fire (the DST and misfire tests run the default);
            # it keeps a year of wakes to seconds.
            s = scheduler(core, runner, wall(start), recheck_s=6 * 3600)
            jobs = [_add(s, r.cron, r.tz) for r in TABLE]
            core.settle()
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.done.wait()
                nursery.cancel_scope.cancel()
            for row, job in zip(TABLE, jobs, strict=True):
                got = [
                    f.scheduled_ns
                    for f in runner.runs
                    if f.job_id == job.id and f.scheduled_ns < end
                ]
                want = _expected(row, start, end)
                assert got == want, f"{row.cron} in {row.tz}: {_diff(got, want, row.tz)}"
                assert not any(f.catch_up for f in runner.runs if f.job_id == job.id)
            # Each fire was a durable ledger record before its run.
            fires = read_fires(core.ledger)
            assert sum(fires.count.values()) == len(runner.runs)

    _run(main)


def _diff(got: list[int], want: list[int], tz: str) -> str:
    z = ZoneInfo(tz)

    def show(xs: set[int]) -> list[str]:
        return [datetime.fromtimestamp(x // NS, tz=z).isoformat() for x in sorted(xs)][:6]

    return f"extra {show(set(got) - set(want))}, missing {show(set(want) - set(got))}"


@pytest.mark.parametrize(
    ("tz", "spring", "autumn"),
    [
        ("America/New_York", (2027, 3, 14), (2027, 11, 7)),
        ("Europe/London", (2027, 3, 28), (2027, 10, 31)),
    ],
)
def test_dst_days_fire_once_at_each_valid_instant(
    tz: str, spring: tuple[int, int, int], autumn: tuple[int, int, int]
) -> None:
    """Every 30 minutes across both transitions: no instant twice, every
    fire at a valid local time, the interval kept in real time."""
    zone = ZoneInfo(tz)

    async def main() -> None:
        for y, m, d in (spring, autumn):
            begin = utc_ns(y, m, d) - 12 * 3600 * NS
            until = utc_ns(y, m, d) + 36 * 3600 * NS
            with opened() as core:
                runner = Recorder(until_ns=until)
                s = scheduler(core, runner, wall(begin))
                job = _add(s, "*/30 * * * *", tz)
                core.settle()
                async with trio.open_nursery() as nursery:
                    await nursery.start(s.serve)
                    await runner.done.wait()
                    nursery.cancel_scope.cancel()
            at = [f.scheduled_ns // NS for f in runner.runs if f.job_id == job.id]
            assert at == sorted(set(at)), "an instant fired twice or out of order"
            local = [datetime.fromtimestamp(t, tz=zone) for t in at]
            wall_times = [x.replace(tzinfo=None) for x in local]
            for x in local:  # every fire is a valid, existing local time
                assert x.astimezone(UTC).astimezone(zone) == x
            # An interval expression keeps its interval in real time across
            # both transitions (Debian cron's rule for wildcard hours): no
            # hole in spring, and in autumn the repeated hour's times run in
            # each of its two halves, each a different instant.
            assert {b - a for a, b in itertools.pairwise(at)} == {1800}
            assert len(at) == 96
            repeated = len(wall_times) - len(set(wall_times))
            assert repeated == (0 if (y, m, d) == spring else 2)

    _run(main)


@pytest.mark.parametrize("policy", ["once", "skip"])
def test_three_days_down_then_one_catch_up_or_none(policy: str) -> None:
    start = utc_ns(2027, 5, 3, 4)  # a Monday, 06:00 in Paris
    misfire = jpb.MISFIRE_POLICY_ONCE if policy == "once" else jpb.MISFIRE_POLICY_SKIP
    fs = SimulatedFileSystem()

    async def main() -> None:
        clock = wall(start)
        runner = Recorder()
        with opened(fs) as core:
            s = scheduler(core, runner, clock)
            job = _add(s, "0 7 * * *", "Europe/Paris", misfire=misfire)
            core.settle()
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.wait_runs(1)  # Monday 07:00
                nursery.cancel_scope.cancel()
        # Down from Monday 07:00 to Thursday 09:00: Tuesday, Wednesday and
        # Thursday 07:00 are missed.
        await trio.sleep((utc_ns(2027, 5, 6, 7) - clock()) / NS)
        with opened(fs) as core:
            s = scheduler(core, runner, clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                if policy == "once":
                    await runner.wait_runs(2)
                    catch_up = runner.runs[1]
                    assert catch_up.catch_up
                    assert catch_up.missed == 3
                    assert catch_up.scheduled_ns == utc_ns(2027, 5, 6, 5)  # Thursday 07:00
                    assert catch_up.fired_ns == utc_ns(2027, 5, 6, 7)  # at the start
                # The next runs on time, Friday 07:00, and nothing in between.
                await runner.wait_runs(3 if policy == "once" else 2)
                nursery.cancel_scope.cancel()
            assert runner.runs[-1].scheduled_ns == utc_ns(2027, 5, 7, 5)
            assert not runner.runs[-1].catch_up
            assert len(runner.runs) == (3 if policy == "once" else 2)
            fires = [r for r in core.ledger.iter_records() if r.kind == FIRE_KIND]
            parsed = [jpb.JobFire.FromString(r.payload) for r in fires]
            skipped = [f for f in parsed if f.skipped]
            if policy == "skip":
                assert len(skipped) == 1
                assert skipped[0].missed == 3
                assert skipped[0].job_id == job.id
            else:
                assert not skipped

    _run(main)


def test_a_creator_whose_trust_fell_pauses_the_job() -> None:
    start = utc_ns(2027, 6, 1)

    async def main() -> None:
        runner = Recorder()
        with opened() as core:
            table = TrustTable(core.kernel)
            core.write(lambda: table.set("wechat:bob", TrustLevel.KNOWN, by_owner=True))
            s = scheduler(core, runner, wall(start))
            spec = jpb.JobSpec(cron="0 * * * *", tz="UTC", prompt="hourly check")
            job, _ = core.write(
                lambda: s.jobs.add(spec, creator="wechat:bob", trust=TrustLevel.KNOWN, risk=Risk.R2)
            )
            core.settle()
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.wait_runs(1)
                assert runner.trusts == [TrustLevel.KNOWN]
                core.write(lambda: table.lower("wechat:bob", TrustLevel.GUEST, reason="test"))
                core.settle()
                # The next hour's fire finds bob lowered: paused, nothing runs.
                # (A minute past it: trio orders wakes at one instant at random.)
                await trio.sleep(3600 + 60)
                assert s.jobs.get(job.id).paused
                await trio.sleep(5 * 3600)
                nursery.cancel_scope.cancel()
            assert len(runner.runs) == 1
            paused = s.jobs.get(job.id)
            assert "fell from known to guest" in paused.paused_reason
            notes = [
                kpb.Effect.FromString(r.payload).description
                for r in core.ledger.iter_records()
                if r.kind == EFFECT_KIND
            ]
            assert any(n.startswith(f"job {job.id} paused: ") for n in notes)
            assert any(n.startswith(f"note to the owner: job {job.id} paused") for n in notes)
            assert len([r for r in core.ledger.iter_records() if r.kind == FIRE_KIND]) == 1

    _run(main)


def test_a_rollback_of_the_creation_removes_the_job_and_rolling_it_back_restores_it() -> None:
    start = utc_ns(2027, 6, 1)

    async def main() -> None:
        runner = Recorder()
        with opened() as core:
            s = scheduler(core, runner, wall(start))
            before = core.ledger.size - 1
            job = core.write(lambda: _add(s, "0 * * * *", "UTC"))
            core.settle()
            assert [j.id for j in s.jobs.all()] == [job.id]
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.wait_runs(1)
                rollback_seq, _ = core.write(lambda: core.kernel.rollback(before))
                core.settle()
                s.poke()
                assert s.jobs.all() == []
                assert core.kernel.state.family(JOB_FAMILY) == {}
                await trio.sleep(5 * 3600)  # five hours: nothing fires
                assert len(runner.runs) == 1
                # Rolling the rollback back brings the job forward again, and
                # it fires again (one catch-up for the hours it was gone).
                core.write(lambda: core.kernel.rollback(rollback_seq - 1))
                core.settle()
                s.poke()
                assert [j.id for j in s.jobs.all()] == [job.id]
                await runner.wait_runs(2)
                assert runner.runs[1].catch_up
                await runner.wait_runs(3)
                assert not runner.runs[2].catch_up
                nursery.cancel_scope.cancel()

    _run(main)


@dataclass
class _Killed:
    """A runner whose core dies at fire time: the fire is recorded, its
    turn's message never is."""

    fired: trio.Event

    async def run(self, job: jpb.Job, fire: jpb.JobFire, trust: TrustLevel) -> None:
        self.fired.set()
        await trio.sleep_forever()


def test_a_fire_recorded_without_its_turn_runs_exactly_once_at_the_next_start() -> None:
    start = utc_ns(2027, 6, 1)
    fs = SimulatedFileSystem()

    async def main() -> None:
        clock = wall(start)
        killed = _Killed(trio.Event())
        with opened(fs) as core:
            s = Scheduler(core, killed, clock=clock)
            job = core.write(lambda: _add(s, "0 * * * *", "UTC"))
            core.settle()
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await killed.fired.wait()  # 01:00: recorded, then the core is gone
                nursery.cancel_scope.cancel()
        await trio.sleep(600)  # down ten minutes
        runner = Recorder()
        with opened(fs) as core:
            s = scheduler(core, runner, clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.wait_runs(2)  # the 01:00 fire's turn, then 02:00's
                nursery.cancel_scope.cancel()
            assert [f.scheduled_ns for f in runner.runs] == [
                utc_ns(2027, 6, 1, 1),
                utc_ns(2027, 6, 1, 2),
            ]
            assert runner.runs[0].key == f"job:{job.id}:{utc_ns(2027, 6, 1, 1)}"
            fires = [
                jpb.JobFire.FromString(r.payload)
                for r in core.ledger.iter_records()
                if r.kind == FIRE_KIND
            ]
            assert [f.scheduled_ns for f in fires] == [f.scheduled_ns for f in runner.runs]
        # A third start finds both turns started: nothing runs again.
        again = Recorder()
        with opened(fs) as core:
            s = scheduler(core, again, clock)
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await trio.sleep(60)
                nursery.cancel_scope.cancel()
        assert again.runs == []

    _run(main)


def test_a_resumed_job_does_not_catch_up_what_fell_while_it_was_paused() -> None:
    start = utc_ns(2027, 6, 1)

    async def main() -> None:
        runner = Recorder()
        with opened() as core:
            s = scheduler(core, runner, wall(start))
            job = core.write(lambda: _add(s, "0 * * * *", "UTC"))
            core.settle()
            async with trio.open_nursery() as nursery:
                await nursery.start(s.serve)
                await runner.wait_runs(1)  # 01:00
                core.write(lambda: s.set_paused(job.id, True, "by the owner"))
                core.settle()
                await trio.sleep(3 * DAY)
                assert len(runner.runs) == 1
                core.write(lambda: s.set_paused(job.id, False))  # at 01:00 + 3 days
                core.settle()
                await runner.wait_runs(2)
                nursery.cancel_scope.cancel()
            resumed = runner.runs[1]
            assert not resumed.catch_up  # the next hour, on time
            assert resumed.scheduled_ns == utc_ns(2027, 6, 4, 2)

    _run(main)
