"""The memory store's errors: one root, refusals carrying a reason."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError, NotFound


class MemoryStoreError(NagaError):
    """Root of the memory store's errors."""


class MemoryKeyError(MemoryStoreError):
    """A key file is missing where it must be, unreadable, loose or of the
    wrong shape; or a wrapped key or ciphertext does not authenticate."""


class Forgotten(MemoryStoreError):
    """The subject's key was destroyed: what was sealed under it is gone."""


class ItemNotFound(MemoryStoreError, NotFound):
    """No memory item by that id."""


class RefusalReason(enum.Enum):
    TRUST = "trust"
    POISON = "poison"
    INVALID = "invalid"


class WriteRefused(MemoryStoreError):
    """A write the trust gate or the poison lint refused; ``why`` is told
    to the model and recorded."""

    def __init__(self, reason: RefusalReason, why: str) -> None:
        super().__init__(why)
        self.reason = reason
        self.why = why


__all__ = [
    "Forgotten",
    "ItemNotFound",
    "MemoryKeyError",
    "MemoryStoreError",
    "RefusalReason",
    "WriteRefused",
]
