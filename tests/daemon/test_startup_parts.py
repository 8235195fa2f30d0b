"""A real core restarted from its start-up snapshot (written at the clean
stop) keeps what the snapshot now carries: the memory store's items (their
texts opened again from the sealed records, a forgotten subject's still
unreadable) and the scheduler's fires (count, last fire); and when the
snapshot is damaged, the start replays the ledger and says so once, with
the same answers (docs/adr/0036-hands-one-start-pass.md)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from naga.v1 import job_pb2 as jpb
from naga_core._home import Home
from naga_core.daemon._startup import snapshots_dir
from tests.daemon.conftest import core_in_thread
from tests.daemon.test_offline_read_only import SECRET, remember


def _state(home: str) -> tuple[list[tuple[str, str, bool]], list[tuple[str, int, int]]]:
    """(memory items, jobs' fires) as a running core answers them."""
    with core_in_thread(home) as core:
        with core.client() as c:
            items = [(i.id, i.text, i.forgotten) for i in c.memory_items()]
            jobs = [(v.job.id, v.fires, v.last_fired_ns) for v in c.jobs()]
            c.shutdown("looked")
        assert not core.join().failed
    return items, jobs


def _started_from(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "start-up state" in r.getMessage()]


def test_a_restart_from_the_snapshot_keeps_memory_and_fires(
    home: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="naga.core")
    with core_in_thread(home) as core:
        with core.client() as c:
            c.shutdown("first")
        assert not core.join().failed
    remember(home)  # three items, one subject forgotten, offline
    with core_in_thread(home) as core:
        with core.client() as c:
            spec = jpb.JobSpec(cron="0 7 * * *", prompt="news")
            job = c.add_job(spec).job
            c.run_job(job.id)
            c.run_job(job.id)
            c.shutdown("second")
        assert not core.join().failed
    caplog.clear()
    items, jobs = _state(home)
    assert any("snapshot at seq" in m for m in _started_from(caplog)), _started_from(caplog)
    texts = {text for _id, text, forgotten in items if not forgotten}
    assert SECRET in texts
    assert sum(1 for *_x, forgotten in items if forgotten) == 1
    assert [(j, n) for j, n, _last in jobs] == [(job.id, 2)]
    assert jobs[0][2] > 0

    # A damaged snapshot: a full replay, one note, the same answers.
    directory = snapshots_dir(Home(home))
    snaps = sorted(os.listdir(directory))
    assert snaps
    for name in snaps:
        path = Path(directory, name)
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    caplog.clear()
    assert _state(home) == (items, jobs)
    assert any("full replay" in m for m in _started_from(caplog)), _started_from(caplog)
    ignored = [r for r in caplog.records if "start-up snapshot ignored" in r.getMessage()]
    assert len(ignored) == 1
