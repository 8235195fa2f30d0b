"""The idle-session distillation timer (memory.distill_idle_h, ADR 0055), on
trio's virtual clock over a real ledger whose records are stamped with a
wall clock that moves with it: off, nothing is queued; a session idle long
enough is queued once, with nothing covered; a message after its
distillation's record queues it again, after the entry that record
covered; a session with a turn running (its message has no end, or the
runner says a turn runs) waits; and a fold rebuilt from the ledger (a
restart) queues again what was not recorded, never what was."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing

from naga.constants import DISTILL_IDLE_RECHECK_S
from naga.v1 import agent_pb2 as apb
from naga.v1 import memory_pb2 as mmpb
from naga_core.agent import COVERED_NOTHING, DISTILL, IdleFold, watch_idle
from naga_core.ledger import Entry, Ledger, SimulatedFileSystem
from tests.ledger_helpers import fixed_signer

HOUR = 3600.0
BASE_NS = 1_800_000_000 * 10**9


def _wall() -> Callable[[], int]:
    offset = BASE_NS - int(trio.current_time() * 1e9)
    return lambda: offset + int(trio.current_time() * 1e9)


class _World:
    """A ledger, the timer's fold and what it queued."""

    def __init__(self, ledger: Ledger, clock: Callable[[], int]) -> None:
        self.ledger = ledger
        self.clock = clock
        self.fold = IdleFold()
        self.hours = 0.0
        self.busy: set[str] = set()
        self.queued: list[tuple[str, int]] = []

    def turn(self, session: str, *, ended: bool = True) -> int:
        """A message (and its reply); the seq of the newest record."""
        entries = [_turn("turn.message", session)]
        if ended:
            entries.append(_turn("turn.reply", session))
        return self.ledger.append_many(entries)[-1].seq

    def reply(self, session: str) -> int:
        return self.ledger.append_many([_turn("turn.reply", session)])[-1].seq

    def distilled(self, session: str, after: int) -> int:
        """The runner's record of the distillation it was queued for."""
        through = self.ledger.size - 1
        body = mmpb.MemoryDistillRecord(session=session, through_seq=through, after_seq=after)
        self.ledger.append_many([Entry.of(DISTILL, body.SerializeToString())])
        return through

    def queue(self, session: str, after: int) -> bool:
        self.queued.append((session, after))
        return True

    async def watch(self, nursery: trio.Nursery, fold: IdleFold | None = None) -> trio.CancelScope:
        scope = trio.CancelScope()
        watched = fold if fold is not None else self.fold

        async def advance(f: IdleFold) -> None:
            f.advance(self.ledger)

        async def run(task_status: trio.TaskStatus[None]) -> None:
            with scope:
                await watch_idle(
                    watched,
                    hours=lambda: self.hours,
                    advance=advance,
                    queue=self.queue,
                    skip=lambda s: s in self.busy,
                    now_ns=self.clock,
                    task_status=task_status,
                )

        await nursery.start(run)
        return scope


def _turn(kind: str, session: str) -> Entry:
    body = apb.TurnRecord(session=session, turn_id="t", text="hello")
    return Entry.of(kind, body.SerializeToString())


def _run(test: Callable[[_World, trio.Nursery], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = _wall()
        with Ledger.open("/ledger", fixed_signer(), fs=SimulatedFileSystem(), clock=clock) as led:
            world = _World(led, clock)
            async with trio.open_nursery() as nursery:
                await test(world, nursery)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_off_by_default_nothing_is_queued() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.turn("a")
        await w.watch(nursery)
        await trio.sleep(48 * HOUR)
        assert w.queued == []

    _run(test)


def test_an_idle_session_is_queued_once_then_again_for_new_messages_only() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.turn("a")
        w.hours = 2.0
        await w.watch(nursery)
        await trio.sleep(2 * HOUR - 60)  # not idle long enough yet
        assert w.queued == []
        await trio.sleep(120)
        assert w.queued == [("a", -1)]  # nothing covered: the whole history
        # Not queued again while its record is not there, nor once it is.
        await trio.sleep(5 * HOUR)
        through = w.distilled("a", 0)
        await trio.sleep(5 * HOUR)
        assert w.queued == [("a", -1)]
        # A new message: queued again once idle, after what was covered.
        w.turn("a")
        await trio.sleep(2 * HOUR + 600)
        assert w.queued == [("a", -1), ("a", through)]

    _run(test)


def test_a_session_with_a_turn_running_is_not_queued() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.hours = 1.0
        w.turn("open", ended=False)  # its message has no end yet
        w.turn("busy")
        w.busy.add("busy")  # a turn runs (or it is archived): the runner says so
        await w.watch(nursery)
        await trio.sleep(10 * HOUR)
        assert w.queued == []
        w.reply("open")
        w.busy.clear()
        await trio.sleep(HOUR + 600)
        assert sorted(w.queued) == [("busy", -1), ("open", -1)]

    _run(test)


def test_turning_it_on_later_takes_effect_at_the_next_recheck() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.turn("a")
        await w.watch(nursery)
        await trio.sleep(10 * HOUR)
        w.hours = 0.5  # idle 10 h already: due at the next look
        await trio.sleep(DISTILL_IDLE_RECHECK_S + 1)
        assert w.queued == [("a", -1)]

    _run(test)


def test_a_restart_queues_again_what_was_not_recorded_and_never_what_was() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.hours = 1.0
        w.turn("done")
        w.turn("cut")
        first = await w.watch(nursery)
        await trio.sleep(HOUR + 600)
        assert sorted(w.queued) == [("cut", -1), ("done", -1)]
        w.distilled("done", 0)  # "cut" was queued, its call cut by the stop
        first.cancel()
        # The next core: its fold from the ledger alone.
        w.queued.clear()
        fresh = IdleFold()
        fresh.advance(w.ledger)
        await w.watch(nursery, fresh.copy())
        await trio.sleep(600)
        assert w.queued == [("cut", -1)]

    _run(test)


def test_a_record_before_idle18_covers_what_came_before_it() -> None:
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.hours = 1.0
        w.turn("old")
        body = mmpb.MemoryDistillRecord(session="old", outcome="nothing worth remembering")
        record = w.ledger.append_many([Entry.of(DISTILL, body.SerializeToString())])[-1]
        await w.watch(nursery)
        await trio.sleep(3 * HOUR)
        assert w.queued == []
        w.turn("old")
        await trio.sleep(HOUR + 600)
        assert w.queued == [("old", record.seq)]

    _run(test)


def test_a_call_with_no_usable_answer_covers_nothing() -> None:
    # ADR 0058: its record's through_seq is COVERED_NOTHING, so the next
    # core's fold still finds the session due, after what was covered
    # before the failed call (this core does not queue it again for the
    # same message).
    async def test(w: _World, nursery: trio.Nursery) -> None:
        w.hours = 1.0
        w.turn("a")
        through = w.distilled("a", 0)
        w.turn("a")
        first = await w.watch(nursery)
        await trio.sleep(HOUR + 600)
        assert w.queued == [("a", through)]
        failed = mmpb.MemoryDistillRecord(
            session="a", outcome="the distillation call failed", through_seq=COVERED_NOTHING
        )
        w.ledger.append_many([Entry.of(DISTILL, failed.SerializeToString())])
        await trio.sleep(5 * HOUR)
        assert w.queued == [("a", through)]
        first.cancel()
        w.queued.clear()
        fresh = IdleFold()
        fresh.advance(w.ledger)
        assert fresh.covered("a") == through
        await w.watch(nursery, fresh.copy())
        await trio.sleep(600)
        assert w.queued == [("a", through)]

    _run(test)
