"""Trust levels, shared by the core's trust table, capability tokens and
every process that shows or checks a peer's trust."""

from __future__ import annotations

import enum


class UnknownTrustLevel(ValueError):
    """A name that is not a trust level."""


class TrustLevel(enum.IntEnum):
    """Ordered: ``UNTRUSTED < GUEST < KNOWN < OWNER``; the numbers are the
    ones trust ceiling caveats and the ledger carry."""

    UNTRUSTED = 0
    GUEST = 1
    KNOWN = 2
    OWNER = 3

    @property
    def label(self) -> str:
        """The name stored in the ledger and shown to people: ``"owner"``."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> TrustLevel:
        """The level named ``text`` (a label, exactly)."""
        for level in cls:
            if level.label == text:
                return level
        labels = ", ".join(level.label for level in cls)
        raise UnknownTrustLevel(f"{text!r} is not a trust level (one of: {labels})")


__all__ = ["TrustLevel", "UnknownTrustLevel"]
