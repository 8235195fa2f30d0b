"""A thread started while the target is imported, before the seccomp filter
loads (target ``tests.sandbox._early_thread:run``). With TSYNC the filter
covers it too; without, it would be the sandbox's way out.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Callable

_go = threading.Event()
_outcomes: list[str] = []


def _attempt() -> None:
    _go.wait()
    steps: tuple[Callable[[], object], ...] = (
        lambda: os.memfd_create("payload"),
        lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
    )
    for step in steps:
        try:
            step()
        except OSError as e:
            _outcomes.append(errno.errorcode.get(e.errno or 0, str(e.errno)))
        else:
            _outcomes.append("ESCAPED")


#: Started at import time, i.e. before the launcher loads the filter.
EARLY = threading.Thread(target=_attempt, name="early")
EARLY.start()
STARTED_BEFORE_FILTER = EARLY.native_id


def run(args: list[str]) -> int:
    (report_fd,) = args
    _go.set()
    EARLY.join()
    os.write(int(report_fd), ",".join(_outcomes).encode() + b"\n")
    return 0
