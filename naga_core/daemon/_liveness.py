"""What the systemd watchdog asks before each ping (naga_core._sdnotify):
does the core make progress, not merely run its loop?

* the ledger writer: a commit can start within the budget (a write or an
  fdatasync that never returns holds the writer, and every acknowledgement
  waits behind it);
* the supervisor: the tasks that own the plugin workers and the executors
  still serve (their nurseries have not ended), and the trio loop itself
  answers (this check runs on it).

A stalled part stops the pings; systemd restarts the core after
``WatchdogSec`` (deploy/systemd), and the log and ``STATUS=`` say why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from naga_core.ledger import Ledger


class Liveness:
    """The progress probe of one core."""

    def __init__(self, ledger: Ledger, *, stopping: Callable[[], bool]) -> None:
        self._ledger = ledger
        self._stopping = stopping
        #: the supervisors that no longer serve (while the core is not stopping)
        self.ended: list[str] = []

    async def watched(
        self,
        name: str,
        serve: Callable[..., Awaitable[object]],
        *args: object,
        task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run a supervisor's ``serve(*args, task_status=...)``; once it ends
        (whyever), the watchdog stops pinging."""
        try:
            await serve(*args, task_status=task_status)
        finally:
            self.ended.append(name)

    async def __call__(self, budget_s: float) -> str | None:
        if self._stopping():
            return None  # a graceful stop ends them on purpose
        ended = self.ended
        if ended:
            return f"the supervisor of {', '.join(ended)} no longer serves"
        free = await trio.to_thread.run_sync(self._ledger.writer_free_within, budget_s)
        if not free:
            return f"the ledger writer has not finished a commit within {budget_s:.1f} s"
        return None


__all__ = ["Liveness"]
