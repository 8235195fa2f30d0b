"""What a SIGKILL leaves by design is cleaned by the next start (a real
``naga daemon start`` process), recorded in the kernel's history, and never
makes ``naga ledger verify`` fail: a blob put's temp file, and a projection
left empty by a kill in a home's first start."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from naga.sdk import Client
from naga_core._home import Home
from naga_core.ledger import BlobStore, OsFileSystem
from tests.daemon.conftest import REPO, CoreProcess, start_core_process
from tests.forking import Child
from tests.ledger_helpers import verify_home
from tests.seeds import pick_seed

#: Big enough that a kill right after the put began lands inside it.
BLOB_BYTES = 8 << 20
ATTEMPTS = 10


def _cli(home: str, *args: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "naga_core.cli", *args, "--home", home, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def _stop(home: str, core: CoreProcess) -> None:
    with Client.connect(home) as c:
        c.shutdown("test done")
    assert core.proc.wait(30) == 0, core.output()


def _notes(home: str) -> list[str]:
    with Client.connect(home) as c:
        return [e.description for e in c.history(limit=100).entries]


def _put_forever(blobs_dir: str, w: int) -> None:
    store = BlobStore(OsFileSystem(), blobs_dir)
    data = bytearray(os.urandom(BLOB_BYTES))
    n = 0
    while True:
        data[:8] = n.to_bytes(8, "big")
        os.write(w, b"p")  # a put begins
        store.put(bytes(data))
        n += 1


@pytest.mark.slow
def test_a_kill_during_a_blob_put_is_cleaned_by_the_next_start(tmp_path: Path) -> None:
    rng = random.Random(seed := pick_seed())
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    log = tmp_path / "core.log"
    _stop(home, start_core_process(home, log))  # a home with a ledger
    tmp = Path(Home(home).blobs_dir) / "tmp"
    left: list[str] = []
    for _ in range(ATTEMPTS):
        child = Child(_put_forever, Home(home).blobs_dir)
        child.read_at_least(1 + rng.randrange(2))
        # Killed once a put's temp file exists (between its creation and
        # its rename): watched, not timed, so a loaded machine lands there.
        deadline = time.monotonic() + 60
        while not (tmp.is_dir() and any(tmp.iterdir())):
            assert time.monotonic() < deadline, f"no put seen in flight (seed {seed})"
        child.kill()
        left = sorted(p.name for p in tmp.iterdir())
        if left:  # else the rename beat the kill: again
            break
    assert left, f"every put finished before its kill landed (seed {seed})"

    # Offline, before any start: a note, not a failure.
    code, report = _cli(home, "ledger", "verify")
    assert code == 0, report
    assert any("crash leftover" in str(n) for n in report["notes"]), report  # type: ignore[union-attr]

    core = start_core_process(home, log)
    try:
        assert not any(tmp.iterdir()), "the start left the temp file"
        notes = _notes(home)
        assert any("interrupted blob put" in n and left[0] in n for n in notes), notes
    finally:
        _stop(home, core)
    verify_home(home)
    code, report = _cli(home, "ledger", "verify")
    assert code == 0, report
    assert report["notes"] == [], report


@pytest.mark.slow
def test_ledger_recover_cleans_a_temp_file_offline(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    _stop(home, start_core_process(home, tmp_path / "core.log"))
    tmp = Path(Home(home).blobs_dir) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / ("ab" * 32 + ".0123456789abcdef")).write_bytes(b"half a blob")
    code, report = _cli(home, "ledger", "recover")
    assert code == 0, report
    assert report["removed"] == [str(tmp / ("ab" * 32 + ".0123456789abcdef"))]
    assert not any(tmp.iterdir())
    code, report = _cli(home, "ledger", "verify")
    assert code == 0, report
    assert report["notes"] == [], report


@pytest.mark.slow
def test_a_kill_in_a_homes_first_start_leaves_a_ledger_that_verifies(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    os.makedirs(home, mode=0o700)
    log = tmp_path / "core.log"
    core = start_core_process(home, log)
    # Records the projection has not seen (it catches up at start and stop).
    with Client.connect(home) as c:
        c.set_setting("agent.max_steps", 5)
        c.set_trust("webchat:friend", "known", by_owner=True)
    core.proc.send_signal(signal.SIGKILL)
    core.proc.wait(10)
    code, report = _cli(home, "ledger", "verify")
    assert code == 0, report
    assert any("projection is" in str(n) for n in report["notes"]), report  # type: ignore[union-attr]

    core = start_core_process(home, log)
    try:
        notes = _notes(home)
        assert any("without a clean stop" in n and "projection" in n for n in notes), notes
    finally:
        _stop(home, core)
    verify_home(home)
    code, report = _cli(home, "ledger", "verify")
    assert code == 0, report
    assert report["notes"] == [], report
