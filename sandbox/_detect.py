"""What this kernel offers the sandbox: :func:`detect`.

Every probe asks the kernel without changing this process: namespace probes
run in a fresh interpreter that exits at once, the seccomp TSYNC probe
passes a null filter the kernel rejects after checking the flag.

Not ``os.fork()``: the callers are threaded (gRPC, trio worker threads), and
a forked child of a threaded process that runs Python inherits locks held
by threads that do not exist in it; under load such a child aborted, the
probe read "no namespaces" and every launch that followed was refused as
degraded. A fork that execs at once (subprocess) runs nothing of ours.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from dataclasses import dataclass

import pyseccomp as seccomp  # pyright: ignore[reportMissingTypeStubs]

from sandbox import _landlock, _linux
from sandbox._cgroup import CgroupSupport, detect_cgroups

#: A probe interpreter starts in tens of milliseconds; a stuck one is no answer.
_PROBE_TIMEOUT_S = 10.0
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


@dataclass(frozen=True, slots=True)
class KernelReport:
    """The kernel's isolation features, as seen by this process."""

    release: str
    #: Seccomp filter mode, with SECCOMP_RET_KILL_PROCESS (Linux 4.14).
    seccomp: bool
    #: SECCOMP_FILTER_FLAG_TSYNC: one filter for every thread (Linux 3.17).
    seccomp_tsync: bool
    #: 0 when Landlock is absent or disabled at boot.
    landlock_abi: int
    no_new_privs: bool
    #: Whether this process can create a network namespace (as root directly,
    #: otherwise inside a new user namespace).
    net_namespaces: bool
    #: Whether this process can create a user namespace.
    user_namespaces: bool
    root: bool
    #: Whether this process can create a mount namespace (as root directly,
    #: otherwise inside a new user namespace).
    mount_namespaces: bool
    #: Where per-child cgroups (CPU quota, memory ceiling) can be made, or
    #: why not; None: not asked (a report built by hand).
    cgroups: CgroupSupport | None = None

    @property
    def landlock_tcp(self) -> bool:
        return self.landlock_abi >= 4

    @property
    def landlock_scopes(self) -> bool:
        return self.landlock_abi >= 6

    def lines(self) -> list[str]:
        """One line per feature, for ``naga doctor``."""

        def yes(flag: bool) -> str:
            return "yes" if flag else "no"

        abi = self.landlock_abi
        if abi == 0:
            landlock = "no (file rules fall back to file modes)"
        else:
            extras = [
                "TCP port rules" if abi >= 4 else "no TCP port rules (ABI < 4)",
                "signal/abstract-socket scopes" if abi >= 6 else "no scopes (ABI < 6)",
            ]
            landlock = f"ABI {abi}: " + ", ".join(extras)
        return [
            f"sandbox kernel: Linux {self.release}, running as "
            + ("root" if self.root else "an unprivileged user"),
            f"sandbox seccomp filter: {yes(self.seccomp)}",
            f"sandbox seccomp TSYNC (all threads): {yes(self.seccomp_tsync)}",
            f"sandbox no_new_privs: {yes(self.no_new_privs)}",
            f"sandbox Landlock: {landlock}",
            f"sandbox network namespaces: {yes(self.net_namespaces)}",
            f"sandbox mount namespaces (private filesystem view): {yes(self.mount_namespaces)}",
            f"sandbox user namespaces: {yes(self.user_namespaces)}",
            *([] if self.cgroups is None else [self.cgroups.line()]),
        ]


def _seccomp_filter_mode() -> bool:
    try:
        _linux.prctl(_linux.PR_GET_SECCOMP)
    except OSError:
        return False  # EINVAL: built without CONFIG_SECCOMP
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail", encoding="ascii") as f:
            return "kill_process" in f.read().split()
    except OSError:
        return False


def _seccomp_tsync() -> bool:
    number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, "seccomp")
    try:
        _linux.syscall(number, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, None)
    except OSError as e:
        # EINVAL: the flag is unknown. EFAULT (null filter) or EACCES (no
        # no_new_privs yet) come after the flag check, so it is known.
        return e.errno in (errno.EFAULT, errno.EACCES)
    return True  # unreachable in practice: a null filter is never accepted


#: Runs in the probe's interpreter: unshare(argv[1]), exit 0 if it worked.
_UNSHARE_PROBE = (
    "import ctypes, sys; "
    "sys.exit(0 if ctypes.CDLL(None, use_errno=True).unshare(int(sys.argv[1])) == 0 else 1)"
)


def _can_unshare(*flag_sets: int) -> list[bool]:
    """Whether ``unshare(flags)`` succeeds, for each of ``flag_sets``: each
    tried in its own child that exits at once, all started together."""
    children: list[subprocess.Popen[bytes] | None] = []
    for flags in flag_sets:
        try:
            children.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _UNSHARE_PROBE, str(flags)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={},
                )
            )
        except OSError:
            children.append(None)
    answers: list[bool] = []
    for child in children:
        if child is None:
            answers.append(False)
            continue
        try:
            answers.append(child.wait(_PROBE_TIMEOUT_S) == 0)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            answers.append(False)
    return answers


def _no_new_privs() -> bool:
    try:
        _linux.no_new_privs()
    except OSError:
        return False
    return True


def detect() -> KernelReport:
    """Probe the kernel. Costs a couple of forks; callers that launch often
    detect once and pass the report to ``launch(kernel=...)``."""
    root = os.geteuid() == 0
    # Without root, a net or mount namespace needs a user namespace of its own.
    own = 0 if root else _linux.CLONE_NEWUSER
    user_ns, net_ns, mount_ns = _can_unshare(
        _linux.CLONE_NEWUSER, own | _linux.CLONE_NEWNET, own | _linux.CLONE_NEWNS
    )
    return KernelReport(
        release=os.uname().release,
        seccomp=_seccomp_filter_mode(),
        seccomp_tsync=_seccomp_tsync(),
        landlock_abi=_landlock.abi_version(),
        no_new_privs=_no_new_privs(),
        net_namespaces=net_ns,
        user_namespaces=user_ns,
        root=root,
        mount_namespaces=mount_ns,
        cgroups=detect_cgroups(),
    )
