"""An incremental decoder for server-sent events (the WHATWG format both
providers stream in).

Bytes arrive in whatever pieces TCP and the server chose; the decoder keeps
an incomplete line until the rest arrives, so the events it returns do not
depend on where the pieces were cut (a property test checks this).
"""

from __future__ import annotations

import attrs

#: Longest line kept while waiting for its end; a provider streaming a
#: longer one is broken or hostile.
MAX_LINE_BYTES = 4 << 20


class SseError(Exception):
    """The byte stream is not server-sent events; the message says why."""


@attrs.frozen
class SseEvent:
    """One dispatched event: its ``event:`` name ("" if none) and its data
    lines joined with newlines."""

    event: str
    data: str


class SseDecoder:
    """Feed bytes, get complete events."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._event = ""
        self._data: list[str] = []
        self._line_number = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += chunk
        events: list[SseEvent] = []
        start = 0
        buffer = self._buffer
        while True:
            cr = buffer.find(b"\r", start)
            lf = buffer.find(b"\n", start)
            if cr == -1 and lf == -1:
                break
            if cr != -1 and (lf == -1 or cr < lf):
                if cr + 1 == len(buffer):
                    break  # a CR at the end may be the first half of CRLF
                end, after = cr, cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
            else:
                end, after = lf, lf + 1
            event = self._line(bytes(buffer[start:end]))
            if event is not None:
                events.append(event)
            start = after
        del buffer[:start]
        if len(buffer) > MAX_LINE_BYTES:
            raise SseError(f"a line longer than {MAX_LINE_BYTES} bytes without an end")
        return events

    @property
    def pending(self) -> bool:
        """True while part of an event has arrived but not its end."""
        return bool(self._buffer) or bool(self._data) or bool(self._event)

    def _line(self, raw: bytes) -> SseEvent | None:
        self._line_number += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SseError(f"line {self._line_number} is not UTF-8 ({exc.reason})") from None
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SseEvent(self._event, "\n".join(self._data))
            self._event = ""
            self._data = []
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" only matter to a reconnecting browser.
        return None
