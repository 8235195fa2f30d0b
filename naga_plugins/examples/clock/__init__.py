"""The clock plugin: ``clock.now`` (R0), the current time in any time zone."""

from __future__ import annotations

import datetime
import time
import zoneinfo

from naga_plugins import Plugin, ToolFailed

plugin = Plugin("clock")


@plugin.tool("clock.now")
def now(timezone: str = "UTC") -> dict[str, object]:
    try:
        zone = zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ToolFailed(f"unknown time zone {timezone!r}") from None
    unix_ns = time.time_ns()
    utc = datetime.datetime.fromtimestamp(unix_ns / 1e9, tz=datetime.UTC)
    return {
        "utc": utc.isoformat(timespec="milliseconds"),
        "local": utc.astimezone(zone).isoformat(timespec="milliseconds"),
        "timezone": timezone,
        "unix_ns": unix_ns,
    }


main = plugin.main
