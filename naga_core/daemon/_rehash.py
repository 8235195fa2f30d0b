"""The core's background rehash of its sealed segments (ADR 0057, ADR 0061).

The start opens the ledger without hashing the sealed segments (ADR 0057);
once the core serves, this rehashes them against their signed seals, and a
file whose bytes no longer match is noted in the ledger and stops the core
failed (as on a failed write; ``naga ledger verify`` names the file). What
it costs is bounded:

* the CPU: it runs on a thread of its own (never one of trio's pool, which
  runs the turns' reads) whose nice value is ``REHASH_NICE``, reading a
  chunk at a time at most ``REHASH_BYTES_PER_S``; between chunks it checks
  whether the core stops. A long one says how far it is every
  ``REHASH_PROGRESS_S`` in the log;
* the repetition: ``ledger/sealed-verified.json`` (naga_core.daemon._verified)
  names the segments verified and when; only those due are rehashed, at
  the start and at each later look (when the next one comes due, at least
  daily), so a core that runs for months re-verifies too.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from naga.constants import (
    REHASH_BYTES_PER_S,
    REHASH_LOOK_MAX_S,
    REHASH_LOOK_MIN_S,
    REHASH_NICE,
    REHASH_PROGRESS_S,
    VERIFIED_FILE,
)
from naga_core.daemon._trim import trim_heap
from naga_core.daemon._verified import VerifiedList
from naga_core.errors import LedgerCorrupt, NagaError
from naga_core.ledger import Ledger

log = logging.getLogger("naga.core")

_MB = 1 << 20


@dataclass(slots=True)
class RehashReport:
    """One pass: the segments rehashed (in order), how many were skipped as
    verified within their interval, the bytes read, the damage found and
    why the verified list was not used (None: it was, or there was none)."""

    hashed: list[str] = field(default_factory=list[str])
    skipped: int = 0
    bytes: int = 0
    found: list[LedgerCorrupt] = field(default_factory=list[LedgerCorrupt])
    problem: str | None = None
    #: the pass was cut short by the core's stop
    stopped: bool = False


class RehashWatch(Protocol):
    """Told what the rehash does (tests hold it and count with it)."""

    def chunk(self, segment: str) -> None:
        """Before each chunk of ``segment`` is read, on the rehash's thread."""
        ...

    def done(self, report: RehashReport) -> None:
        """After each pass, on the trio thread."""
        ...


@dataclass(frozen=True, slots=True)
class RehashOptions:
    """How the rehash paces itself (the defaults: naga.constants)."""

    bytes_per_s: int = REHASH_BYTES_PER_S
    nice: int = REHASH_NICE
    progress_s: float = REHASH_PROGRESS_S
    watch: RehashWatch | None = None


class _Stopped(Exception):
    """The core stops: the pass ends at the chunk it was at."""


class _Pace:
    """Called before each chunk (on the rehash's thread): stops, waits for
    the rate cap, logs progress."""

    def __init__(self, options: RehashOptions, stop: threading.Event, total: int, n: int) -> None:
        self._options = options
        self._stop = stop
        self._total, self._segments = total, n
        self._t0 = self._line = time.monotonic()
        self.read = 0
        self.segment = ""
        self.index = 0

    def __call__(self, n: int) -> None:
        if self._stop.is_set():
            raise _Stopped
        watch = self._options.watch
        if watch is not None:
            watch.chunk(self.segment)
        now = time.monotonic()
        ahead = self.read / self._options.bytes_per_s - (now - self._t0)
        if ahead > 0 and self._stop.wait(ahead):
            raise _Stopped
        self.read += n
        if now - self._line >= self._options.progress_s:
            self._line = now
            log.info(
                "naga-core: rehashing the sealed segments: %d of %d MB, segment %d of %d",
                self.read // _MB,
                self._total // _MB,
                self.index + 1,
                self._segments,
            )


def lower_priority(nice: int) -> bool:
    """Give the calling thread the nice value ``nice`` (Linux: per thread);
    whether it now has it at least. An unprivileged thread can never raise
    its priority back: only for a thread of its own."""
    try:
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid) >= nice
    except (OSError, AttributeError):  # not Linux: the rate cap still bounds it
        return False


def rehash_pass(
    ledger: Ledger,
    path: str,
    *,
    now_ns: int,
    days: int,
    options: RehashOptions,
    stop: threading.Event,
) -> RehashReport:
    """Rehash the sealed segments due (on the rehash's thread); the
    verified list is written after each one that matched."""
    verified, problem = VerifiedList.load(path)
    if problem is not None:
        log.warning(
            "naga-core: %s is %s: every sealed segment is verified again",
            VERIFIED_FILE,
            problem,
        )
    seals = ledger.seals()
    due = verified.due(seals, now_ns, days)
    report = RehashReport(skipped=len(seals) - len(due), problem=problem)
    total = sum(s.bytes for s in due)
    pace = _Pace(options, stop, total, len(due))
    if due:
        log.info(
            "naga-core: rehashing %d sealed segments (%d MB); %d verified within "
            "ledger.reverify_days are not due",
            len(due),
            total // _MB,
            report.skipped,
        )
    verified.keep_only(seals)
    t0 = time.monotonic()
    for i, seal in enumerate(due):
        pace.segment, pace.index = seal.segment, i
        try:
            found = ledger.check_seal(seal, pace=pace)
        except _Stopped:
            report.stopped = True
            break
        report.hashed.append(seal.segment)
        if found:
            report.found += found
            continue
        verified.mark(seal, now_ns)
        if not stop.is_set():
            _save(verified)
    report.bytes = pace.read
    if due:
        log.info(
            "naga-core: rehashed %d sealed segments (%d MB) in %.1f s%s",
            len(report.hashed),
            report.bytes // _MB,
            time.monotonic() - t0,
            ", cut short by the stop" if report.stopped else "",
        )
    return report


def _pass_with_stop(
    ledger: Ledger,
    path: str,
    stop: threading.Event,
    *,
    now_ns: int,
    days: int,
    options: RehashOptions,
) -> RehashReport:
    return rehash_pass(ledger, path, now_ns=now_ns, days=days, options=options, stop=stop)


def _save(verified: VerifiedList) -> None:
    try:
        verified.save()
    except OSError as exc:  # the next pass verifies again: nothing is lost but time
        log.warning("naga-core: cannot write %s: %s", verified.path, exc)


async def _on_own_thread(
    work: Callable[[threading.Event], RehashReport], nice: int
) -> RehashReport:
    """``work(stop)`` on a new thread at ``nice``; a cancelled caller sets
    ``stop`` and does not wait (the thread ends at its next chunk)."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    stop = threading.Event()
    result: list[RehashReport] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            lower_priority(nice)
            result.append(work(stop))
        except BaseException as exc:  # noqa: BLE001 - handed to the trio task, raised there
            failed.append(exc)
        finally:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

    threading.Thread(target=run, name="naga-rehash", daemon=True).start()
    try:
        await done.wait()
    finally:
        stop.set()
    if failed:
        raise failed[0]
    return result[0]


async def serve_rehash(
    ledger: Ledger,
    ledger_dir: str,
    *,
    days: Callable[[], int],
    clock: Callable[[], int],
    note: Callable[[str], Awaitable[object]],
    fail: Callable[[NagaError], None],
    options: RehashOptions,
) -> None:
    """Rehash what is due now, then again whenever the next segment comes
    due (at most every ``REHASH_LOOK_MIN_S``, at least every
    ``REHASH_LOOK_MAX_S``), until the core stops or damage is found: then
    the ledger note, and ``fail``."""
    path = os.path.join(ledger_dir, VERIFIED_FILE)
    while True:
        n, now = days(), clock()
        try:
            work = functools.partial(
                _pass_with_stop, ledger, path, now_ns=now, days=n, options=options
            )
            report = await _on_own_thread(work, options.nice)
        except NagaError as exc:
            log.warning("naga-core: the sealed segments could not be rehashed: %s", exc)
            return
        if report.hashed:
            trim_heap()  # what the thread's reads left in its arena
        if options.watch is not None:
            options.watch.done(report)
        if report.found:
            why = "sealed ledger files do not match their seals: " + "; ".join(
                f"{e.path}: {e.reason}" for e in report.found
            )
            await note(why[:1000])
            first = report.found[0]
            fail(LedgerCorrupt(first.path, None, f"{first.reason} (run `naga ledger verify`)"))
            return
        verified, _ = VerifiedList.load(path)
        n = days()
        nxt = verified.next_due_ns(ledger.seals(), n) if n > 0 else None
        wait = REHASH_LOOK_MAX_S if nxt is None else (nxt - clock()) / 1e9
        await trio.sleep(min(max(wait, REHASH_LOOK_MIN_S), REHASH_LOOK_MAX_S))


__all__ = [
    "RehashOptions",
    "RehashReport",
    "RehashWatch",
    "lower_priority",
    "rehash_pass",
    "serve_rehash",
]
