"""One shell command in a sandbox of its own over the workspace
(``sandbox.Profile.shell``), its output captured and capped, its changes
read back as staged writes. The command works in a staging overlay over the
live tree where this kernel mounts one (ADR 0034), else in a staged copy
(ADR 0015); either way its writes never reach the live tree.

Blocking: the core calls :meth:`ShellRunner.run` on a thread. The command's
process group ends at its deadline or when its shell exits, whichever is
first, so nothing it started outlives the call (it cannot leave the group:
the profile refuses setsid and setpgid).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import sandbox
from naga_core.workspace._changes import Staged
from naga_core.workspace._overlay_stage import OverlayStage
from naga_core.workspace._stage import Stage

log = logging.getLogger("naga.workspace")

_MIB = 1 << 20
#: Output kept per command (the rest is counted and dropped).
OUTPUT_LIMIT = 16 << 10
#: Memory a command may map (RLIMIT_AS, per process), and all of its
#: processes together may use (its cgroup's ceiling).
MEMORY_LIMIT = 1 << 30
#: Processes and threads of one command at once (RLIMIT_NPROC, which root
#: is exempt from, and its cgroup's pids.max, which holds root too).
TASK_LIMIT = 256
#: CPUs one command may use in every 100 ms (its cgroup's quota): the core
#: and everyone else keep the rest of a machine however much it forks.
CPU_LIMIT = 1.0
EXEC_TARGET = "naga_plugins.tools._exec:main"

log = logging.getLogger("naga.workspace")


@dataclass(frozen=True, slots=True)
class ShellOutcome:
    exit_code: int | None
    #: How it ended, in words ("exited with code 0", "killed at its deadline ...").
    ended: str
    timed_out: bool
    output: str
    #: Bytes of output past the limit, dropped.
    dropped: int
    staged: dict[str, Staged]


class _Reader(threading.Thread):
    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        super().__init__(name="shell-output", daemon=True)
        self._pipe = pipe
        self._limit = limit
        self.kept: bytearray = bytearray()
        self.dropped: int = 0

    def run(self) -> None:
        fd = self._pipe.fileno()
        while chunk := os.read(fd, 65536):
            room = self._limit - len(self.kept)
            self.kept += chunk[: max(room, 0)]
            self.dropped += max(len(chunk) - max(room, 0), 0)
        self._pipe.close()


class ShellRunner:
    """Runs commands for one home: ``stage_dir`` is the staging place
    (outside the workspace), ``kernel`` a sandbox.detect report to reuse,
    ``forker`` the owner's :class:`sandbox.Forker` (it forks every command);
    ``overlay``: whether to stage in an overlay (None: if this kernel mounts
    one, probed at the first command; False: always a staged copy)."""

    def __init__(
        self,
        stage_dir: str,
        kernel: sandbox.KernelReport | None = None,
        *,
        forker: sandbox.Forker,
        overlay: bool | None = None,
    ) -> None:
        self.stage_dir = stage_dir
        self._kernel = kernel
        self._forker = forker
        self._overlay = overlay
        #: Why the last command ran over a staged copy (None: an overlay, or not asked).
        self.copy_because: str | None = None

    def _use_overlay(self) -> bool:
        if self._overlay is None:
            scratch = self.stage_dir.rstrip("/") + ".probe"
            os.makedirs(scratch, mode=0o700, exist_ok=True)
            why = sandbox.probe_overlay(scratch, root=os.geteuid() == 0)
            self._overlay = why is None
            if why is not None:
                self.copy_because = f"no staging overlay on this kernel: {why}"
                log.warning("shell commands run over a staged copy of the workspace: %s", why)
        return self._overlay

    def _profile(
        self, live: str, timeout_s: float, read_only: Sequence[str]
    ) -> tuple[Stage | OverlayStage, sandbox.Profile]:
        rlimits = sandbox.Rlimits(
            address_space=MEMORY_LIMIT,
            cpu_seconds=max(1, int(timeout_s) + 1),
            open_files=256,
            file_size=64 * _MIB,
            processes=TASK_LIMIT,
        )
        os.makedirs(self.stage_dir, mode=0o700, exist_ok=True)
        if self._use_overlay():
            over = OverlayStage(live, self.stage_dir)
            over.prepare()
            try:
                layers = sandbox.Overlay.of(live, over.upper, over.work)
            except sandbox.ProfileInvalid as exc:  # a workspace path mount options cannot carry
                self.copy_because = str(exc)
            else:
                self.copy_because = None
                return over, sandbox.Profile.shell(
                    work_dir=over.merged, rlimits=rlimits, read_only=read_only, overlay=layers
                )
        stage = Stage(live, self.stage_dir)
        stage.prepare()
        return stage, sandbox.Profile.shell(
            work_dir=self.stage_dir, rlimits=rlimits, read_only=read_only
        )

    def _cgroup(self) -> sandbox.Cgroup | None:
        """A cgroup of its own for one command (CPU, memory, task count), or
        None where the kernel offers none (then RLIMIT_NPROC alone bounds
        its processes, and not for root)."""
        support = None if self._kernel is None else self._kernel.cgroups
        if support is None or not support.usable:
            return None
        limits = sandbox.CgroupLimits(cpus=CPU_LIMIT, memory_bytes=MEMORY_LIMIT, pids=TASK_LIMIT)
        try:
            return sandbox.Cgroup.create(support, "shell", limits)
        except OSError as exc:
            log.warning("shell: the command runs without a cgroup of its own: %s", exc)
            return None

    def run(
        self,
        live: str,
        argv: list[str],
        timeout_s: float,
        *,
        output_limit: int = OUTPUT_LIMIT,
        read_only: Sequence[str] = (),
    ) -> ShellOutcome:
        """Run ``argv`` over ``live``; ``read_only``: folders it may also
        read (and run programs from), e.g. the skill versions its turn viewed."""
        stage, profile = self._profile(live, timeout_s, read_only)
        cgroup = self._cgroup()
        try:
            handle = sandbox.launch(
                profile,
                EXEC_TARGET,
                argv,
                forker=self._forker,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                kernel=self._kernel,
                cgroup=cgroup,
            )
        except BaseException:
            if cgroup is not None:
                with contextlib.suppress(OSError):
                    cgroup.remove()
            raise
        assert handle.stdout is not None
        reader = _Reader(handle.stdout, output_limit)
        reader.start()
        try:
            ended = handle.wait(timeout_s)
        finally:
            # Whatever it left running in its group ends with it; in its
            # cgroup too (every process it started is there), before the
            # handle removes the cgroup.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(handle.pid, signal.SIGKILL)
            if cgroup is not None and not cgroup.kill_all():
                log.warning("shell: processes of %s outlived the kill", cgroup.dirs[0])
            handle.close()
            # Its orphans are reaped by init, not by us: their cgroup stays
            # busy until then.
            if cgroup is not None and not cgroup.remove(timeout=5.0):
                log.warning("shell: its cgroup %s is still busy; left behind", cgroup.dirs[0])
        reader.join(5.0)  # its writers are dead: the pipe is at its end
        staged = stage.staged()
        return ShellOutcome(
            exit_code=ended.code,
            ended=str(ended),
            timed_out=ended.kind is sandbox.ExitKind.DEADLINE,
            output=bytes(reader.kept).decode("utf-8", "replace"),
            dropped=reader.dropped,
            staged=staged,
        )


__all__ = ["CPU_LIMIT", "MEMORY_LIMIT", "OUTPUT_LIMIT", "TASK_LIMIT", "ShellOutcome", "ShellRunner"]
