"""The core's keeper of the constitution: verified at start, re-verified
every ``constitution.check_s`` seconds on trio's clock; a file that no
longer matches its anchor is recorded in the ledger and stops the core
(docs/design/constitution.md)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable

import trio

from naga_core._home import Home
from naga_core.constitution._constitution import (
    Anchor,
    Check,
    check,
    effective,
    path_of,
    read_text,
    write_default,
)
from naga_core.constitution._errors import ConstitutionRefused, Reason
from naga_core.kernel import Kernel

log = logging.getLogger("naga.core")

#: In ``run/``: the last check, for ``naga audit`` (key=value lines).
STATUS_FILE = "constitution.check"


def how_to_fix(home: Home) -> str:
    path = path_of(home)
    return (
        f"restore the anchored text with `naga constitution restore` (it is kept in the blob "
        f"store), or, if you changed {path} on purpose, anchor the new text with `naga "
        f"constitution amend {path}`; both with the core stopped"
    )


class Guard:
    """Holds the verified text (what every prompt carries) and checks the file."""

    def __init__(
        self,
        home: Home,
        kernel: Kernel,
        *,
        interval_s: Callable[[], float],
        status_dir: str,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._home = home
        self._kernel = kernel
        self._interval = interval_s
        self._status_dir = status_dir
        self._clock = clock
        self.text = ""
        self.last: Check | None = None
        self.last_ns = 0
        self.checks = 0
        #: set once a check found the file changed (the core then stops, failed)
        self.tampered = False

    @property
    def anchor(self) -> Anchor:
        return effective(Anchor.of(self._kernel.state))

    def at_start(self) -> None:
        """Install the shipped default on a home's first start (the file
        missing and no amendment in the ledger); else verify the file, and
        refuse the start (after a ledger note) if it differs."""
        anchored = self.anchor
        if Anchor.of(self._kernel.state) is None and not os.path.exists(path_of(self._home)):
            write_default(self._home)
        got = check(self._home, anchored)
        self._record(got)
        if not got.ok:
            text = f"constitution check at start failed: {got.problem}"
            self._kernel.perform([], None, description=text)
            raise ConstitutionRefused(
                got.reason or Reason.MISMATCH,
                f"naga-core refuses to start: {got.problem}; {how_to_fix(self._home)}",
            )
        self.text = read_text(self._home)

    async def serve(
        self,
        on_tamper: Callable[[str], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Check every interval; on a mismatch: a ledger entry, then
        ``on_tamper(why)`` (the core stops gracefully) and return."""
        task_status.started()
        try:
            await self._watch(on_tamper)
        finally:  # the report is of a running core
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self._status_dir, STATUS_FILE))

    async def _watch(self, on_tamper: Callable[[str], None]) -> None:
        while True:
            await trio.sleep(self._interval())
            got = await trio.to_thread.run_sync(check, self._home, self.anchor)
            self._record(got)
            if got.ok:
                continue
            why = f"constitution file does not match its anchor: {got.problem}"
            log.error("naga-core: %s; stopping. To go on: %s", why, how_to_fix(self._home))
            self.tampered = True
            self._kernel.perform([], None, description=f"{why}; the core stops")
            on_tamper(why)
            return

    def _record(self, got: Check) -> None:
        self.last, self.last_ns = got, self._clock()
        self.checks += 1
        lines = [
            f"checked_ns={self.last_ns}",
            f"ok={'yes' if got.ok else 'no'}",
            f"anchor={got.anchor}",
            f"found={got.found}",
            f"interval_s={self._interval()}",
        ]
        try:  # a report for `naga audit`, never needed by the core itself
            path = os.path.join(self._status_dir, STATUS_FILE)
            with open(path + ".tmp", "w", encoding="ascii") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("naga-core: cannot write the constitution check status: %s", exc)


__all__ = ["STATUS_FILE", "Guard", "how_to_fix"]
