"""How a sandboxed child ended, in words a supervisor can log and act on."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

_CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
)


class ExitKind(enum.Enum):
    #: It returned or called exit; see ``code``.
    EXITED = "exited"
    #: A signal ended it that the supervisor did not send: the seccomp filter
    #: (SIGSYS), an rlimit (SIGXCPU, SIGXFSZ), a crash (SIGSEGV...).
    SIGNALED = "signaled"
    #: The supervisor killed it at its deadline.
    DEADLINE = "deadline"
    #: The supervisor found it stopped and killed it.
    STOPPED = "stopped"
    #: The supervisor killed it on request (``kill``/``close``).
    KILLED = "killed"


@dataclass(frozen=True, slots=True)
class Exit:
    kind: ExitKind
    #: Exit code when ``kind`` is EXITED.
    code: int | None
    #: The signal that ended it, otherwise.
    signal: int | None
    #: One line for logs and error messages.
    cause: str
    #: The kernel's OOM killer ended it at its cgroup's memory ceiling.
    by_oom_killer: bool = False

    def __str__(self) -> str:
        return self.cause

    @property
    def by_seccomp(self) -> bool:
        return self.kind is ExitKind.SIGNALED and self.signal == signal.SIGSYS


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _signal_cause(signum: int) -> str:
    name = _name(signum)
    if signum == signal.SIGSYS:
        return f"killed by the seccomp filter for a forbidden syscall ({name})"
    if signum == signal.SIGXCPU:
        return f"killed at its CPU time limit ({name})"
    if signum == signal.SIGXFSZ:
        return f"killed at its file size limit ({name})"
    if signum == signal.SIGKILL:
        return f"killed ({name}): CPU hard limit, out of memory, or another process"
    if signum in _CRASH_SIGNALS:
        return f"crashed ({name})"
    return f"killed by {name}"


def oom_cause(memory_limit: int | None) -> str:
    """The cause of an end by the kernel's OOM killer in the child's cgroup:
    the memory ceiling's containment, as the supervisor's own check says it."""
    at = "" if memory_limit is None else f" of {memory_limit / (1 << 20):.0f} MiB"
    return (
        "memory ceiling exceeded: killed (SIGKILL) by the kernel's OOM killer "
        f"at its cgroup's limit{at}"
    )


def describe_status(
    returncode: int,
    supervisor: ExitKind | None = None,
    *,
    oom_killed: bool = False,
    memory_limit: int | None = None,
) -> Exit:
    """An :class:`Exit` from ``Popen.returncode`` (negative: the signal).

    ``supervisor`` is why the supervisor sent SIGKILL, if it did; it names the
    exit only when SIGKILL is indeed what ended the child (it may have
    exited on its own just before). ``oom_killed``: the child's cgroup
    recorded an OOM kill (``memory_limit``, its ceiling); it names a SIGKILL
    the supervisor did not send.
    """
    if returncode >= 0:
        return Exit(ExitKind.EXITED, returncode, None, f"exited with code {returncode}")
    signum = -returncode
    if signum == signal.SIGKILL and supervisor is not None:
        cause = {
            ExitKind.DEADLINE: "killed (SIGKILL) at its deadline",
            ExitKind.STOPPED: "found stopped, making no progress; killed (SIGKILL)",
            ExitKind.KILLED: "killed (SIGKILL) by its supervisor",
        }.get(supervisor, f"killed (SIGKILL) by its supervisor ({supervisor.value})")
        return Exit(supervisor, None, signum, cause)
    if signum == signal.SIGKILL and oom_killed:
        return Exit(ExitKind.SIGNALED, None, signum, oom_cause(memory_limit), by_oom_killer=True)
    return Exit(ExitKind.SIGNALED, None, signum, _signal_cause(signum))
