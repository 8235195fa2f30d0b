"""No sandboxed child outlives its launcher, even one still importing its
target (a core killed during its children's start left them running and
the next core's start paid for their CPU: issue 13), and none dies with
the thread that launched it (the kernel's parent-death signal follows the
forking thread; trio's worker threads end when idle)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import sandbox
from tests.sandbox.conftest import Range

REPO = Path(__file__).resolve().parents[2]
#: Generous: the child is killed by the kernel as its launcher dies.
EXIT_TIMEOUT_S = 60.0

_LAUNCHER = """
import sys
import sandbox
profile = sandbox.Profile.plugin(work_dir=sys.argv[1], read_only=[sys.argv[2]])
with sandbox.Forker() as forker:
    sandbox.launch(profile, "tests.sandbox._pid_then_hangs:run", forker=forker, ready_timeout=600)
"""


def _exited(pid: int, timeout: float) -> bool:
    fd = os.pidfd_open(pid)
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def test_a_child_in_its_setup_dies_with_its_launcher(attacker: Range) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(attacker.work), str(attacker.read_only)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    child = 0
    try:
        # The child's own word: its setup reached the target's import.
        line = launcher.stdout.readline()
        assert line.strip().isdigit(), line
        child = int(line)
        assert not _exited(child, 0)
        launcher.kill()
        launcher.wait()
        assert _exited(child, EXIT_TIMEOUT_S), "the child outlived its launcher"
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def test_a_child_outlives_the_thread_that_launched_it(attacker: Range) -> None:
    to_child, from_test = os.pipe()
    to_test, from_child = os.pipe()
    box: dict[str, object] = {}

    def launch() -> None:
        box["tid"] = threading.get_native_id()
        box["child"] = sandbox.launch(
            attacker.profile(),
            "tests.sandbox._workloads:echo_lines",
            [str(to_child), str(from_child)],
            pass_fds=[to_child, from_child],
            kernel=attacker.kernel,
            forker=attacker.forker,
        )

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    os.close(to_child)
    os.close(from_child)
    child = box["child"]
    assert isinstance(child, sandbox.Sandboxed)
    try:
        # Gone from the kernel too (join returns a little before): had the
        # child been forked by it, its SIGKILL was sent by now.
        while os.path.exists(f"/proc/self/task/{box['tid']}"):
            os.sched_yield()
        os.write(from_test, b"still here\n")
        with os.fdopen(to_test, "rb") as answers:
            assert answers.readline() == b"still here\n"
            os.close(from_test)
            from_test = -1
            assert answers.readline() == b""
        assert child.wait(timeout=30).kind is sandbox.ExitKind.EXITED
    finally:
        if from_test != -1:
            os.close(from_test)
        child.close()
