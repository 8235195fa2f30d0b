"""How the supervisor watches its workers: the numbers, in one frozen object.

Defaults suit a personal machine; tests pass small ones. A plugin's
manifest may ask for a lower memory ceiling or call timeout, never a
higher one than these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from naga_core.supervisor._restart import RestartPolicy, RestartPolicyInvalid

_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class WorkerTuning:
    #: Seconds between heartbeats (Ping).
    heartbeat_s: float = 2.0
    #: A Pong later than this after its Ping means the worker is hung.
    heartbeat_timeout_s: float = 5.0
    #: Seconds between checks of resident memory and of a stopped process.
    health_s: float = 0.5
    #: Launch to Hello: a cold interpreter importing protobuf and pydantic on
    #: a loaded machine can take seconds.
    hello_timeout_s: float = 20.0
    #: ``sandbox.launch``'s own deadline for the child's setup report.
    launch_timeout_s: float = 15.0
    #: The longest any call may run; a manifest may ask for less.
    call_timeout_s: float = 30.0
    #: Resident memory above which a worker is killed (a leak); a manifest may ask for less.
    memory_bytes: int = 256 * _MIB
    #: After Shutdown, how long a worker gets to exit before it is killed.
    shutdown_grace_s: float = 2.0
    #: After its socket closes, how long a worker gets to exit by itself.
    eof_grace_s: float = 1.0
    #: Frames a second a worker's session reads, on average, and how many
    #: may come at once: past them the core reads it slower (its sends
    #: block), so a flood costs the core's loop a bounded share.
    frames_per_s: float = 2000.0
    frame_burst: int = 4000
    #: Threads a worker may run; past them it is killed.
    max_threads: int = 64
    #: CPU a worker may use over ``cpu_window_s``, in CPUs (0.9: 90% of one
    #: core); past it it is killed (a spinning thread never ends otherwise).
    cpu_share: float = 0.9
    cpu_window_s: float = 30.0
    #: Where the kernel has cgroups (sandbox.detect_cgroups): the hard CPU
    #: quota of a worker's cgroup, in CPUs, held within each 100 ms period
    #: however many threads spin; and its memory ceiling, this many times
    #: the resident ceiling above (the supervisor's check stays the clear
    #: cause; the kernel's OOM killer stops what grows faster than it looks).
    cpu_max: float = 1.0
    cgroup_memory_factor: int = 2
    #: What a worker's work directory may hold (bytes, files), counting files
    #: it keeps open after unlinking them; checked every ``disk_check_s``,
    #: past it the worker is killed.
    disk_bytes: int = 1 << 30
    disk_files: int = 10_000
    disk_check_s: float = 2.0
    #: A worker's capability token expires this long after it is minted; a
    #: fresh one is sent when half of it is gone, and every token of a
    #: worker is revoked when the worker ends.
    token_ttl_s: float = 3600.0
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    #: Run plugins with the isolation layers this kernel lacks (recorded per worker).
    allow_degraded: bool = False

    def __post_init__(self) -> None:
        for name in (
            "heartbeat_s",
            "heartbeat_timeout_s",
            "health_s",
            "hello_timeout_s",
            "launch_timeout_s",
            "call_timeout_s",
            "shutdown_grace_s",
            "eof_grace_s",
            "token_ttl_s",
            "frames_per_s",
            "cpu_share",
            "cpu_window_s",
            "cpu_max",
            "disk_check_s",
        ):
            value: float = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise RestartPolicyInvalid(f"{name} must be a positive number, got {value!r}")
        for name in (
            "frame_burst",
            "max_threads",
            "disk_bytes",
            "disk_files",
            "cgroup_memory_factor",
        ):
            count: object = getattr(self, name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise RestartPolicyInvalid(f"{name} must be a positive integer, got {count!r}")
        if isinstance(self.memory_bytes, bool) or self.memory_bytes < 16 * _MIB:
            raise RestartPolicyInvalid(
                f"memory_bytes must be at least 16 MiB, got {self.memory_bytes!r}"
            )


__all__ = ["WorkerTuning"]
