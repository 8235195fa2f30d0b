"""The call a tool runs for, and its Progress frames.

A tool that produces output step by step (a model provider relaying a
reply as the model writes it) takes its call with :func:`current_call` on
the thread the SDK runs it on, and may hand the object to another thread
(the provider's trio loop). Every Progress frame leaves before the call's
Result: :meth:`Call.progress` and the SDK's answer take the same lock, and
once the answer is going a late progress raises instead of sending (the core
would take it for a protocol violation and kill the worker).
"""

from __future__ import annotations

import contextvars
import threading

from naga.constants import PLUGIN_MAX_FRAME_BYTES
from naga.v1 import plugin_pb2 as pb
from naga_plugins._connection import Connection
from naga_plugins.errors import CallAnswered, PluginSdkError

#: Characters per Progress frame: at most 4 UTF-8 bytes each, so a piece
#: always fits a frame with room to spare.
_PIECE_CHARS = PLUGIN_MAX_FRAME_BYTES // 8


class Call:
    """One Invoke in flight, as its tool sees it."""

    def __init__(self, connection: Connection, call_id: int) -> None:
        self.call_id = call_id
        self._connection = connection
        self._lock = threading.Lock()
        self._answered = False

    def progress(self, text: str) -> None:
        """Send ``text`` as more of this call's output (the core appends
        it). Blocking; safe from any thread. Raises :class:`CallAnswered`
        once the call's answer is on its way."""
        for start in range(0, len(text), _PIECE_CHARS):
            piece = text[start : start + _PIECE_CHARS]
            with self._lock:
                if self._answered:
                    raise CallAnswered(
                        f"call {self.call_id} is already answered; its progress must come first"
                    )
                self._connection.send(
                    pb.PluginToCore(progress=pb.Progress(call_id=self.call_id, text=piece))
                )

    def answer(self, frame: pb.PluginToCore) -> None:
        """Send the call's one answer; no progress follows it."""
        with self._lock:
            self._answered = True
            self._connection.send(frame)


_CURRENT: contextvars.ContextVar[Call] = contextvars.ContextVar("naga_plugins_call")


def current_call() -> Call:
    """The call the calling tool runs for (only inside a tool, on its thread)."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise PluginSdkError("current_call() is only available inside a running tool") from None


def running(call: Call) -> contextvars.Token[Call]:
    return _CURRENT.set(call)


def done(token: contextvars.Token[Call]) -> None:
    _CURRENT.reset(token)


__all__ = ["Call", "current_call", "done", "running"]
