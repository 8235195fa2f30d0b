"""A skill store over a real ledger, kernel and blob store in a directory."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Generator

from naga_core.kernel import Actions, Kernel
from naga_core.ledger import BlobStore, Ledger, OsFileSystem
from naga_core.skills import SkillStore, render
from tests.ledger_helpers import fixed_signer


@contextlib.contextmanager
def open_store(directory: str) -> Generator[SkillStore]:
    """A store whose clock ticks by one each read (versions made in one
    nanosecond still differ in time)."""
    ticks = itertools.count(1_700_000_000_000_000_000)
    blobs = BlobStore(OsFileSystem(), os.path.join(directory, "blobs"))
    with Ledger.open(os.path.join(directory, "ledger"), fixed_signer(), blobs=blobs) as ledger:
        kernel = Kernel.open(ledger, Actions())
        yield SkillStore(kernel, blobs, clock=lambda: next(ticks))


def skill_files(name: str, description: str, body: str) -> dict[str, bytes]:
    return {"SKILL.md": render(name, description, body)}
