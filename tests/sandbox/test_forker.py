"""The Forker: the owned thread every sandboxed child is forked on (ADR 0062).

Its owner starts and closes it; a launch through one not started, closed,
or inherited by a forked copy of its owner's process is refused; closing it
ends its thread, and the kernel then kills every child it forked that still
runs (their parent-death signal follows the forking thread), and no other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sandbox
from tests.sandbox.conftest import Range

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = "tests.sandbox._workloads"


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_forker_owns_one_thread_from_start_to_close() -> None:
    forker = sandbox.Forker()
    assert not forker.running
    with forker:
        assert forker.running
        thread = forker.run(threading.current_thread)
        assert thread.name == "sandbox-fork"
        assert thread is not threading.current_thread()
        assert not thread.daemon, "a Forker never closed must not be hidden by a daemon thread"
        assert forker.run(threading.current_thread) is thread, "one thread for every fork"
    assert not thread.is_alive(), "close joined its thread"
    assert not forker.running
    forker.close()  # idempotent


def test_a_launch_through_a_forker_not_started_or_closed_is_refused(attacker: Range) -> None:
    unstarted = sandbox.Forker()
    closed = sandbox.Forker().start()
    closed.close()
    before = _fds()
    for forker, why in ((unstarted, "not started"), (closed, "was closed")):
        with pytest.raises(sandbox.ForkerUnavailable, match=why):
            sandbox.launch(
                attacker.profile(),
                f"{WORKLOADS}:session",
                ["1"],
                forker=forker,
                kernel=attacker.kernel,
            )
    assert _fds() == before, "a refused launch leaves no descriptor open"
    with pytest.raises(sandbox.ForkerUnavailable, match="cannot start again"):
        closed.start()


def test_close_waits_for_the_fork_in_flight_and_refuses_the_next() -> None:
    forker = sandbox.Forker().start()
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def fork() -> int:
        entered.set()
        release.wait()
        order.append("fork")
        return 42

    results: list[int] = []
    launcher = threading.Thread(target=lambda: results.append(forker.run(fork)))
    launcher.start()
    entered.wait()
    closer = threading.Thread(target=lambda: (forker.close(), order.append("closed")))
    closer.start()
    release.set()
    launcher.join()
    closer.join()
    assert results == [42]
    assert order == ["fork", "closed"], "close returned before the fork it followed"
    with pytest.raises(sandbox.ForkerUnavailable):
        forker.run(lambda: 0)


def test_closing_a_forker_kills_its_running_children_and_no_others(attacker: Range) -> None:
    """The chosen semantic: a Forker's close is its owner's end for its
    children (the kernel's SIGKILL), so an owner closes it once they are gone."""
    doomed_forker = sandbox.Forker().start()
    pipes = [os.pipe() for _ in range(4)]
    (doomed_in, to_doomed), (from_doomed, doomed_out) = pipes[0], pipes[1]
    (kept_in, to_kept), (from_kept, kept_out) = pipes[2], pipes[3]
    doomed = kept = None
    try:
        doomed = sandbox.launch(
            attacker.profile(),
            f"{WORKLOADS}:echo_lines",
            [str(doomed_in), str(doomed_out)],
            forker=doomed_forker,
            pass_fds=[doomed_in, doomed_out],
            kernel=attacker.kernel,
        )
        kept = sandbox.launch(
            attacker.profile(),
            f"{WORKLOADS}:echo_lines",
            [str(kept_in), str(kept_out)],
            forker=attacker.forker,
            pass_fds=[kept_in, kept_out],
            kernel=attacker.kernel,
        )
        for fd in (doomed_in, doomed_out, kept_in, kept_out):
            os.close(fd)
        doomed_forker.close()
        end = doomed.wait(timeout=30)
        assert (end.kind, end.signal) == (sandbox.ExitKind.SIGNALED, signal.SIGKILL), end
        # The other Forker's child runs on, answering.
        os.write(to_kept, b"still here\n")
        with os.fdopen(from_kept, "rb") as answers:
            from_kept = -1
            assert answers.readline() == b"still here\n"
            os.close(to_kept)
            to_kept = -1
            assert answers.readline() == b""
        assert kept.wait(timeout=30).kind is sandbox.ExitKind.EXITED
    finally:
        doomed_forker.close()
        for fd in (to_doomed, from_doomed, to_kept, from_kept):
            if fd != -1:
                os.close(fd)
        for child in (doomed, kept):
            if child is not None:
                child.close()


_FORKED_COPY = """
import os
import sys
import sandbox

profile = sandbox.Profile.plugin(work_dir=sys.argv[1], read_only=[sys.argv[2]])
kernel = sandbox.detect()


def session(forker):
    r, w = os.pipe()
    child = sandbox.launch(
        profile, "tests.sandbox._workloads:session", [str(w)],
        forker=forker, pass_fds=[w], kernel=kernel,
    )
    os.close(w)
    with os.fdopen(r, "rb") as said:
        line = said.read().decode().strip()
    return f"{line} {child.wait(timeout=30).kind.value}"


with sandbox.Forker() as forker:
    pid = os.fork()
    if pid == 0:
        try:
            session(forker)
            print("copy: launched through its parent's Forker", flush=True)
        except sandbox.ForkerUnavailable as exc:
            print(f"copy: refused: {exc}", flush=True)
        forker.close()  # the parent's thread is not the copy's to end
        with sandbox.Forker() as own:
            print(f"copy's own: {session(own)}", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(f"parent: {session(forker)}", flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_copy_refuses_its_parents_forker_and_makes_its_own(attacker: Range) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_COPY, str(attacker.work), str(attacker.read_only)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("copy: refused: this Forker belongs to process "), lines
    assert "must make a Forker of its own" in lines[0]
    assert lines[1] == "copy's own: True exited", lines
    # The copy's close left its parent's Forker working.
    assert lines[2] == "parent: True exited", lines
