"""Shared helpers for ledger tests: a small sealed ledger on the real disk."""

from __future__ import annotations

import os

from naga_core._home import Home
from naga_core._store import blob_store, projection_path, verifier_for
from naga_core.ledger import CheckpointSigner, Entry, Ledger, OsFileSystem, verify_ledger

SMALL_SEGMENT = 4096


def fixed_signer(name: str = "naga.ledger/v1/test") -> CheckpointSigner:
    return CheckpointSigner.from_private_bytes(name, bytes(range(32)))


def payload(seq: int) -> bytes:
    return f"payload {seq} ".encode() * (1 + seq % 5)


def fill(ledger: Ledger, count: int, kind: str = "test.append") -> None:
    start = ledger.next_seq
    ledger.append_many([Entry.of(kind, payload(start + i)) for i in range(count)])


def make_ledger(directory: str, count: int, *, segment: int = SMALL_SEGMENT) -> None:
    with Ledger.open(directory, fixed_signer(), segment_max_bytes=segment) as ledger:
        for _ in range(count // 50):
            fill(ledger, 50)
        fill(ledger, count % 50)


def segment_files(directory: str, suffix: str = ".log") -> list[str]:
    seg = os.path.join(directory, "segments")
    return [os.path.join(seg, n) for n in sorted(os.listdir(seg)) if n.endswith(suffix)]


def verify_home(home: str) -> int:
    """The ledger of a stopped core's home verifies, with its blobs and the
    projection the core caught up at stop; how many records it holds."""
    h = Home(home)
    report = verify_ledger(
        OsFileSystem(),
        h.ledger_dir,
        verifier_for(h),
        blobs=blob_store(h),
        projection_path=projection_path(h),
    )
    assert report.ok, report.problems
    records: int = report.records
    return records
