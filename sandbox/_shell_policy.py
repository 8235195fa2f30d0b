"""The seccomp allowlist of a shell command (``Profile.shell``).

A command runs programs, so unlike every other kind it may ``execve``,
fork, and map code executable; what holds it is the rest of the box: its
own mount namespace (the workspace copy writable, the system read-only,
nothing else there), no network namespace of the host, Landlock (files and
signal scope: it can signal only processes of its own sandbox), no
capabilities, no_new_privs, rlimits. It may not leave its process group
(no ``setsid``, no ``setpgid``), so killing the group at the deadline ends
everything it started. The rest of the base list stands: no ptrace, no
mounts, no namespaces, no kernel attack surface, no TCP/UDP sockets.
"""

from __future__ import annotations

import errno

from sandbox import _linux
from sandbox._policy import ArgCheck, Rule, SeccompPolicy, allow, allow_if, deny
from sandbox._syscalls import executor_policy

#: Base rules replaced below.
_REPLACED = frozenset(
    {
        "mmap",
        "mprotect",
        "clone",
        "fork",
        "vfork",
        "execve",
        "execveat",
        "kill",
        "tgkill",
        "setrlimit",
        "prlimit64",
        "chmod",
        "fchmod",
        "fchmodat",
        "fchmodat2",
        "utime",
        "utimes",
        "utimensat",
        "futimesat",
        "chown",
        "fchown",
        "lchown",
        "fchownat",
        "setxattr",
        "lsetxattr",
        "fsetxattr",
        "removexattr",
        "lremovexattr",
        "fremovexattr",
        "setpgid",
        "setsid",
    }
)

_SHELL: list[Rule] = [
    *allow("mmap mprotect", "programs load their shared libraries executable"),
    allow_if(
        "clone",
        "processes and threads, never with a namespace flag",
        ArgCheck.masked(0, _linux.NAMESPACE_FLAGS, 0),
    ),
    *allow("fork vfork", "a shell starts programs"),
    *allow("execve execveat", "a shell runs programs; the view holds only the system's"),
    *allow(
        "kill tgkill",
        "signals: Landlock's scope keeps them inside this sandbox (the profile never degrades)",
    ),
    *allow("setrlimit prlimit64", "limits only fall without CAP_SYS_RESOURCE"),
    *allow(
        "chmod fchmod fchmodat fchmodat2 utime utimes utimensat futimesat"
        " chown fchown lchown fchownat",
        "modes, times and owners of its own copy (no CAP_CHOWN: only to itself);"
        " everything else is a read-only mount",
    ),
    *deny(
        "getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr"
        " setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr",
        "no extended attributes here (ls asks for ACLs): EOPNOTSUPP, as on a plain filesystem",
        errno.EOPNOTSUPP,
    ),
    *allow("creat", "open(O_CREAT|O_WRONLY|O_TRUNC) by its old name (tar)"),
    *allow("arch_prctl", "a new program sets up its thread-local storage"),
    *deny("setpgid setsid", "the command's process group is how its deadline ends it all"),
]


def shell_policy() -> SeccompPolicy:
    base = [r for r in executor_policy().rules if r.syscall not in _REPLACED]
    return SeccompPolicy(tuple(base + _SHELL))


__all__ = ["shell_policy"]
