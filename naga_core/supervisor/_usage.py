"""What a sandboxed child uses, read from outside it: CPU seconds and
threads from ``/proc``, the bytes and files of its work directory (and of
files it holds open after unlinking them). The supervisor compares these
with its limits (:class:`~naga_core.supervisor.WorkerTuning`) and kills a
child past one; the child cannot lie about them, nor hide from them.
"""

from __future__ import annotations

import collections
import os
import stat
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of every thread of ``pid``, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None


def thread_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


class CpuWindow:
    """CPU used over the last ``window_s`` seconds, in CPUs (1.0: one core busy)."""

    def __init__(self, window_s: float) -> None:
        self._window = window_s
        self._samples: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, now: float, cpu_s: float) -> float | None:
        """Record a sample; the share over a full window, once one has passed."""
        samples = self._samples
        samples.append((now, cpu_s))
        while len(samples) > 2 and samples[1][0] <= now - self._window:
            samples.popleft()
        t0, c0 = samples[0]
        if now - t0 < self._window:
            return None
        return (cpu_s - c0) / (now - t0)


@dataclass(frozen=True, slots=True)
class DiskUse:
    bytes: int
    files: int


def disk_use(directory: str, pid: int | None, *, max_entries: int) -> DiskUse:
    """Bytes (allocated blocks) and entries under ``directory``, plus the
    regular files ``pid`` holds open that are no longer there (unlinked but
    still filling the disk). Stops counting past ``max_entries``."""
    seen: set[tuple[int, int]] = set()
    used = files = 0
    stack = [directory]
    while stack and files <= max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    files += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    key = (st.st_dev, st.st_ino)
                    if key not in seen:
                        seen.add(key)
                        used += st.st_blocks * 512
        except OSError:
            continue
    if pid is not None:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and key not in seen:
                seen.add(key)
                used += st.st_blocks * 512
    return DiskUse(used, files)


__all__ = ["CpuWindow", "DiskUse", "cpu_seconds", "disk_use", "thread_count"]
