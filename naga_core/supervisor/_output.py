"""A sandboxed child's stdout and stderr, read by the core and written to its
log by the core: :func:`pump_output`.

A child never holds a descriptor of the core's log (it could seek, truncate
or clear O_APPEND on it and rewrite what the core wrote); it writes into a
pipe, and the core copies what arrives, a line at a time, each under the
child's name, so no line of the log can be forged as the core's. Lines are
bounded (longer ones are cut), control characters are escaped, and the rate
is limited (a token bucket; lines past it are counted and the count logged
when the bucket refills), so a chatty or hostile child costs the core's log
and loop a bounded amount.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

_READ_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class OutputLimits:
    #: Characters of one line kept; the rest of it is dropped.
    line_chars: int = 1000
    #: Lines a second, on average, written to the log.
    lines_per_s: float = 20.0
    #: Lines that may come at once before the rate applies.
    burst: int = 200


def _printable(raw: bytes, limit: int) -> str:
    text = raw.decode("utf-8", "replace")
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    # No ESC, CR or other control character reaches the log (or a terminal showing it).
    return "".join(c if c.isprintable() or c == "\t" else f"\\x{ord(c):02x}" for c in text)


class _Bucket:
    def __init__(self, limits: OutputLimits) -> None:
        self._rate = limits.lines_per_s
        self._burst = float(limits.burst)
        self._tokens = float(limits.burst)
        self._at = trio.current_time()
        self.dropped = 0

    def take(self) -> bool:
        now = trio.current_time()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.dropped += 1
        return False


async def pump_output(
    stream: trio.abc.ReceiveStream,
    name: str,
    log: logging.Logger,
    limits: OutputLimits | None = None,
) -> None:
    """Copy ``stream`` (the read end of a child's output pipe) into ``log``,
    each line as ``"<name>: <line>"``, until end of file."""
    limits = limits or OutputLimits()
    bucket = _Bucket(limits)
    pending = b""
    cap = 4 * limits.line_chars + 4  # bytes kept of a line still open

    def emit(raw: bytes) -> None:
        if not bucket.take():
            return
        if bucket.dropped:
            log.warning(
                "%s: %d lines dropped (more than %g lines a second)",
                name,
                bucket.dropped,
                limits.lines_per_s,
            )
            bucket.dropped = 0
        log.info("%s: %s", name, _printable(raw, limits.line_chars))

    async with stream:
        while True:
            try:
                data = await stream.receive_some(_READ_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not data:
                break
            *lines, rest = (pending + data).split(b"\n")
            for line in lines:
                emit(line)
            pending = rest[:cap]
            await trio.lowlevel.checkpoint()
    if pending:
        emit(pending)
    if bucket.dropped:
        log.warning("%s: %d lines dropped at its end", name, bucket.dropped)


__all__ = ["OutputLimits", "pump_output"]
