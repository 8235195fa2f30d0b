"""Every exception the core raises, under one root.

Callers catch :class:`NagaError`; the gRPC layer (later) maps each class to a
status code in one table. Foreign errors (OSError, sqlite3.Error) are
translated once, where they cross into the core, never re-raised raw.
"""

from __future__ import annotations


class NagaError(Exception):
    """Root of every error the core raises on purpose."""


class LedgerError(NagaError):
    """Something is wrong with the ledger or the way it was used."""


class LedgerCorrupt(LedgerError):
    """The ledger on disk is not what Naga wrote; it refuses to open.

    ``path`` and ``offset`` name the place; ``reason`` says what is wrong.
    """

    def __init__(self, path: str, offset: int | None, reason: str) -> None:
        where = path if offset is None else f"{path} at offset {offset}"
        super().__init__(f"ledger corrupt: {where}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class LedgerFailed(LedgerError):
    """A write or sync failed; the open ledger accepts nothing more.

    Like PostgreSQL after a failed fsync, Naga never retries: the page cache
    may have dropped the data, so the only safe path is to reopen, which
    recovers from what is really on disk.
    """


class LedgerLocked(LedgerError):
    """Another process holds the ledger."""


class LedgerClosed(LedgerError):
    """The ledger was used after close."""


class InvalidRecord(LedgerError):
    """An append was refused because the record is malformed or too large."""


class ProjectionError(LedgerError):
    """The SQLite projection is unusable or could not be written."""


class NotFound(NagaError):
    """The thing asked for does not exist."""


class BlobError(NagaError):
    """The blob store refused or failed."""


class BlobCorrupt(BlobError):
    """A blob's content does not match its address."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"blob corrupt: {path}: {reason}")
        self.path = path
        self.reason = reason


class ProofError(NagaError):
    """A Merkle proof or checkpoint does not verify."""


class ConfigError(NagaError):
    """A configuration value or file is invalid."""


class CommandRefused(NagaError):
    """A command refused its input before doing anything; the message says
    what was wrong and what to type instead."""
