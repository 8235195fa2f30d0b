"""What every servicer shares: the ledger, the kernel and its state
families, the core's lifecycle. Lives on the trio thread; the bridge is the
only way in from a server thread."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from naga_core._home import Home
from naga_core.authz import Token, TokenAuthority, stage_minted
from naga_core.daemon._errors import CoreStopping
from naga_core.daemon._standing import TrustWatch
from naga_core.errors import NagaError
from naga_core.kernel import Kernel, Settings, TrustTable
from naga_core.ledger import Ledger

log = logging.getLogger("naga.core")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoreInfo:
    """What a started core reports to whoever started it."""

    home: str
    socket: str
    pid: int
    started_ns: int
    #: The WebChat console, when the core's gateway came up ("" otherwise).
    webchat_url: str = ""


class Core:
    """The core's state for the handlers; every method runs on the trio thread."""

    def __init__(self, *, home: Home, socket: str, ledger: Ledger, kernel: Kernel) -> None:
        self.home = home
        self.socket = socket
        self.ledger = ledger
        self.kernel = kernel
        self.settings = Settings(kernel)
        self.trust = TrustTable(kernel)
        #: Wakes open streams after a write that changed the trust table
        #: (whoever wrote it: the owner, the violation policy, a rollback).
        self.trust_watch = TrustWatch.over_kernel(kernel)
        self.pid = os.getpid()
        self.started_ns = time.time_ns()
        self.stopping = trio.Event()
        self.stop_reason = ""
        self.failure: NagaError | None = None
        self._appended = trio.Event()
        # The core's token authority, once the composition root built it.
        self.authority: TokenAuthority | None = None
        self.webchat_url = ""
        self._rollback_hooks: list[Callable[[], None]] = []

    @property
    def info(self) -> CoreInfo:
        return CoreInfo(self.home.root, self.socket, self.pid, self.started_ns, self.webchat_url)

    def write(self, fn: Callable[[], T]) -> T:
        """Run a kernel write, staged: the bridge calls :meth:`settle` on
        the server thread before the response leaves (group commit)."""
        if self.failure is not None:
            raise CoreStopping(f"naga-core is stopping after a ledger failure: {self.failure}")
        before = self.ledger.size
        try:
            with self.kernel.staged():
                return fn()
        finally:
            if self.ledger.size != before:  # something committed on this thread
                self.notify_appended()
            # In the write's own loop step: a stream of a principal whose
            # trust it lowered never sends the record that lowered it.
            self.trust_watch.notice()

    async def minted(self, token: Token, by: str) -> None:
        """Record that the core minted ``token`` for ``by`` (a ``token.minted``
        record, never the token) and make it durable, off the loop, before
        the caller hands the token out."""
        self.write(lambda: stage_minted(self.ledger, token, by=by))
        if await trio.to_thread.run_sync(self.settle):
            self.notify_appended()

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` after every rollback, inside the rollback's write (so
        what it journals is settled with it): state derived from the kernel
        (the plugins' workers) converges on what the rollback restored."""
        self._rollback_hooks.append(hook)

    def rolled_back(self) -> None:
        for hook in self._rollback_hooks:
            try:
                hook()
            except NagaError:  # the rollback stands; what did not follow is logged
                log.exception("naga-core: after a rollback")

    def settle(self) -> bool:
        """On a server thread, after a call's loop part and before its response:
        make every staged record durable. Concurrent callers share one
        fdatasync: whoever syncs first syncs the others' records too.
        True if the durable size grew (the bridge then wakes subscribers)."""
        if self.ledger.next_seq == self.ledger.size:
            return False
        before = self.ledger.size
        return self.ledger.commit() > before

    def notify_appended(self) -> None:
        """Wake the subscribers waiting for new durable records."""
        self._appended.set()
        self._appended = trio.Event()

    async def wait_past(self, size: int) -> None:
        """Return once the ledger holds more than ``size`` records, or the core stops."""
        while self.ledger.size <= size and not self.stopping.is_set():
            await self._appended.wait()

    def request_stop(self, reason: str) -> None:
        if not self.stopping.is_set():
            log.info("naga-core stopping: %s", reason)
            self.stop_reason = reason
            self.stopping.set()
            self._appended.set()  # waiting subscribers see the stop

    def fail(self, exc: NagaError) -> None:
        """The ledger cannot go on (a failed write or sync): stop; the next
        start recovers from what is on disk."""
        if self.failure is None:
            self.failure = exc
            log.error("naga-core: fatal ledger error: %s", exc)
        self.request_stop(f"fatal: {exc}")


__all__ = ["Core", "CoreInfo"]
