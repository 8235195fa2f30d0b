"""Every error the console client raises, under one root."""

from __future__ import annotations


class ConsoleError(Exception):
    """The gateway refused a request, closed the connection, or is not there."""


__all__ = ["ConsoleError"]
