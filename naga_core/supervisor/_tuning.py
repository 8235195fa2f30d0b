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
        ):
            value: float = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise RestartPolicyInvalid(f"{name} must be a positive number, got {value!r}")
        if isinstance(self.memory_bytes, bool) or self.memory_bytes < 16 * _MIB:
            raise RestartPolicyInvalid(
                f"memory_bytes must be at least 16 MiB, got {self.memory_bytes!r}"
            )


__all__ = ["WorkerTuning"]
