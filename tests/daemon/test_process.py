"""The core as a real child process: SIGTERM under load is graceful, SIGKILL
under load loses no acknowledged change, a second core is refused."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sandbox
from naga.sdk import Client, errors
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.kernel import replay
from tests.daemon.conftest import REPO, CoreProcess, start_core_process
from tests.ledger_helpers import verify_home

#: Each writer owns one setting and cycles through values that differ from
#: the previous one, so every call journals a registration.
WRITERS: dict[str, tuple[int, int]] = {  # setting: (lowest value, how many values)
    "agent.max_steps": (1, 100),
    "lanes.max_concurrent": (1, 64),
    "gateway.port": (1024, 60000),
}
ACKS_BEFORE_SIGNAL = 60
CGROUPS = sandbox.detect_cgroups()


@dataclass
class Writer:
    """One client thread doing SetSetting in a loop; what it saw."""

    name: str
    home: str
    acked: list[tuple[int, int]] = field(default_factory=lambda: [])  # (value, seq)
    in_flight: int | None = None
    failures: list[errors.SdkError] = field(default_factory=lambda: [])
    after_restart: int | None = None


def _write_until_unavailable(w: Writer, enough: threading.Semaphore, stop: threading.Event) -> None:
    with Client.connect(w.home, timeout=10) as c:
        i = 0
        while not stop.is_set():
            low, count = WRITERS[w.name]
            value = low + i % count
            w.in_flight = value
            try:
                resp = c.set_setting(w.name, value)
            except errors.SdkError as exc:
                w.failures.append(exc)
                return
            w.acked.append((value, resp.seq))
            w.in_flight = None
            enough.release()
            i += 1


def _load(home: str, core: CoreProcess, sig: signal.Signals) -> list[Writer]:
    """Writers hammer the core until ``sig`` has stopped it; returns them."""
    writers = [Writer(name, home) for name in WRITERS]
    enough = threading.Semaphore(0)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_write_until_unavailable, args=(w, enough, stop)) for w in writers
    ]
    for t in threads:
        t.start()
    for _ in range(ACKS_BEFORE_SIGNAL):
        assert enough.acquire(timeout=30), "the writers stopped making progress"
    os.kill(core.pid, sig)
    code = core.proc.wait(30)
    stop.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    if sig is signal.SIGTERM:
        assert code == 0, core.output()
    else:
        assert code == -signal.SIGKILL
    return writers


def _setting_effect(payload: bytes) -> tuple[str, int]:
    effect = kpb.Effect.FromString(payload)
    (op,) = effect.forward
    assert op.family == "setting"
    return op.key, op.value.integer


def _check_acknowledged(writers: list[Writer], c: Client) -> None:
    """Every acknowledged change is in the ledger at its seq, and the state
    holds the last acknowledged value (or the one in flight at the end)."""
    for w in writers:
        assert w.acked, f"{w.name}: no acknowledged writes"
        for value, seq in w.acked:
            (rec,) = c.records(seq, limit=1)
            assert _setting_effect(rec.payload) == (w.name, value)
        current = c.get_setting(w.name).value.integer
        last = w.acked[-1][0]
        assert current in {last, w.in_flight}, (w.name, current, last, w.in_flight)


def _verify_offline(home: str) -> None:
    verify_home(home)


def test_sigterm_under_load_is_graceful(home: str, core_process: CoreProcess) -> None:
    with Client.connect(home) as watcher:
        events = iter(watcher.subscribe(0))
        writers = _load(home, core_process, signal.SIGTERM)
        # The open stream ended with UNAVAILABLE ("shutting down"), not garbage.
        try:
            for _ in events:
                pass
            ended: errors.SdkError | None = None
        except errors.SdkError as exc:
            ended = exc
        assert isinstance(ended, errors.CoreUnavailable)
    for w in writers:
        assert all(isinstance(f, errors.CoreUnavailable) for f in w.failures), w.failures
    run = os.path.join(home, "run")
    # Socket, pid and credential removed; the log stays (a foreground core
    # writes run/core.log too, for the console's logs page).
    assert sorted(os.listdir(run)) == ["core.lock", "core.log"]
    assert "naga-core stopped: SIGTERM" in core_process.output()
    with open(os.path.join(run, "core.log"), encoding="utf-8") as f:
        assert " INFO naga.core naga-core stopping: SIGTERM" in f.read()
    _verify_offline(home)
    with open_ledger(Home(home), create=False) as ledger:
        state = replay(ledger)
    for w in writers:
        assert state[("setting", w.name)] == w.acked[-1][0]  # nothing was in flight unacked


def test_sigkill_under_load_loses_no_acknowledged_change(
    home: str, core_process: CoreProcess, tmp_path: Path
) -> None:
    writers = _load(home, core_process, signal.SIGKILL)
    for w in writers:
        # Each writer's next call after the kill met a dead core: UNAVAILABLE.
        assert len(w.failures) == 1
        assert isinstance(w.failures[0], errors.CoreUnavailable), w.failures
        assert "naga daemon start" in str(w.failures[0])
    again = start_core_process(home, tmp_path / "core2.log")
    try:
        # The same kind of client reconnects by itself (reading the new credential).
        with Client.connect(home) as c:
            _check_acknowledged(writers, c)
            assert c.set_setting("agent.max_steps", 99).setting.value.integer == 99
        with Client.connect(home) as c:
            c.shutdown("test")
        assert again.proc.wait(30) == 0
    finally:
        if again.proc.poll() is None:
            again.proc.kill()
            again.proc.wait()
    _verify_offline(home)


def test_a_client_reconnects_after_a_restart(home: str, core_process: CoreProcess) -> None:
    c = Client.connect(home)
    # Acknowledged as the head's next record (a fresh home's first start
    # journaled its shipped tools before it answered).
    head = c.head().size
    assert c.set_setting("agent.max_steps", 50).seq >= head
    os.kill(core_process.pid, signal.SIGKILL)
    core_process.proc.wait(30)
    try:
        c.set_setting("agent.max_steps", 51)
        raised: errors.SdkError | None = None
    except errors.SdkError as exc:
        raised = exc
    assert isinstance(raised, errors.CoreUnavailable)
    again = start_core_process(home, core_process.log)
    try:
        assert c.get_setting("agent.max_steps").value.integer == 50  # same client object
        c.shutdown()
        assert again.proc.wait(30) == 0
    finally:
        c.close()
        if again.proc.poll() is None:
            again.proc.kill()
            again.proc.wait()


def test_a_second_core_process_is_refused_naming_the_first(
    home: str, core_process: CoreProcess
) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "naga_core.cli", "daemon", "start", "--foreground", "--home", home],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 1
    assert f"another naga-core (pid {core_process.pid}) is already serving" in second.stderr
    with Client.connect(home) as c:
        assert c.status().processes[0].pid == core_process.pid


@pytest.mark.skipif(not CGROUPS.usable, reason=CGROUPS.line())
def test_a_start_sweeps_the_empty_cgroups_a_killed_core_left(tmp_path: Path) -> None:
    """A core killed before it removed its children's cgroups leaves them
    (seen: 1,370 on one machine); the next start removes the empty ones whose
    maker is gone, and leaves a live process's groups alone."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    tag = uuid.uuid4().hex[:8]
    parents = {p for p in (CGROUPS.cpu_parent, CGROUPS.memory_parent) if p}
    left = [os.path.join(p, f"naga-sweep{tag}-p{int(dead.stdout)}-0000") for p in parents]
    live = [os.path.join(p, f"naga-sweep{tag}-p{os.getpid()}-0000") for p in parents]
    for d in left + live:
        os.mkdir(d)
    home = str(tmp_path / "home")
    try:
        core = start_core_process(home, tmp_path / "core.log")
        try:
            assert not any(os.path.exists(d) for d in left)
            assert all(os.path.isdir(d) for d in live)
        finally:
            with Client.connect(home) as c:
                c.shutdown("test")
            assert core.proc.wait(30) == 0
        # This start swept (its log says so). The groups may have been
        # removed by another core's start on this machine just before (a
        # parallel test's: the same sweep), so its count is not asserted.
        with open(os.path.join(home, "run", "core.log"), encoding="utf-8") as f:
            assert re.search(r"removed \d+ empty cgroups left by killed processes", f.read())
    finally:
        for d in left + live:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(d)
