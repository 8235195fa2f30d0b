"""The unary calls a stopping core still owes an answer.

grpcio's graceful stop (``server.stop(grace)``) sends GOAWAY and a PING on
every connection at once, then closes each connection as soon as its last
call has sent its status. A call still running at that moment answers
*after* the GOAWAY and PING on the wire, and the connection closes right
behind its answer. A client that has not read it yet answers the PING, its
write meets the closed socket (EPIPE), grpc drops the transport with the
unread answer in it, and a write the core applied comes back UNAVAILABLE
("Stream removed (sendmsg: Broken pipe)"; seen in about 1 stop in 15 with
16 writers on a loaded box).

So the core stops in two steps. First it closes the drain: every unary call
from then on is refused before it is admitted (UNAVAILABLE with the
stopping refusal, certainly not applied) and the stop waits until each call
admitted before has terminated, which grpcio reports once the call's status
is queued on its transport. Only then does grpcio's stop start, so its
GOAWAY and PING follow every applied call's answer on the wire and a client
reads the answer first.
"""

from __future__ import annotations

import threading


class Drain:
    """Counts admitted unary calls until they terminate; thread-safe (grpcio's
    server threads enter, its callback threads leave, a stop waits)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = 0
        self._closed = False

    def enter(self) -> bool:
        """Count a new call; False once closed (the call must be refused)."""
        with self._cond:
            if self._closed:
                return False
            self._open += 1
            return True

    def leave(self) -> None:
        """A counted call terminated."""
        with self._cond:
            self._open -= 1
            if self._open == 0:
                self._cond.notify_all()

    def close(self) -> None:
        """Refuse calls from now on (on the loop, before the stop waits, so a
        call arriving after the stop began is refused for certain)."""
        with self._cond:
            self._closed = True

    @property
    def closed(self) -> bool:
        """Refusing calls: new streams are refused too (they are not counted:
        a stream may stay open for hours, grpcio's stop ends it)."""
        with self._cond:
            return self._closed

    @property
    def idle(self) -> bool:
        """No counted call is open (the stop need not wait on a thread)."""
        with self._cond:
            return self._open == 0

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the counted calls to terminate;
        False if some were still open."""
        with self._cond:
            return self._cond.wait_for(lambda: self._open == 0, timeout)


__all__ = ["Drain"]
