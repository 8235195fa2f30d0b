"""A worker's restart loop on trio's mock clock: the backoff doubles up to
its cap, a crash loop gives up with its reason, and calls meanwhile get a
clear answer. The launches fail before any process exists (the sandbox
refuses them), so no process is needed and the clock can jump."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

import sandbox
from naga_core.plugins import (
    SHIPPED_ROOT,
    Catalog,
    Installed,
    PluginUnavailable,
    Root,
    Worker,
    WorkerState,
    WorkerUnavailable,
)
from naga_core.supervisor import RestartPolicy, WorkerTuning

TUNING = WorkerTuning(
    restart=RestartPolicy(backoff_s=1, backoff_max_s=3, loop_failures=5, loop_window_s=100)
)


def _clock_plugin() -> Installed:
    installed = Catalog.scan([Root(SHIPPED_ROOT, shipped=True)]).get("clock")
    assert installed is not None
    return installed


class Journal:
    def __init__(self) -> None:
        self.notes: list[tuple[float, str]] = []
        self.gave_up: list[str] = []
        #: Set at the first note: the worker is backing off.
        self.first = trio.Event()

    async def note(self, text: str) -> None:
        self.notes.append((trio.current_time(), text))
        self.first.set()

    async def give_up(self, _worker: Worker, reason: str) -> None:
        self.gave_up.append(reason)


def _refused(_plugin: object, _fd: int, _output: int) -> sandbox.Sandboxed:
    raise sandbox.LaunchFailed("the interpreter is gone")


def _worker(journal: Journal) -> Worker:
    return Worker(
        _clock_plugin(),
        spawn=_refused,
        tuning=TUNING,
        note=journal.note,
        give_up=journal.give_up,
    )


def test_backoff_doubles_to_its_cap_then_a_crash_loop_gives_up() -> None:
    journal = Journal()

    async def main() -> None:
        worker = _worker(journal)
        await worker.run()
        assert worker.state is WorkerState.FAILED
        assert worker.restarts == 4

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    times = [t for t, _ in journal.notes]
    assert [b - a for a, b in itertools.pairwise(times)] == [1.0, 2.0, 3.0]
    delays = [text.rsplit("next start in ", 1)[1] for _, text in journal.notes]
    assert delays == ["1.00 s", "2.00 s", "3.00 s", "3.00 s"]
    assert (
        "could not start: sandboxed child failed to start: the interpreter is gone"
        in (journal.notes[0][1])
    )
    (reason,) = journal.gave_up
    assert reason.startswith("crash loop: 5 failures within 100 s; not restarted until enabled")
    assert reason.endswith(
        "last: could not start: sandboxed child failed to start: the interpreter is gone"
    )


def test_calls_wait_for_a_restart_then_hear_why_and_a_failed_plugin_says_so() -> None:
    journal = Journal()

    async def main() -> None:
        worker = _worker(journal)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await journal.first.wait()
            with pytest.raises(WorkerUnavailable) as waited:
                await worker.call("clock.now", "", timeout_s=0.5)
            said = str(waited.value)
            assert said.startswith("plugin clock is waiting to restart its worker (last failure: ")
            assert said.endswith("it was not ready within 0.5 s")
            await worker.stopped.wait()
        with pytest.raises(PluginUnavailable) as refused:
            await worker.call("clock.now", "", timeout_s=5)
        assert "plugin clock failed: crash loop" in str(refused.value)
        assert "naga plugin enable clock" in str(refused.value)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_stop_during_backoff_ends_at_once() -> None:
    journal = Journal()

    async def main() -> None:
        worker = _worker(journal)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await journal.first.wait()
            worker.stop()
            await worker.stopped.wait()
        assert worker.state is WorkerState.STOPPED
        assert journal.gave_up == []

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
