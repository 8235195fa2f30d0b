"""Crash fuzz with real processes: SIGKILL an appender at random moments.

A forked child appends under load (several trio tasks through the group
committer, small segments so kills also land while sealing) and reports
each acknowledged seq on a pipe. The parent kills it after a random delay,
reopens the ledger and checks: every acknowledged record is there, and the
content is an exact prefix of what the children wrote (each seq's payload is
a pure function of the seq, so "what was written" is known).

1,000 kills by default; NAGA_CRASH_ITERATIONS sets another count (10,000
for the long run). The seed is printed on failure (NAGA_TEST_SEED replays).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from pathlib import Path

import pytest
import trio

from naga_core.ledger import (
    CheckpointSigner,
    Entry,
    GroupCommitter,
    Ledger,
    OsFileSystem,
    verify_ledger,
)
from tests.forking import Child
from tests.seeds import pick_seed

ITERATIONS = int(os.environ.get("NAGA_CRASH_ITERATIONS", "1000"))
SEGMENT_BYTES = 16 * 1024
APPENDERS = 6


def payload_for(seq: int) -> bytes:
    digest = hashlib.sha256(seq.to_bytes(8, "big")).digest()
    return digest * (1 + seq % 7)


READY = (1 << 64) - 1  # sent once the ledger is open and appending starts


def _child(directory: str, key_name: str, seed: bytes, ack_fd: int) -> None:
    signer = CheckpointSigner.from_private_bytes(key_name, seed)
    ledger = Ledger.open(directory, signer, segment_max_bytes=SEGMENT_BYTES)
    os.write(ack_fd, READY.to_bytes(8, "big"))

    async def appender(gc: GroupCommitter) -> None:
        while True:
            # Staging is synchronous, so nothing interleaves between reading
            # next_seq and the stage inside append.
            seq = ledger.next_seq
            receipt = await gc.append(Entry.of("fuzz.append", payload_for(seq)))
            assert receipt.seq == seq
            os.write(ack_fd, receipt.seq.to_bytes(8, "big"))

    async def main() -> None:
        gc = GroupCommitter(ledger)
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            for _ in range(APPENDERS):
                nursery.start_soon(appender, gc)

    trio.run(main)


def _run_child(directory: str, signer: CheckpointSigner, delay: float, *, wait_for: int) -> int:
    """Fork an appender and kill it ``delay`` s after it sent ``wait_for``
    messages (0: right after the fork, landing kills in open and recovery;
    1: once it is ready; 2: once it acknowledged a record); the highest
    acked seq, or -1."""
    child = Child(_child, directory, signer.key_name, signer.private_bytes)
    child.read_at_least(8 * wait_for)
    time.sleep(delay)
    ended_by = child.kill()
    data = child.output
    assert ended_by == signal.SIGKILL, "the child exited on its own"
    whole = len(data) - len(data) % 8
    acked = [int.from_bytes(data[i : i + 8], "big") for i in range(0, whole, 8)]
    return max((a for a in acked if a != READY), default=-1)


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_record(tmp_path: Path) -> None:
    seed = pick_seed()
    rng = random.Random(seed)
    directory = os.path.join(str(tmp_path), "ledger")
    signer = CheckpointSigner.generate("naga.ledger/v1/crashfuzz")
    checked = 0
    acked_max = -1
    cuts = 0
    landed = 0  # kills that hit a child after it had acknowledged something
    for it in range(ITERATIONS):
        delay = rng.choice((0.0, 0.0005, 0.002, rng.uniform(0.0, 0.02)))
        wait_for = rng.choices((0, 1, 2), weights=(1, 3, 6))[0]
        child_acked = _run_child(directory, signer, delay, wait_for=wait_for)
        landed += child_acked > acked_max
        acked_max = max(acked_max, child_acked)
        ledger = Ledger.open(directory, signer, segment_max_bytes=SEGMENT_BYTES)
        try:
            cuts += len(ledger.report.cut)
            ctx = f"seed={seed} iteration={it} acked={acked_max} size={ledger.size}"
            assert ledger.size > acked_max, f"acknowledged record lost: {ctx}"
            for rec in ledger.iter_records(checked):
                assert rec.kind == "fuzz.append", ctx
                assert rec.payload == payload_for(rec.seq), f"record {rec.seq} differs: {ctx}"
            checked = ledger.size
        finally:
            ledger.close()
    report = verify_ledger(OsFileSystem(), directory, signer.verifier())
    assert report.ok, f"seed={seed}: {[str(p) for p in report.problems]}"
    assert report.records == checked
    # The run must really have exercised kills mid-write and sealing.
    assert report.sealed > 0, f"seed={seed}: no segment was ever sealed"
    assert landed >= ITERATIONS // 4, f"seed={seed}: only {landed} kills landed mid-append"
    print(f"seed={seed} records={checked} sealed={report.sealed} landed={landed} cuts={cuts}")
