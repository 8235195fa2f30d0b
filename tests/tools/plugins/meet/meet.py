"""``meet.wait {group, parties, timeout_s}``: answers ``met: true`` once
``parties`` calls of ``group`` have arrived, or ``met: false`` when it waited
``timeout_s`` for them. Two calls run one after the other can never meet:
the first one's answer comes before the second arrives.

``meet.rank {group, rank, timeout_s}``: answers once ``rank`` calls of
``group`` have finished (``finished_before``: how many had; less than
``rank`` when it gave up), so a step's calls finish in the order of their
ranks, whatever order they were asked in."""

from __future__ import annotations

import threading

from naga_plugins import Plugin


def build() -> Plugin:
    plugin = Plugin("meet")
    changed = threading.Condition()
    arrived: dict[str, int] = {}

    @plugin.tool("meet.wait")
    def wait(  # pyright: ignore[reportUnusedFunction]
        group: str, parties: int, timeout_s: float
    ) -> dict[str, object]:
        with changed:
            arrived[group] = arrived.get(group, 0) + 1
            changed.notify_all()
            met = changed.wait_for(lambda: arrived[group] >= parties, timeout=timeout_s)
            return {"group": group, "met": met, "arrived": arrived[group]}

    finished: dict[str, int] = {}

    @plugin.tool("meet.rank")
    def rank(  # pyright: ignore[reportUnusedFunction]
        group: str, rank: int, timeout_s: float
    ) -> dict[str, object]:
        with changed:
            ready = changed.wait_for(lambda: finished.get(group, 0) >= rank, timeout=timeout_s)
            before = finished.get(group, 0)
            finished[group] = before + 1
            changed.notify_all()
            return {"group": group, "rank": rank, "in_time": ready, "finished_before": before}

    return plugin


main = build().main
