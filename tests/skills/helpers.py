"""A skill store over a real ledger, kernel and blob store in a directory."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Generator

from naga_core._home import Home
from naga_core.kernel import Actions, Kernel
from naga_core.ledger import BlobStore, Ledger, OsFileSystem
from naga_core.memory import KeyRing, Sealer
from naga_core.skills import SkillStore, render
from tests.ledger_helpers import fixed_signer


@contextlib.contextmanager
def open_store(
    directory: str, *, sealed: bool = False, ring: KeyRing | None = None
) -> Generator[SkillStore]:
    """A store whose clock ticks by one each read (versions made in one
    nanosecond still differ in time); ``sealed``: with a sealer over a key
    ring of its own (keys under ``<directory>/keys``), as the core's, or
    over ``ring``."""
    ticks = itertools.count(1_700_000_000_000_000_000)
    blobs = BlobStore(OsFileSystem(), os.path.join(directory, "blobs"))
    if sealed and ring is None:
        ring = KeyRing.of_home(Home(directory))
    sealer = Sealer(ring) if ring is not None else None
    with Ledger.open(os.path.join(directory, "ledger"), fixed_signer(), blobs=blobs) as ledger:
        kernel = Kernel.open(ledger, Actions())
        yield SkillStore(kernel, blobs, clock=lambda: next(ticks), sealer=sealer)


def skill_files(name: str, description: str, body: str) -> dict[str, bytes]:
    return {"SKILL.md": render(name, description, body)}
