"""The idle-time curator (skills.curate_every_h), on trio's virtual clock:
nothing while off or while a turn runs; once due and idle, one curation,
its actions effects like the command's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
import trio.testing

from naga_core.kernel import Settings
from naga_core.skills import Library, curate_when_idle
from naga_core.skills._schedule import IDLE_POLL_S, RECHECK_S
from tests.skills.helpers import open_store, skill_files

DAY = 86_400 * 1_000_000_000


def test_the_schedule_curates_only_when_due_and_idle(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        desc = "An old trick. Use when a task needs the old trick."
        ref = store.create(
            "global", skill_files("old-trick", desc, "x\n"), author="owner", reason="t"
        )
        now = store.version(ref.commit).commit.time_ns + 40 * DAY
        library = Library(store, clock=lambda: now)
        settings = Settings(store.kernel)
        busy = [True]

        def write(fn: Callable[[], int]) -> int:
            return fn()

        async def settle() -> None:
            store.kernel.ledger.commit()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    curate_when_idle,
                    library,
                    settings,
                    write,
                    settle,
                    lambda: not busy[0],
                )
                await trio.sleep(RECHECK_S * 3)  # off (0 hours): nothing
                assert not store.need("global", "old-trick").archived
                settings.set("skills.curate_every_h", 1)
                await trio.sleep(RECHECK_S + 3600 + 1)  # due, but a turn runs
                assert not store.need("global", "old-trick").archived
                busy[0] = False
                await trio.sleep(IDLE_POLL_S + 1)
                got = store.need("global", "old-trick")
                assert got.archived
                nursery.cancel_scope.cancel()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
