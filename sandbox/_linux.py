"""Thin ctypes wrappers over the Linux calls the sandbox needs and Python's
``os`` module lacks (prctl, unshare, capset, raw syscalls).

Each wrapper raises ``OSError`` with the C ``errno`` on failure, so callers
handle one kind of error for every layer.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

_libc = ctypes.CDLL(None, use_errno=True)

_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)

_unshare = _libc.unshare
_unshare.restype = ctypes.c_int
_unshare.argtypes = (ctypes.c_int,)

# <linux/prctl.h>
PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_NAME = 15
PR_GET_NAME = 16
PR_GET_SECCOMP = 21
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_VMA = 0x53564D41

# <linux/sched.h>
CLONE_NEWNS = 0x00020000  # mount namespace
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_VM = 0x00000100
CLONE_FS = 0x00000200
CLONE_FILES = 0x00000400
CLONE_SIGHAND = 0x00000800
CLONE_VFORK = 0x00004000
CLONE_THREAD = 0x00010000
NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)

# <linux/capability.h>
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


_capset = _libc.capset
_capset.restype = ctypes.c_int
_capset.argtypes = (ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData))


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def syscall(number: int, *args: object) -> int:
    """A raw syscall; its non-negative result, or ``OSError``.

    Integer arguments are widened to C longs: a variadic call would otherwise
    pass them as 32-bit ints and leave the upper half of the register undefined.
    """
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = int(_syscall(ctypes.c_long(number), *converted))
    if result < 0:
        raise _fail(f"syscall {number}")
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    result = int(_prctl(option, arg2, arg3, arg4, arg5))
    if result < 0:
        raise _fail(f"prctl({option})")
    return result


def die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` (its launcher) dies; at once if
    it died already (then this process was reparented: ``getppid`` says
    so, after the request, so no death falls between the two)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def set_no_new_privs() -> None:
    """No execve can ever grant privileges again (setuid bits, file caps)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def no_new_privs() -> bool:
    return prctl(PR_GET_NO_NEW_PRIVS) == 1


def unshare(flags: int) -> None:
    if _unshare(flags) != 0:
        raise _fail("unshare")


def map_ids(uid: int, gid: int) -> None:
    """Map our own uid/gid into the user namespace just entered, so files we
    create keep their owner (an unmapped fsuid makes creating files fail)."""
    # setgroups must be denied before an unprivileged process may write gid_map.
    with open("/proc/self/setgroups", "w", encoding="ascii") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w", encoding="ascii") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w", encoding="ascii") as f:
        f.write(f"{gid} {gid} 1")


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # the loop below stops at the first unknown capability


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets.

    Root keeps uid 0 but loses every privilege root has beyond owning its
    files: raising hard rlimits, bypassing file modes, raw sockets, mknod.
    """
    for cap in range(_last_capability() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as e:
            # EINVAL: past the kernel's last capability. EPERM: we do not hold
            # CAP_SETPCAP (an unprivileged caller), whose bounding set can
            # never grant anything back without exec of a privileged file,
            # which no_new_privs already forbids.
            if e.errno in (errno.EINVAL, errno.EPERM):
                break
            raise
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _capset(ctypes.byref(header), data) != 0:
        raise _fail("capset")


def open_task_dir() -> int:
    """A descriptor on /proc/self/task, for :func:`thread_count` once Landlock
    hides /proc (a descriptor opened before keeps working)."""
    return os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def thread_count(task_dir: int) -> int:
    """Threads in this process, from a descriptor of :func:`open_task_dir`."""
    if task_dir < 0:
        raise OSError(errno.ENOENT, "cannot count threads: /proc/self/task is unavailable")
    return len(os.listdir(task_dir))
