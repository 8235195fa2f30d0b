"""The sandboxed side of the embedded local model server.

The core launches a target of this package in the ``model_server`` sandbox
profile (``sandbox.Profile.model_server``) with the argument list
``[LIFELINE_FD, LISTEN_FD, GRACE_S, *server_args]``:

* ``LIFELINE_FD``: the read end of a pipe whose write end only the core
  holds. It reads end-of-file when the core is gone, however it went (a
  core killed outright cannot stop its children), and the server then stops:
  SIGTERM to itself, SIGKILL after ``GRACE_S`` seconds. Not a pidfd, which
  the seccomp filter does not allow. Every sandboxed child also asks the
  kernel for SIGKILL when its launcher dies (``PR_SET_PDEATHSIG``, which
  follows the forking *thread*: the core's ``sandbox.Forker`` forks from
  one thread that lives as long as the core serves), so a core killed
  outright takes its server with it at once; the pipe is the graceful stop.
* ``LISTEN_FD``: a TCP socket the core bound on loopback and put in listen
  mode. The server accepts on it and has no network of its own: it runs in
  a private network namespace and may not create a TCP socket at all.

:func:`serve` does that plumbing for a function that serves HTTP on the
socket; ``naga_plugins.localmodel.llama:main`` is the real server. This
package never imports ``naga_core``.
"""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from naga_plugins.localmodel.errors import BadServerArguments, LocalModelServerError

#: A server: given the listening socket and the remaining arguments, it
#: serves until asked to stop and returns the exit code.
Server = Callable[[socket.socket, list[str]], int]


def _descriptor(raw: str, what: str) -> int:
    if not raw.isdigit() or int(raw) < 3:
        raise BadServerArguments(f"{what} must be a descriptor number >= 3, got {raw!r}")
    return int(raw)


def _grace(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise BadServerArguments(f"the stop grace must be seconds in 0..3600, got {raw!r}")
    return value


def _watch_lifeline(fd: int, grace_s: float) -> None:
    # Nothing is ever written: readable means end-of-file, the core is gone.
    select.select([fd], [], [])
    os.kill(os.getpid(), signal.SIGTERM)
    # The grace period is the point: SIGTERM lets uvicorn stop cleanly.
    time.sleep(grace_s)
    os.kill(os.getpid(), signal.SIGKILL)


def serve(args: list[str], server: Server) -> int:
    """Parse ``[LIFELINE_FD, LISTEN_FD, GRACE_S, *rest]``, watch the lifeline
    and run ``server(listening_socket, rest)``."""
    if len(args) < 3:
        raise BadServerArguments(
            f"expected LIFELINE_FD LISTEN_FD GRACE_S [server arguments], got {args!r}"
        )
    lifeline = _descriptor(args[0], "LIFELINE_FD")
    listen_fd = _descriptor(args[1], "LISTEN_FD")
    grace_s = _grace(args[2])
    try:
        listener = socket.socket(fileno=listen_fd)
    except OSError as e:
        raise BadServerArguments(f"LISTEN_FD {listen_fd} is not a socket: {e}") from e
    if listener.type != socket.SOCK_STREAM:
        listener.detach()  # not ours to close
        raise BadServerArguments(f"LISTEN_FD {listen_fd} is not a stream socket")
    # The log is a file: without line buffering a crash would lose its end.
    stdout: object = sys.stdout
    if isinstance(stdout, io.TextIOWrapper):
        stdout.reconfigure(line_buffering=True)
    watch = threading.Thread(
        target=_watch_lifeline, args=(lifeline, grace_s), name="naga-lifeline", daemon=True
    )
    watch.start()
    return server(listener, args[3:])


__all__ = ["BadServerArguments", "LocalModelServerError", "Server", "serve"]
