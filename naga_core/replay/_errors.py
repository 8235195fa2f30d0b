"""What can go wrong with a replay bundle, each with a message that says
what and where."""

from __future__ import annotations

from naga_core.errors import NagaError


class ReplayError(NagaError):
    """Root of the replay errors."""


class BundleInvalid(ReplayError):
    """The file is not a usable bundle: empty, truncated, another format,
    not a bundle at all, or inconsistent inside."""


class BundleTampered(ReplayError):
    """A record no longer matches its leaf hash or its inclusion proof: it
    was edited after export."""


class NothingToExport(ReplayError):
    """The ledger holds no trace of the session."""


class SourceFailed(ReplayError):
    """The running core could not be read from during an export (it
    stopped, refused, or sent something inconsistent)."""


__all__ = ["BundleInvalid", "BundleTampered", "NothingToExport", "ReplayError", "SourceFailed"]
