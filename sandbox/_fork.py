"""The thread that forks every sandboxed child its owner launches: :class:`Forker`.

A child asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, see ``sandbox._child``), so that no child outlives
its supervisor: a core killed while its executors and plugins were still
importing left them running for about half a second of CPU each, which the
next core's start paid for on a small machine (issue 13). The kernel sends
that signal when the *thread* that forked the child ends, not its process;
launches run on trio's worker threads, which end after ten idle seconds,
so the fork itself is done on one thread that lives as long as its owner
needs children: a :class:`Forker`, made and closed by the composition root
that launches them (ADR 0062) and handed to every ``launch``.

Closing a Forker ends its thread, and with it every child it forked that
still runs (the kernel's SIGKILL, as if the owner had died): the owner
closes it once its children are gone, never to stop one.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import TypeVar

from sandbox.errors import ForkerUnavailable

T = TypeVar("T")

#: The thread's name, in stack dumps and /proc/PID/task/*/comm (15 bytes).
THREAD_NAME = "sandbox-fork"


class Forker:
    """One thread that forks the children its owner launches.

    ``start`` starts the thread, ``close`` ends it (after the jobs queued
    before it) and joins it; as a context manager, both. A launch through
    a Forker not started, closed, or inherited by a forked copy of its
    owner's process (only the forking thread survives a fork: a copy makes
    a Forker of its own) raises :class:`ForkerUnavailable`.
    """

    def __init__(self) -> None:
        self._owner = os.getpid()
        self._lock = threading.Lock()
        # None is the sentinel that ends the thread.
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> Forker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """Whether launches can go through it now (started, not closed, in its owner's process)."""
        return os.getpid() == self._owner and self._thread is not None and not self._closed

    def start(self) -> Forker:
        """Start the thread (once); returns this Forker."""
        self._check_owner()
        with self._lock:
            if self._closed:
                raise ForkerUnavailable("this Forker was closed; it cannot start again")
            if self._thread is None:
                # Not a daemon: a Forker never closed keeps its process from
                # exiting, where a daemon thread would hide that it was lost.
                self._thread = threading.Thread(
                    target=self._serve, args=(self._jobs,), name=THREAD_NAME
                )
                self._thread.start()
        return self

    def close(self) -> None:
        """End the thread once the jobs queued before this ran, and join it.

        Every child it forked that still runs is SIGKILLed by the kernel as
        the thread ends. Idempotent; in a forked copy of the owner's process
        it only marks the Forker closed (the copy has no such thread).
        """
        if os.getpid() != self._owner:
            # Neither the lock (held at the fork, maybe) nor the thread is ours.
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def run(self, fork: Callable[[], T]) -> T:
        """``fork()`` (a ``subprocess.Popen``) on the fork thread; its result
        or its exception, on the caller's thread."""
        self._check_owner()
        done: Future[T] = Future()

        def job() -> None:
            try:
                done.set_result(fork())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
                done.set_exception(exc)

        with self._lock:
            # Checked and queued under the lock: a job is never queued
            # after close's sentinel, where nothing would ever run it.
            if self._closed:
                raise ForkerUnavailable("this Forker was closed: no child can be launched by it")
            thread = self._thread
            if thread is None:
                raise ForkerUnavailable("this Forker was not started: call start() or enter it")
            inline = thread is threading.current_thread()
            if not inline:
                self._jobs.put(job)
        return fork() if inline else done.result()

    def _check_owner(self) -> None:
        pid = os.getpid()
        if pid != self._owner:
            raise ForkerUnavailable(
                f"this Forker belongs to process {self._owner}; this forked copy "
                f"(pid {pid}) has no fork thread and must make a Forker of its own"
            )

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := jobs.get()) is not None:
            job()


__all__ = ["THREAD_NAME", "Forker"]
