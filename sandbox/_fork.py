"""One long-lived thread forks every sandboxed child of a process.

A child asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, see ``sandbox._child``), so that no child outlives
its supervisor: a core killed while its executors and plugins were still
importing left them running for about half a second of CPU each, which the
next core's start paid for on a small machine (issue 13). The kernel sends
that signal when the *thread* that forked the child ends, not its process;
launches run on trio's worker threads, which end after ten idle seconds,
so the fork itself is done here, on a daemon thread that lives as long as
the process (a forked copy of the process starts its own).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class _Forker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def forget(self) -> None:
        """In a forked copy of the process: only the forking thread survives
        a fork, so the copy starts a fork thread of its own (and the lock,
        which another thread may have held at the fork, is a new one)."""
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._thread = None

    def run(self, fork: Callable[[], T]) -> T:
        """``fork()`` on the fork thread; its result or its exception."""
        thread = self._started()
        if threading.current_thread() is thread:
            return fork()
        done: Future[T] = Future()

        def job() -> None:
            try:
                done.set_result(fork())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
                done.set_exception(exc)

        self._jobs.put(job)
        return done.result()

    def _started(self) -> threading.Thread:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, args=(self._jobs,), name="sandbox-fork", daemon=True
                )
                self._thread.start()
            return self._thread

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            jobs.get()()


_FORKER = _Forker()
os.register_at_fork(after_in_child=_FORKER.forget)


def in_fork_thread(fork: Callable[[], T]) -> T:
    """Run ``fork`` (a ``subprocess.Popen``) on the process's fork thread."""
    return _FORKER.run(fork)


__all__ = ["in_fork_thread"]
