"""Group commit for trio callers.

Appenders stage their record at once (seq and chain assigned in call order)
and wait; one committer task writes and fdatasyncs everything staged since
the last sync in a worker thread, so the event loop keeps staging the next
group while the disk works. Many appenders share one sync.

A cancelled appender's record may still be committed: cancellation only
means the caller stops waiting for the acknowledgement, never that a staged
record is pulled out of the chain.
"""

from __future__ import annotations

import trio

from naga_core.errors import LedgerClosed, LedgerFailed
from naga_core.ledger._ledger import Ledger, Receipt
from naga_core.ledger._record import Entry


class GroupCommitter:
    """Run :meth:`run` in a nursery (``await nursery.start(gc.run)``), then
    call :meth:`append` from any number of tasks."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._waiting: list[trio.Event] = []
        self._work = trio.Event()
        self._error: LedgerFailed | LedgerClosed | None = None
        self._running = False
        self.commits = 0  # number of syncs, for benchmarks and tests
        self.committed = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit until cancelled; a failed commit fails every waiter and ends
        this task with the :class:`LedgerFailed` (fatal for the core)."""
        self._running = True
        task_status.started()
        try:
            while True:
                await self._work.wait()
                self._work = trio.Event()
                waiting, self._waiting = self._waiting, []
                try:
                    size = await trio.to_thread.run_sync(self._ledger.commit)
                except (LedgerFailed, LedgerClosed) as exc:
                    self._error = exc
                    for ev in (*waiting, *self._waiting):
                        ev.set()
                    raise
                self.commits += 1
                self.committed = size
                for ev in waiting:
                    ev.set()
        finally:
            self._running = False
            if self._error is None:
                self._error = LedgerClosed("the group committer stopped")
            for ev in self._waiting:
                ev.set()

    async def append(self, entry: Entry) -> Receipt:
        """Append ``entry``; returns once it is durable (fdatasync'ed)."""
        if self._error is not None:
            raise self._error
        if not self._running:
            raise LedgerClosed("the group committer is not running")
        receipt = self._ledger.stage(entry)
        done = trio.Event()
        self._waiting.append(done)
        self._work.set()
        await done.wait()
        if self._ledger.size <= receipt.seq:
            assert self._error is not None
            raise self._error
        return receipt
