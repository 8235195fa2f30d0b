"""Attacks run inside a real sandboxed child (target ``tests.sandbox._attacks:run``).

``run([report_fd, attack, *params])`` runs one attack and writes one line to
``report_fd``: the errno name the attacker got (``EACCES``), an exception
name (``MemoryError``), or ``ESCAPED: ...`` when the attack worked. Attacks
the filter answers by killing the process write nothing; the test sees the
exit instead.

Everything is imported here, at module level, because the launcher imports
the target before it loads the seccomp filter: nothing can be mapped
executable afterwards.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import resource
import signal
import socket
import termios
from collections.abc import Callable

import pyseccomp  # pyright: ignore[reportMissingTypeStubs]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

_SYSCALLS = (
    "clone",
    "ptrace",
    "process_vm_readv",
    "io_uring_setup",
    "bpf",
    "userfaultfd",
    "keyctl",
    "prlimit64",
    "setrlimit",
    "setsockopt",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "pidfd_send_signal",
)
#: This architecture's numbers, resolved now (libseccomp is loaded already).
NR: dict[str, int] = {
    name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in _SYSCALLS
}

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PTRACE_ATTACH = 16
_KEYCTL_GET_KEYRING_ID = 0
_KEY_SPEC_SESSION_KEYRING = -3
_BPF_PROG_LOAD = 5


class Escaped(Exception):
    """The attack did what the sandbox should have stopped."""


def _syscall(name: str, *args: int) -> int:
    result = int(_libc.syscall(ctypes.c_long(NR[name]), *(ctypes.c_long(a) for a in args)))
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _errnos(*steps: Callable[[], object]) -> str:
    """Run each step; the errno names they failed with, comma-separated.
    A step that succeeds is an escape."""
    names: list[str] = []
    for step in steps:
        try:
            step()
        except OSError as e:
            names.append(errno.errorcode.get(e.errno or 0, str(e.errno)))
        else:
            raise Escaped(getattr(step, "__name__", "a step"))
    return ",".join(names)


# --- files ---------------------------------------------------------------------


def read_etc_passwd() -> str:
    return _errnos(lambda: open("/etc/passwd", "rb").read())


def read_core_keys(*paths: str) -> str:
    return _errnos(*(lambda p=p: open(p, "rb").read() for p in paths))


def write_outside(core_home: str) -> str:
    return _errnos(
        lambda: open(os.path.join(core_home, "planted"), "wb").write(b"x"),
        lambda: open(f"/tmp/naga-planted-{os.getpid()}", "wb").write(b"x"),
    )


def truncate_read_only(path: str) -> str:
    return _errnos(
        lambda: os.open(path, os.O_WRONLY | os.O_TRUNC),
        lambda: os.truncate(path, 0),
    )


def chmod_read_only(path: str) -> str:
    return _errnos(lambda: os.chmod(path, 0o777))


def rename_out(core_home: str) -> str:
    with open("mine", "wb") as f:
        f.write(b"x")
    return _errnos(lambda: os.rename("mine", os.path.join(core_home, "mine")))


def rename_in(key: str) -> str:
    return _errnos(lambda: os.rename(key, "stolen"))


def hardlink_in(key: str) -> str:
    return _errnos(lambda: os.link(key, "stolen"))


def symlink_out(key: str) -> str:
    os.symlink(key, "stolen")  # making the link is allowed; following it is not
    return _errnos(lambda: open("stolen", "rb").read())


def write_proc_self_mem() -> str:
    return _errnos(lambda: open("/proc/self/mem", "r+b"))


# --- network -------------------------------------------------------------------


def tcp_connect(port: str) -> str:
    def connect() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.connect(("127.0.0.1", int(port)))

    return _errnos(connect)


def tcp_bind(port: str) -> str:
    def bind() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("0.0.0.0", int(port)))
            s.listen()

    return _errnos(bind)


_MSG_FASTOPEN = 0x20000000
_TCP_FASTOPEN = 23
_TCP_FASTOPEN_CONNECT = 30


def tcp_fastopen(port: str) -> str:
    """TCP Fast Open to ``port``: sendto and sendmsg with MSG_FASTOPEN, the
    TCP_FASTOPEN_CONNECT option (then connect), the TCP_FASTOPEN option, and
    the option's level with junk in its upper 32 bits (the kernel reads the
    low 32 only)."""
    address = ("127.0.0.1", int(port))

    def sendto() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.sendto(b"exfiltrated", _MSG_FASTOPEN, address)

    def sendmsg() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.sendmsg([b"exfiltrated"], [], _MSG_FASTOPEN, address)

    def connect_option() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.IPPROTO_TCP, _TCP_FASTOPEN_CONNECT, 1)
            s.connect(address)
            s.send(b"exfiltrated")

    def listen_option() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.IPPROTO_TCP, _TCP_FASTOPEN, 5)

    def junk_level() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            one = ctypes.c_int(1)
            _syscall(
                "setsockopt",
                s.fileno(),
                (1 << 32) | socket.IPPROTO_TCP,
                _TCP_FASTOPEN_CONNECT,
                ctypes.addressof(one),
                ctypes.sizeof(one),
            )

    return _errnos(sendto, sendmsg, connect_option, listen_option, junk_level)


def listen_unbound() -> str:
    """listen() without bind(): the kernel binds an ephemeral port itself."""

    def listen() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.listen()
            raise Escaped(f"listening on port {s.getsockname()[1]}")

    return _errnos(listen)


def udp_send(port: str) -> str:
    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"exfiltrated", ("127.0.0.1", int(port)))

    return _errnos(send)


def unix_connect(path: str) -> str:
    def connect() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)

    return _errnos(connect)


def abstract_connect(name: str) -> str:
    def connect() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect("\0" + name)

    return _errnos(connect)


def raw_socket() -> str:
    return _errnos(
        lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW),
        lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW),
    )


def x32_udp_socket() -> str:
    """socket(AF_INET, SOCK_DGRAM) by its x32 number: the same audit arch as
    x86_64, so a filter matching numbers alone would miss it."""
    number = 0x40000000 | pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "socket")
    result = int(_libc.syscall(ctypes.c_long(number), 2, 2, 0))
    if result == -1:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    raise Escaped(f"x32 socket {result}")


# --- processes -----------------------------------------------------------------


def execve_shell() -> str:
    os.execv("/bin/sh", ["sh", "-c", "echo escaped"])
    raise Escaped("execve returned")  # pragma: no cover


def memfd_exec() -> str:
    fd = os.memfd_create("payload")  # the filter refuses this step
    with open("/bin/true", "rb") as f:
        os.write(fd, f.read())
    os.execv(f"/proc/self/fd/{fd}", ["true"])
    raise Escaped("exec from memfd")  # pragma: no cover


def clone_namespace() -> str:
    def clone() -> None:
        if _syscall("clone", _CLONE_NEWNET | signal.SIGCHLD, 0, 0, 0, 0) == 0:
            os._exit(0)  # an escaped child must not run the rest of the test

    return _errnos(clone)


def unshare_user() -> str:
    def unshare() -> None:
        if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return _errnos(unshare)


def fork_bomb() -> str:
    def fork() -> None:
        for _ in range(10_000):
            if os.fork() == 0:
                os._exit(0)

    return _errnos(fork)


def ptrace_sentinel(pid: str) -> str:
    return _errnos(lambda: _syscall("ptrace", _PTRACE_ATTACH, int(pid), 0, 0))


def process_vm_readv_sentinel(pid: str) -> str:
    buf = ctypes.create_string_buffer(64)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
    remote = (ctypes.c_void_p * 2)(0x400000, 64)
    return _errnos(
        lambda: _syscall(
            "process_vm_readv",
            int(pid),
            ctypes.addressof(local),
            1,
            ctypes.addressof(remote),
            1,
            0,
        )
    )


def kill_sentinel(pid: str) -> str:
    return _errnos(
        lambda: os.kill(int(pid), signal.SIGKILL),
        lambda: os.killpg(os.getpgid(int(pid)), signal.SIGKILL),
    )


def signal_routes(pid: str) -> str:
    """Every other way to signal another process: kill(-1) (all it may
    signal), tkill, tgkill, rt_sigqueueinfo, a pidfd (open, then send).
    Signal 0: the same permission check, and nothing delivered should a
    layer fail (kill(-1) as root would reach every process of the machine)."""
    target = int(pid)
    info = ctypes.create_string_buffer(128)
    return _errnos(
        lambda: os.kill(-1, 0),
        lambda: _syscall("tkill", target, 0),
        lambda: _syscall("tgkill", target, target, 0),
        lambda: _syscall("rt_sigqueueinfo", target, 0, ctypes.addressof(info)),
        lambda: os.pidfd_open(target),
        lambda: _syscall("pidfd_send_signal", 0, 0, 0, 0),
    )


def sigio_sentinel(pid: str) -> str:
    r, _w = os.pipe()
    return _errnos(
        lambda: fcntl.fcntl(r, fcntl.F_SETOWN, int(pid)),
        lambda: fcntl.fcntl(r, 10, signal.SIGKILL),  # F_SETSIG
    )


def raise_rlimits() -> str:
    # Raw syscalls: resource.setrlimit turns EPERM into a ValueError.
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    more = (ctypes.c_uint64 * 2)(nofile_hard + 1, nofile_hard + 1)
    unlimited = (ctypes.c_uint64 * 2)(2**64 - 1, 2**64 - 1)
    return _errnos(
        lambda: _syscall("prlimit64", 0, resource.RLIMIT_NOFILE, ctypes.addressof(more), 0),
        lambda: _syscall("setrlimit", resource.RLIMIT_AS, ctypes.addressof(unlimited)),
    )


# --- memory and the kernel ------------------------------------------------------


def mlock_memory() -> str:
    """Pin pages in RAM (memory the kernel can then never reclaim)."""
    buffer = mmap.mmap(-1, 1 << 20)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))

    def lock() -> None:
        if _libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(1 << 20)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return _errnos(lock)


def mprotect_exec() -> str:
    page = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))

    def protect() -> None:
        if _libc.mprotect(address, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return _errnos(
        protect,
        lambda: mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_EXEC),
    )


def kernel_surface(syscall: str) -> str:
    """One of the syscalls behind many kernel exploits, with valid arguments."""
    params = ctypes.create_string_buffer(120)
    attr = ctypes.create_string_buffer(128)
    calls: dict[str, Callable[[], int]] = {
        "io_uring_setup": lambda: _syscall("io_uring_setup", 8, ctypes.addressof(params)),
        "bpf": lambda: _syscall("bpf", _BPF_PROG_LOAD, ctypes.addressof(attr), 128),
        "userfaultfd": lambda: _syscall("userfaultfd", 0),
        "keyctl": lambda: _syscall("keyctl", _KEYCTL_GET_KEYRING_ID, _KEY_SPEC_SESSION_KEYRING, 0),
    }
    return _errnos(calls[syscall])


def ioctl_tiocsti() -> str:
    return _errnos(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))


# --- resources ---------------------------------------------------------------------


def memory_bomb() -> str:
    hoard: list[bytearray] = []
    try:
        while True:
            hoard.append(bytearray(64 << 20))
    except MemoryError:
        hoard.clear()
        return "MemoryError"


def renice() -> str:
    """Its niceness, then an attempt to take the CPU back (niceness 0)."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    return f"nice={nice}," + _errnos(lambda: os.setpriority(os.PRIO_PROCESS, 0, 0))


def cpu_spin() -> str:
    while True:
        pass


def fd_exhaustion() -> str:
    def exhaust() -> None:
        while True:
            os.dup(0)

    return _errnos(exhaust)


def disk_fill() -> str:
    def fill() -> None:
        chunk = b"\0" * (1 << 20)
        with open("fill", "wb") as f:
            while True:
                f.write(chunk)
                f.flush()

    return _errnos(fill)


def segfault() -> str:
    ctypes.string_at(0)
    raise Escaped("read address 0")  # pragma: no cover


def stop_self() -> str:
    os.kill(os.getpid(), signal.SIGSTOP)
    return "continued"


def block(fd: str) -> str:
    """Wait until the test closes the other end of pipe ``fd``."""
    os.read(int(fd), 1)
    return "unblocked"


ATTACKS: dict[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        read_etc_passwd,
        read_core_keys,
        write_outside,
        truncate_read_only,
        chmod_read_only,
        rename_out,
        rename_in,
        hardlink_in,
        symlink_out,
        write_proc_self_mem,
        tcp_connect,
        tcp_bind,
        tcp_fastopen,
        listen_unbound,
        udp_send,
        unix_connect,
        abstract_connect,
        raw_socket,
        x32_udp_socket,
        execve_shell,
        memfd_exec,
        clone_namespace,
        unshare_user,
        fork_bomb,
        ptrace_sentinel,
        process_vm_readv_sentinel,
        kill_sentinel,
        sigio_sentinel,
        signal_routes,
        raise_rlimits,
        mlock_memory,
        mprotect_exec,
        kernel_surface,
        ioctl_tiocsti,
        memory_bomb,
        renice,
        cpu_spin,
        fd_exhaustion,
        disk_fill,
        segfault,
        stop_self,
        block,
    )
}


def run(args: list[str]) -> int:
    report_fd, name, *params = args
    try:
        outcome = ATTACKS[name](*params)
    except Escaped as e:
        outcome = f"ESCAPED: {e}"
    except OSError as e:
        outcome = errno.errorcode.get(e.errno or 0, str(e))
    os.write(int(report_fd), outcome.encode() + b"\n")
    return 0
