"""A scheduler over a real ledger and kernel on trio's virtual clock.

The subject is real: the Scheduler, its jobs in the kernel, its fire
records in the ledger (on the simulated file system: real records, no
fdatasync). The peers are thin: a core that stages and commits like the
daemon's, and a runner that records each turn it is asked to run (the
agent is the peer here; tests/scheduler/test_real_core.py runs the real
one)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import trio

from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import job_pb2 as jpb
from naga_core.agent import TRACE_MESSAGE
from naga_core.kernel import Actions, Kernel, open_kernel
from naga_core.ledger import Entry, Ledger, SimulatedFileSystem
from naga_core.scheduler import Scheduler, SchedulerConfig
from tests.ledger_helpers import fixed_signer

T = TypeVar("T")
NS = 1_000_000_000


class TestCore:
    """The daemon Core's write/settle contract, over one ledger and kernel."""

    def __init__(self, ledger: Ledger, kernel: Kernel) -> None:
        self.ledger = ledger
        self.kernel = kernel
        self.appended = 0

    def write(self, fn: Callable[[], T]) -> T:
        with self.kernel.staged():
            return fn()

    def settle(self) -> bool:
        if self.ledger.next_seq == self.ledger.size:
            return False
        before = self.ledger.size
        return self.ledger.commit() > before

    def notify_appended(self) -> None:
        self.appended += 1


@dataclass
class Recorder:
    """The runner: every turn the scheduler starts, in order."""

    runs: list[jpb.JobFire] = field(default_factory=list[jpb.JobFire])
    trusts: list[TrustLevel] = field(default_factory=list[TrustLevel])
    #: set once a run is scheduled at or after ``until_ns``
    until_ns: int = 0
    done: trio.Event = field(default_factory=trio.Event)
    changed: trio.Event = field(default_factory=trio.Event)

    #: where its turns' messages go, as the agent's do (set by scheduler())
    core: TestCore | None = None

    async def run(self, job: jpb.Job, fire: jpb.JobFire, trust: TrustLevel) -> None:
        if self.core is not None:  # the turn's message, under the fire's key
            body = apb.TurnRecord(session=fire.session, idempotency_key=fire.key, text=job.prompt)
            entry = Entry.of(TRACE_MESSAGE, body.SerializeToString(), ())
            core = self.core
            core.write(lambda: core.ledger.stage(entry))
            core.settle()
        self.runs.append(fire)
        self.trusts.append(trust)
        if self.until_ns and fire.scheduled_ns >= self.until_ns:
            self.done.set()
        self.changed.set()
        self.changed = trio.Event()

    async def wait_runs(self, count: int) -> None:
        while len(self.runs) < count:
            await self.changed.wait()


@contextmanager
def opened(fs: SimulatedFileSystem | None = None) -> Generator[TestCore]:
    with Ledger.open("/ledger", fixed_signer(), fs=fs or SimulatedFileSystem()) as ledger:
        yield TestCore(ledger, open_kernel(ledger, Actions()))


def wall(base_ns: int) -> Callable[[], int]:
    """Wall-clock ns that move with trio's (virtual) clock, reading
    ``base_ns`` now (call it inside trio)."""
    offset = base_ns - int(trio.current_time() * NS)
    return lambda: offset + int(trio.current_time() * NS)


def utc_ns(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()) * NS


def scheduler(
    core: TestCore, runner: Recorder, clock: Callable[[], int], **config: float
) -> Scheduler:
    runner.core = core
    return Scheduler(core, runner, clock=clock, config=SchedulerConfig(**config))


__all__ = ["NS", "Recorder", "TestCore", "opened", "scheduler", "utc_ns", "wall"]
