"""A virtual clock for the adapters' retry loop: sleeps cost no real time
and are recorded, so a test can assert the waits it asked for."""

from __future__ import annotations

import trio


class VirtualClock:
    """``now()`` starts at 0 and moves only by :meth:`sleep`."""

    def __init__(self) -> None:
        self.time = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds
        await trio.lowlevel.checkpoint()
