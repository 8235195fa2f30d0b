"""The core owns the thread its sandboxed children are forked on (ADR 0062):
made at its start, ended and joined at its stop, after its children."""

from __future__ import annotations

import os
import threading
import time

from naga.v1 import core_pb2 as cpb
from tests.daemon.conftest import READY_TIMEOUT_S, core_in_thread


def _fork_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "sandbox-fork"}


def _children() -> dict[int, str]:
    """This process's children, zombies too: pid -> state."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == os.getpid():
            found[int(entry)] = fields[0]
    return found


def test_the_core_ends_its_fork_thread_at_its_stop_after_its_children(home: str) -> None:
    before = _fork_threads()
    with core_in_thread(home) as core:
        with core.client() as c:
            # The executors warm up from readiness: a state to wait for.
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                executors = [p for p in c.status().processes if p.role.startswith("executor")]
                if executors and all(p.state == cpb.PROCESS_STATE_RUNNING for p in executors):
                    break
                assert time.monotonic() < deadline, executors
                time.sleep(0.05)
            (owned,) = _fork_threads() - before
            assert owned.is_alive()
            assert {p.pid for p in executors} <= set(_children())
            c.shutdown("test")
        assert core.join().reason == "Shutdown by owner: test"
    assert not owned.is_alive(), "the core's stop did not end its fork thread"
    assert _fork_threads() == before
    # Each reaped by its supervisor before the Forker closed: a child the
    # close had killed would be left a zombie nobody waits for.
    assert not ({p.pid for p in executors} & set(_children())), _children()
