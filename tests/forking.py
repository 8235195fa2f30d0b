"""Real child processes for crash tests: fork, let the child report on a
pipe, SIGKILL it at a chosen moment, collect what it reported.

Children are forked by a fork server (multiprocessing's ``forkserver``), not
by the test process itself: an xdist worker has run other tests before and
holds their threads (gRPC's pollers, trio's thread cache), and a fork from a
threaded process copies locks held by threads that do not exist in the
child, which then hangs on them. The fork server is a fresh single-threaded
interpreter that has imported the children's modules once, so a fork is
still cheap (a thousand kills per test)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

_CONTEXT = multiprocessing.get_context("forkserver")


def _run(body: Callable[..., None], args: tuple[Any, ...], writer: Connection) -> None:
    code = 0
    try:
        body(*args, writer.fileno())
    except BaseException:  # noqa: BLE001 - the child's end is its exit code, read by the test
        code = 1
    finally:
        os._exit(code)


class Child:
    """A child running ``body(*args, write_fd)``: ``body`` is a module-level
    function of a module in ``preload`` (imported once by the fork server)
    and ``args`` are picklable."""

    def __init__(
        self,
        body: Callable[..., None],
        *args: Any,
        preload: Sequence[str] = (),
    ) -> None:
        # "__main__" (pytest's script) too: otherwise every child imports it again.
        _CONTEXT.set_forkserver_preload(["__main__", body.__module__, *preload])
        reader, writer = _CONTEXT.Pipe(duplex=False)
        self._process = _CONTEXT.Process(target=_run, args=(body, args, writer), daemon=True)
        self._process.start()
        writer.close()
        assert self._process.pid is not None
        self.pid = self._process.pid
        self._reader = reader
        self.output = b""

    def read_at_least(self, n: int) -> bytes:
        """Block until the child wrote ``n`` bytes (or closed its end).
        Progress is signalled, not guessed: a loaded machine starts it late."""
        fd = self._reader.fileno()
        while len(self.output) < n:
            chunk = os.read(fd, n - len(self.output))
            if not chunk:
                break
            self.output += chunk
        return self.output

    def kill(self) -> int:
        """SIGKILL, reap, drain the pipe; the signal that ended the child
        (0 if it exited on its own)."""
        os.kill(self.pid, signal.SIGKILL)
        self._process.join()
        fd = self._reader.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.output += chunk
        self._reader.close()
        code = self._process.exitcode
        assert code is not None
        self._process.close()
        return -code if code < 0 else 0
