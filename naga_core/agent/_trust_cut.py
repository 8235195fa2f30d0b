"""A running turn holds its token's standing (INV-6): lowering the trust of
the turn's peer below what the turn was minted at, revoking the token, or
its expiry ends the turn at once, whatever it is doing (waiting for the
model, streaming, calling a tool). The watch waits on the same wake-ups as
an open stream (docs/design/authz.md, "Open streams"): nothing polls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import trio

from naga_core.agent._core import Standing
from naga_core.agent._turn import Running
from naga_core.authz import TokenRejected, TrustLowered


class TurnCut:
    """Why a turn was cut ("" while it was not). Build one per turn."""

    def __init__(self) -> None:
        self.reason = ""

    @contextlib.contextmanager
    def watching(
        self, nursery: trio.Nursery, running: Running, standing: Standing
    ) -> Generator[None]:
        """While inside: a fall of ``standing`` aborts ``running`` (its
        scope cancelled, :attr:`reason` saying why). The watch runs in
        ``nursery`` (the agent's), not around the turn, so that what the
        turn raises reaches its handlers as it is."""
        done = trio.CancelScope()
        nursery.start_soon(self._watch, done, running, standing)
        try:
            yield
        finally:
            done.cancel()

    async def _watch(self, done: trio.CancelScope, running: Running, standing: Standing) -> None:
        with done:
            await self._until_cut(running, standing)

    async def _until_cut(self, running: Running, standing: Standing) -> None:
        while True:
            with (
                trio.CancelScope(deadline=standing.deadline()) as wait,
                standing.waking(wait),
            ):
                await trio.sleep_forever()
            try:
                standing.check()
            except (TokenRejected, TrustLowered) as exc:
                self.reason = f"the turn was cut: {exc}"
                running.aborted = True
                running.scope.cancel()
                return


__all__ = ["TurnCut"]
