"""Landlock through its three syscalls (there is no libc wrapper).

The launcher decides the ruleset for the ABI the kernel reports
(:func:`access_for_abi`); the child only builds and enforces it
(:func:`enforce`). Landlock restricts the calling thread and the threads and
processes it creates afterwards, so the child enforces it while it is still
single-threaded.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable

from sandbox import _linux

# Same numbers on every architecture (allocated after the syscall tables merged).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

# LANDLOCK_ACCESS_FS_*
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
# LANDLOCK_ACCESS_NET_* (ABI 4)
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
# LANDLOCK_SCOPE_* (ABI 6)
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

#: The only rights a rule on a file (not a directory) may carry.
_FILE_ACCESS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

#: Read-only hierarchies: list and read, nothing else (no execute: the
#: sandbox never execs, and seccomp kills execve anyway).
READ_ONLY = FS_READ_FILE | FS_READ_DIR
#: The work directory: everything but executing and device nodes.
READ_WRITE = (
    FS_READ_FILE
    | FS_READ_DIR
    | FS_WRITE_FILE
    | FS_TRUNCATE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SYM
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_REFER
)
#: Character devices such as /dev/null: read, write, and O_TRUNC (which
#: ``open(os.devnull, "w")`` passes).
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or off."""
    try:
        return _linux.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    except OSError:
        return 0  # ENOSYS (not built) or EOPNOTSUPP (built, disabled at boot)


def fs_access_for_abi(abi: int) -> int:
    """Every filesystem right the given ABI can restrict."""
    if abi <= 0:
        return 0
    if abi == 1:
        return (1 << 13) - 1
    if abi == 2:
        return (1 << 14) - 1
    if abi < 5:
        return (1 << 15) - 1
    return (1 << 16) - 1


def net_access_for_abi(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes_for_abi(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def enforce(
    *,
    handled_fs: int,
    handled_net: int,
    scoped: int,
    paths: Iterable[tuple[str, int]],
    bind_ports: Iterable[int],
    connect_ports: Iterable[int],
) -> None:
    """Build the ruleset and restrict this thread (and its future children).

    ``paths`` grants ``access`` beneath each path; every handled right not
    granted somewhere is denied. Raises ``OSError`` naming the path or port
    whose rule the kernel refused.
    """
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    ruleset = _linux.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    try:
        for path, access in paths:
            _add_path_rule(ruleset, path, access & handled_fs)
        for port in bind_ports:
            _add_port_rule(ruleset, NET_BIND_TCP, port)
        for port in connect_ports:
            _add_port_rule(ruleset, NET_CONNECT_TCP, port)
        _linux.syscall(_SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise OSError(e.errno, f"landlock rule for {path}: {e.strerror}") from e
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_ACCESS
        rule = _PathBeneathAttr(access, fd)
        try:
            _linux.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
        except OSError as e:
            raise OSError(e.errno, f"landlock rule for {path}: {e.strerror}") from e
    finally:
        os.close(fd)


def _add_port_rule(ruleset: int, access: int, port: int) -> None:
    rule = _NetPortAttr(access, port)
    try:
        _linux.syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0)
    except OSError as e:
        raise OSError(e.errno, f"landlock rule for TCP port {port}: {e.strerror}") from e
