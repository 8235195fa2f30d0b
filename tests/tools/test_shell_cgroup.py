"""shell.run through the real core: each command runs in a cgroup of its own
(CPU quota, memory ceiling, task count), so a fork bomb is held to its task
limit and an allocation past the ceiling is killed in the command, while the
core answers others (docs/adr/0035-sec11-udp-and-shell-cgroups.md).

As root, RLIMIT_NPROC holds nothing (root is exempt): the pids controller is
the one bound on a fork bomb."""

from __future__ import annotations

import glob
import json
import os
import statistics
import threading
import time

import pytest

import sandbox
from naga.sdk import Client
from naga_core.workspace import CPU_LIMIT, TASK_LIMIT
from tests.tools._turns import results, tool_turn
from tests.tools.conftest import ToolsCore

_CGROUPS = sandbox.detect_cgroups()
pytestmark = [
    pytest.mark.skipif(not _CGROUPS.usable, reason=_CGROUPS.line()),
    pytest.mark.skipif(_CGROUPS.pids_parent is None, reason="no pids controller here"),
]


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""  # gone between the glob and the read


def _shell_groups() -> list[str]:
    assert _CGROUPS.pids_parent is not None
    # Only this process's (the in-process core's): another test file on the
    # other xdist worker may run a shell command at the same moment.
    return glob.glob(os.path.join(_CGROUPS.pids_parent, f"naga-shell-p{os.getpid()}-*"))


class _Shell(threading.Thread):
    """One shell.run turn on a thread of its own, while the test watches."""

    def __init__(self, tc: ToolsCore, client: Client, command: str, timeout_s: int) -> None:
        super().__init__(daemon=True)
        self._args = (tc, client, command, timeout_s)
        self.out: dict[str, object] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        tc, client, command, timeout_s = self._args
        try:
            events = tool_turn(
                tc, client, "shell", [("shell.run", {"command": command, "timeout_s": timeout_s})]
            )
            (done,) = results(events)
            assert done.ok, done.error
            self.out = json.loads(done.result_json)
        except BaseException as exc:  # re-raised by the test  # noqa: BLE001
            self.error = exc


def test_a_fork_bomb_is_held_to_its_task_limit_and_the_core_serves_on(
    tools_core: ToolsCore, owner: Client
) -> None:
    assert _shell_groups() == []
    shell = _Shell(tools_core, owner, "b() { b | b & }; b; sleep 300", timeout_s=15)
    seen_max, limits, latencies = 0, set[str](), list[float]()
    with tools_core.client() as other:
        shell.start()
        # Paced by the core's own answers: each status is also the proof it serves.
        while shell.is_alive():
            started = time.monotonic()
            other.status()
            latencies.append(time.monotonic() - started)
            for group in _shell_groups():
                limits.add(_read(os.path.join(group, "pids.max")))
                current = _read(os.path.join(group, "pids.current"))
                seen_max = max(seen_max, int(current or 0))
                cpu = os.path.join(_CGROUPS.cpu_parent or "", os.path.basename(group))
                if _CGROUPS.version is sandbox.CgroupVersion.V1 and os.path.isdir(cpu):
                    limits.add("quota " + _read(os.path.join(cpu, "cpu.cfs_quota_us")))
        shell.join()
    if shell.error is not None:
        raise shell.error
    assert shell.out["timed_out"] is True, shell.out
    # Its cgroup said so: 256 tasks at most, one CPU's quota.
    assert str(TASK_LIMIT) in limits, limits
    if _CGROUPS.version is sandbox.CgroupVersion.V1:
        assert f"quota {round(CPU_LIMIT * 100_000)}" in limits, limits
    # It did bomb, up to the limit and never past it.
    assert TASK_LIMIT // 2 <= seen_max <= TASK_LIMIT, seen_max
    # The core answered all along (load on a shared machine: its median, not each).
    assert len(latencies) >= 3, latencies
    assert statistics.median(latencies) < 1.0, latencies
    # And nothing of it is left: its cgroup is gone, so every process in it was.
    assert _shell_groups() == []


_HOG = (
    "python3 -c \"import time; b = b'\\x01' * (400 << 20); print('held', flush=True);"
    ' time.sleep(10)"'
)


def test_memory_past_the_commands_ceiling_is_killed_in_the_command(
    tools_core: ToolsCore, owner: Client
) -> None:
    # Four processes of 400 MiB, each within its own address-space limit
    # (1 GiB), together past the command's 1 GiB ceiling.
    command = (
        f'pids=""; for i in 1 2 3 4; do {_HOG} & pids="$pids $!"; done; '
        "for p in $pids; do wait $p; echo rc=$?; done"
    )
    shell = _Shell(tools_core, owner, command, timeout_s=60)
    shell.start()
    with tools_core.client() as other:
        while shell.is_alive():
            other.status()  # the core answers while the command hoards
        shell.join()
    if shell.error is not None:
        raise shell.error
    text = str(shell.out["output"])
    kills, survivors = text.count("rc=137"), text.count("rc=0")
    # No more than two fit under the ceiling at once (each holds 400 MiB for
    # 10 s); the others were killed (SIGKILL: 128 + 9) by the OOM killer in
    # the command's own cgroup, not anywhere else on the machine.
    assert (kills + survivors, survivors <= 2) == (4, True), shell.out
    assert _shell_groups() == []
