"""A job's schedule: a five-field cron expression read in an IANA time zone
(docs/design/scheduler.md, "Time"; docs/adr/0020-sched-cron-library.md).

Parsing and iteration are cronsim's (pinned); this module only turns its
local datetimes into instants (Unix ns) and keeps them strictly increasing.
Daylight saving follows cronsim's Debian-cron rules for fixed-time
expressions: a time inside a spring gap fires once at the first valid
instant after it (02:30 on the night New York skips 02:00-03:00 fires at
03:00), a time inside an autumn repeat fires once, at its first occurrence.
For expressions with a wildcard minute or hour, a local time that maps to
an instant already passed (the repeated hour's second half) is skipped, so
no instant ever fires twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from naga_core.scheduler._errors import InvalidSchedule

#: Five fields only: a seconds field would let one job fire every second.
FIELDS = 5
MAX_CRON_CHARS = 120
MAX_TZ_CHARS = 64
_TZ = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}")
#: cronsim steps a local datetime; an expression that matches nothing for
#: this many candidates in a row (all before the instant asked) is broken.
_MAX_STEPS = 10_000
_NS = 1_000_000_000


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; :class:`InvalidSchedule` naming it if unknown."""
    if not name or len(name) > MAX_TZ_CHARS or not _TZ.fullmatch(name):
        raise InvalidSchedule(f"time zone {name!r} is not an IANA zone name (like Europe/Paris)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"time zone {name!r} is not known (an IANA name like America/New_York)"
        ) from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A checked cron expression in a zone. Build with :meth:`parse`."""

    cron: str
    tz: str
    _zone: ZoneInfo

    @classmethod
    def parse(cls, cron: str, tz: str = "UTC") -> Schedule:
        """Check ``cron`` (five fields) and ``tz``; :class:`InvalidSchedule`
        saying what is wrong."""
        text = " ".join(cron.split())
        if not text or len(text) > MAX_CRON_CHARS:
            raise InvalidSchedule(f"cron expression {cron!r} is empty or too long")
        if len(text.split()) != FIELDS:
            raise InvalidSchedule(
                f"cron expression {cron!r} must have 5 fields (minute hour day-of-month "
                "month day-of-week), like '0 7 * * *'"
            )
        where = zone(tz)
        try:
            probe = CronSim(text, datetime(2000, 1, 1, tzinfo=where))
            next(probe)
        except (CronSimError, StopIteration) as exc:
            raise InvalidSchedule(f"cron expression {cron!r} is not valid: {exc}") from None
        return cls(text, tz, where)

    def next_after(self, after_ns: int) -> int | None:
        """The first fire strictly after ``after_ns`` (None: never again)."""
        start = datetime.fromtimestamp(after_ns // _NS, tz=UTC).astimezone(self._zone)
        try:
            it = CronSim(self.cron, start)
            for _ in range(_MAX_STEPS):
                at = int(next(it).timestamp()) * _NS
                if at > after_ns:
                    return at
        except (CronSimError, StopIteration):
            return None
        return None

    def last_at_or_before(self, at_ns: int) -> int | None:
        """The latest fire at or before ``at_ns`` (None: none)."""
        # cronsim's reverse iteration is strictly before its start: start a
        # second after.
        start = datetime.fromtimestamp(at_ns // _NS + 1, tz=UTC).astimezone(self._zone)
        try:
            it = CronSim(self.cron, start, reverse=True)
            for _ in range(_MAX_STEPS):
                found = int(next(it).timestamp()) * _NS
                if found <= at_ns:
                    return found
        except (CronSimError, StopIteration):
            return None
        return None

    def upcoming(self, after_ns: int, count: int) -> list[int]:
        """The next ``count`` fires after ``after_ns``."""
        out: list[int] = []
        at: int | None = after_ns
        while len(out) < count:
            at = self.next_after(at)
            if at is None:
                break
            out.append(at)
        return out


__all__ = ["FIELDS", "MAX_CRON_CHARS", "Schedule", "zone"]
