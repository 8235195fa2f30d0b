"""A start does not hash the sealed segments (ADR 0057): a byte flipped in
one, in a record the start does not read (a start from a snapshot reads the
records after it; a full replay reads every record and refuses), lets the
core start, and its background rehash then notes the damage in the ledger
and stops the core failed; ``naga ledger verify`` names the file
(tests/cli/test_tamper.py covers every byte of a segment). With
``ledger.reverify_days`` 0, a segment verified before is rehashed again at
every start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from naga.sdk import Client
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.ledger import Entry
from tests.daemon.conftest import REPO, start_core_process


def _sealed_home(home: str) -> str:
    """A home whose ledger has a sealed segment; that segment's path."""
    h = Home(home)
    with open_ledger(h, create=True) as ledger:
        while len(ledger.seals()) < 1:
            ledger.append_many([Entry.of("test.filler", bytes([i]) * 60_000) for i in range(20)])
        first = ledger.seals()[0]
    return os.path.join(h.ledger_dir, "segments", first.segment)


def test_a_flipped_byte_in_a_sealed_segment_is_noted_and_stops_the_core(
    home: str, tmp_path: Path
) -> None:
    os.makedirs(home, mode=0o700)
    segment = _sealed_home(home)
    log = tmp_path / "core.log"
    core = start_core_process(
        home, log
    )  # a full replay (it reads every record); its stop snapshots
    with Client.connect(home) as c:
        # Every sealed segment rehashed at every start (ADR 0061): whether
        # this core's rehash marked the segment verified before its stop
        # does not matter (tests/daemon/test_rehash_paced.py covers that).
        c.set_setting("ledger.reverify_days", 0)
        c.shutdown("snapshot")
    assert core.proc.wait(120) == 0, core.output()
    at = os.path.getsize(segment) - 1000  # in its last record (the first one's is read at open)
    with open(segment, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x04]))
    # A start from the snapshot reads the records after it only, and does
    # not hash the sealed segment: it serves, then the rehash finds it.
    core = start_core_process(home, log)
    try:
        code = core.proc.wait(120)
    finally:
        if core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait()
    out = core.output()
    assert code != 0, out
    assert f"{segment}: sealed segment content does not match its seal" in out
    with open_ledger(Home(home), create=False, check_contents=False) as ledger:
        notes = [
            kpb.Effect.FromString(rec.payload).description
            for rec in ledger.iter_records(ledger.seals()[0].tree_size)
            if rec.kind == "kernel.effect"
        ]
    assert [n for n in notes if "do not match their seals" in n and segment in n], notes
    verify = subprocess.run(
        [sys.executable, "-m", "naga_core.cli", "ledger", "verify", "--home", home],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
    )
    assert verify.returncode != 0
    assert os.path.basename(segment) in verify.stdout + verify.stderr
