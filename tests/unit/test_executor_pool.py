"""The executor pool hands idle executors to waiting turns first come,
first served. Woken together by one event, waiters would race in trio's
shuffled run order, and under load some turns waited seconds while later
ones went ahead (bench/gateway.py end to end: p99 2.9 s at 20 sessions on
2 executors). The workers here are plain markers: what is under test is
the pool's hand-out order, not a worker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.lowlevel
import trio.testing

from naga_core._home import Home
from naga_core.agent import AgentConfig
from naga_core.agent._workers import AgentWorkers
from naga_core.plugins import Worker, WorkerState
from naga_core.supervisor import WorkerTuning


@dataclass
class _Marker:
    name: str
    state: WorkerState = WorkerState.RUNNING


def _pool(tmp_path: Path, *names: str) -> tuple[AgentWorkers, list[Worker]]:
    pool = AgentWorkers(Home(str(tmp_path)), AgentConfig(executors=len(names)), WorkerTuning())
    markers = [cast(Worker, _Marker(n)) for n in names]
    for m in markers:
        pool.give_back(m)
    return pool, markers


@pytest.mark.parametrize("waiters", [2, 5, 12])
def test_waiting_turns_get_executors_in_the_order_they_asked(tmp_path: Path, waiters: int) -> None:
    pool, _ = _pool(tmp_path, "only")
    served: list[int] = []

    async def main() -> None:
        busy = await pool.take_executor(5)

        async def turn(n: int) -> None:
            worker = await pool.take_executor(5)
            served.append(n)
            await trio.lowlevel.checkpoint()  # uses it a moment
            pool.give_back(worker)

        async with trio.open_nursery() as nursery:
            for n in range(waiters):
                nursery.start_soon(turn, n)
                await trio.testing.wait_all_tasks_blocked()  # n now waits, in line
            pool.give_back(busy)

    for _ in range(5):  # trio shuffles its run order: one lucky order proves nothing
        served.clear()
        trio.run(main)
        assert served == list(range(waiters))


def test_a_failed_executor_is_skipped_and_a_timeout_says_why(tmp_path: Path) -> None:
    pool, (broken,) = _pool(tmp_path, "broken")
    cast(Any, broken).state = WorkerState.FAILED

    async def main() -> None:
        with pytest.raises(
            Exception, match=r"no agent executor was free within 0.05 s .*all busy or failed"
        ):
            await pool.take_executor(0.05)

    trio.run(main)
