"""A sandboxed child as a trio supervisor sees it.

``sandbox.launch`` blocks for the child's start (about 85 ms), so it runs in
a worker thread, shielded: a launch cancelled half-way would leave a
process nobody owns. Whatever :func:`sandboxed` yields is killed and reaped
when the block ends, however it ends. The end of a child is awaited on its
pidfd; its memory and whether it is stopped are read from ``/proc``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable

import trio

import sandbox

#: How often the exit is polled when the kernel has no pidfd (before 5.3).
_POLL_S = 0.05


@contextlib.asynccontextmanager
async def sandboxed(launch: Callable[[], sandbox.Sandboxed]) -> AsyncGenerator[sandbox.Sandboxed]:
    """Run the blocking ``launch`` in a thread; yield the child; kill and reap it at the end."""
    child = await _launch_shielded(launch)
    try:
        yield child
    finally:
        # SIGKILL and reap: the kernel makes this prompt, so it runs inline,
        # even when the block ends by cancellation.
        child.kill()


async def _launch_shielded(launch: Callable[[], sandbox.Sandboxed]) -> sandbox.Sandboxed:
    with trio.CancelScope(shield=True):
        return await trio.to_thread.run_sync(launch)
    raise AssertionError("unreachable: a shielded scope is not cancelled")


async def wait_exit(child: sandbox.Sandboxed) -> sandbox.Exit:
    """Wait until ``child`` ends by itself; how it ended."""
    while True:
        if child.pidfd is not None:
            await trio.lowlevel.wait_readable(child.pidfd)
        else:
            await trio.sleep(_POLL_S)
        end = child.poll()
        if end is not None:
            return end


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory (VmRSS), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as a mapping (empty if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


__all__ = ["proc_status", "resident_bytes", "sandboxed", "wait_exit"]
