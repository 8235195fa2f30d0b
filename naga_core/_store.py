"""The ledger, blob store, projection and key of one home, opened together.

Entry points (the CLI now, the core daemon later) use this; nothing below it
knows about homes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator

from naga_core._home import Home, load_signer
from naga_core.errors import ConfigError
from naga_core.ledger import (
    BlobStore,
    CheckpointVerifier,
    Ledger,
    LedgerView,
    OsFileSystem,
    VerifyReport,
    read_ledger,
)


def projection_path(home: Home) -> str:
    return os.path.join(home.ledger_dir, "projection.sqlite3")


def blob_store(home: Home) -> BlobStore:
    return BlobStore(OsFileSystem(), home.blobs_dir)


def verifier_for(home: Home) -> CheckpointVerifier:
    """The public key, read from the private key file when present (it is
    the authority), else from ``ledger.pub``."""
    if os.path.exists(home.signing_key_path):
        return load_signer(home, create=False).verifier()
    try:
        with open(home.public_key_path, encoding="ascii") as f:
            return CheckpointVerifier.from_vkey(f.read().strip())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no usable ledger key in {home.keys_dir}: {exc}") from None


@contextlib.contextmanager
def open_ledger(home: Home, *, create: bool, check_contents: bool = True) -> Generator[Ledger]:
    """Open the home's ledger for writing (recovering a torn tail);
    ``check_contents``: see :meth:`Ledger.open`."""
    if not create and not home.exists():
        raise ConfigError(f"no Naga home at {home.root} (set NAGA_HOME or pass --home)")
    home.ensure()
    signer = load_signer(home, create=create)
    ledger = Ledger.open(
        home.ledger_dir, signer, blobs=blob_store(home), check_contents=check_contents
    )
    try:
        yield ledger
    finally:
        ledger.close()


def read_only_ledger(home: Home, *, full: bool = False) -> tuple[VerifyReport, LedgerView]:
    """The home's ledger verified and read without opening it: no lock, no
    recovery, nothing written (for ``naga doctor`` and ``naga audit`` while
    the core is stopped). ``full``: also check the blobs and the projection."""
    if not home.exists():
        raise ConfigError(f"no Naga home at {home.root} (set NAGA_HOME or pass --home)")
    return read_ledger(
        OsFileSystem(),
        home.ledger_dir,
        verifier_for(home),
        blobs=blob_store(home) if full else None,
        projection_path=projection_path(home) if full else None,
    )
