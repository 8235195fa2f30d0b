"""What the constitution refuses, with a reason each."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError


class ConstitutionError(NagaError):
    """Root of the constitution's errors."""


class Reason(enum.Enum):
    #: The file is not where the anchor says it must be.
    MISSING = "missing"
    #: The file's SHA-256 is not the one anchored in the ledger.
    MISMATCH = "mismatch"
    #: A text the constitution cannot be: empty, not UTF-8, too large.
    BAD_TEXT = "bad_text"
    #: The anchored text is not in the blob store (nothing to restore from).
    NO_CONTENT = "no_content"


class ConstitutionRefused(ConstitutionError):
    """The constitution cannot be used or amended; ``reason`` says why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


__all__ = ["ConstitutionError", "ConstitutionRefused", "Reason"]
