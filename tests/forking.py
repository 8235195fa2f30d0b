"""Real child processes for crash tests: fork, let the child report on a
pipe, SIGKILL it at a chosen moment, collect what it reported."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable


class Child:
    """A forked child running ``body(write_fd)``; it never returns into pytest."""

    def __init__(self, body: Callable[[int], None]) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            code = 0
            try:
                os.close(r)
                body(w)
            except BaseException:  # noqa: BLE001 - the child must never return into pytest
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self._r = r
        self.output = b""

    def read_at_least(self, n: int) -> bytes:
        """Block until the child wrote ``n`` bytes (or closed its end).
        Progress is signalled, not guessed: a loaded machine starts it late."""
        while len(self.output) < n:
            chunk = os.read(self._r, n - len(self.output))
            if not chunk:
                break
            self.output += chunk
        return self.output

    def kill(self) -> int:
        """SIGKILL, reap, drain the pipe; the wait status."""
        os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        while chunk := os.read(self._r, 1 << 16):
            self.output += chunk
        os.close(self._r)
        return status
