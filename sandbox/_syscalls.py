"""The seccomp allowlists of each process kind, with the reason for each rule.

Everything not allowed here fails with EPERM (the default action), so a
Python worker sees a clean ``PermissionError``. ``clone3`` fails with ENOSYS
so that glibc falls back to ``clone``, whose flags a classic filter can
inspect. A few syscalls kill the process outright: those with no use in a
Python worker beyond attacking another process or the host, where carrying on
after the attempt is pointless.

The tables are the source docs/design/sandbox.md is checked against.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import socket
import termios

from sandbox import _linux
from sandbox._policy import (
    Action,
    ArgCheck,
    Rule,
    SeccompPolicy,
    allow,
    allow_if,
    allow_values,
    deny,
    kill,
)

_SOCK_TYPE_MASK = 0xF
#: MSG_FASTOPEN (Linux); socket.MSG_FASTOPEN is missing from some builds.
_MSG_FASTOPEN = 0x20000000
#: TCP options a client or server sets in ordinary use (netinet/tcp.h).
_TCP_OPTIONS = (
    1,  # TCP_NODELAY
    2,  # TCP_MAXSEG
    4,  # TCP_KEEPIDLE
    5,  # TCP_KEEPINTVL
    6,  # TCP_KEEPCNT
    8,  # TCP_LINGER2
    9,  # TCP_DEFER_ACCEPT
    10,  # TCP_WINDOW_CLAMP
    12,  # TCP_QUICKACK
    13,  # TCP_CONGESTION
    18,  # TCP_USER_TIMEOUT
    25,  # TCP_NOTSENT_LOWAT
)
_THREAD_FLAGS = _linux.CLONE_VM | _linux.CLONE_THREAD | _linux.CLONE_SIGHAND

_BASE: list[Rule] = [
    # --- memory ------------------------------------------------------------
    *allow("brk munmap mremap madvise msync mincore", "the allocator and mmap module"),
    allow_if(
        "mmap",
        "unless PROT_EXEC: no new executable code once the filter is on",
        ArgCheck.bits_clear(2, mmap.PROT_EXEC),
    ),
    allow_if(
        "mprotect",
        "unless PROT_EXEC (guard pages and RELRO still work)",
        ArgCheck.bits_clear(2, mmap.PROT_EXEC),
    ),
    # --- threads and processes -------------------------------------------
    allow_if(
        "clone",
        "threads only: CLONE_VM|CLONE_THREAD|CLONE_SIGHAND set, no namespace flag"
        " (fork, vfork-style spawn and new namespaces are refused)",
        ArgCheck.masked(0, _THREAD_FLAGS | _linux.NAMESPACE_FLAGS, _THREAD_FLAGS),
    ),
    *deny(
        "clone3",
        "its flags sit in a struct seccomp cannot read; ENOSYS makes glibc fall back to clone",
        errno.ENOSYS,
    ),
    *deny("fork vfork", "no child processes"),
    *allow("futex set_robust_list rseq set_tid_address", "thread start, locks, glibc"),
    *allow("exit exit_group", "leaving"),
    *allow("wait4 waitid", "harmless without children: ECHILD"),
    *allow("gettid getpid getppid getpgrp", "identity queries"),
    *allow_values("getpgid", 0, (0,), "only about itself (pid 0)"),
    *allow_values("getsid", 0, (0,), "only about itself (pid 0)"),
    *allow(
        "getuid geteuid getgid getegid getgroups getresuid getresgid capget", "identity queries"
    ),
    *allow(
        "sched_yield sched_getaffinity sched_getparam sched_getscheduler"
        " sched_get_priority_max sched_get_priority_min",
        "scheduler queries (thread pools size themselves from the CPU count)",
    ),
    allow_if(
        "getpriority",
        "only its own niceness (PRIO_PROCESS, who 0); setpriority is refused: it runs as"
        " nice as the launcher made it",
        ArgCheck.eq(0, os.PRIO_PROCESS),
        ArgCheck.eq(1, 0),
    ),
    allow_if("kill", "only with pid == its own pid", ArgCheck.is_own_pid(0)),
    allow_if(
        "tgkill", "only with tgid == its own pid (raise, pthread_kill)", ArgCheck.is_own_pid(0)
    ),
    *allow_values(
        "prctl",
        0,
        (
            _linux.PR_SET_NAME,
            _linux.PR_GET_NAME,
            _linux.PR_GET_DUMPABLE,
            _linux.PR_GET_SECCOMP,
            _linux.PR_GET_NO_NEW_PRIVS,
            _linux.PR_CAPBSET_READ,
            _linux.PR_SET_VMA,
        ),
        "only PR_SET_NAME/PR_GET_NAME (gRPC names threads), PR_SET_VMA (glibc names"
        " mappings), and the queries PR_GET_DUMPABLE, PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS,"
        " PR_CAPBSET_READ",
    ),
    allow_if(
        "prlimit64",
        "only reading (new limit NULL) its own limits (pid 0 or its own)",
        ArgCheck.eq(0, 0),
        ArgCheck.eq(2, 0),
    ),
    allow_if(
        "prlimit64",
        "only reading (new limit NULL) its own limits (pid 0 or its own)",
        ArgCheck.is_own_pid(0),
        ArgCheck.eq(2, 0),
    ),
    *allow("getrlimit getrusage times", "resource queries"),
    *deny("setrlimit", "limits only ever fall: no setrlimit"),
    *allow("getrandom", "os.urandom, hash seeds, ssl"),
    *allow("uname sysinfo umask", "platform queries; umask only affects itself"),
    # --- signals and time ------------------------------------------------
    *allow(
        "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait"
        " rt_sigsuspend sigaltstack restart_syscall pause",
        "signal handling inside the process",
    ),
    *allow("alarm getitimer setitimer", "timers that signal only itself"),
    *allow(
        "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time",
        "clocks and sleeping",
    ),
    *allow("timerfd_create timerfd_settime timerfd_gettime", "event loops' timers"),
    # --- files (Landlock decides which paths) ----------------------------
    *allow("open openat", "Landlock decides which paths"),
    *allow(
        "read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2",
        "I/O on descriptors it holds",
    ),
    *allow("lseek close close_range dup dup2 dup3 flock", "descriptor housekeeping"),
    *allow_values(
        "fcntl",
        1,
        (
            fcntl.F_DUPFD,
            fcntl.F_DUPFD_CLOEXEC,
            fcntl.F_GETFD,
            fcntl.F_SETFD,
            fcntl.F_GETFL,
            fcntl.F_SETFL,
            fcntl.F_GETLK,
            fcntl.F_SETLK,
            fcntl.F_SETLKW,
            fcntl.F_OFD_GETLK,
            fcntl.F_OFD_SETLK,
            fcntl.F_OFD_SETLKW,
            fcntl.F_GETPIPE_SZ,
        ),
        "only F_DUPFD(_CLOEXEC), F_GETFD/F_SETFD, F_GETFL/F_SETFL, record and OFD locks,"
        " F_GETPIPE_SZ; not F_SETOWN/F_SETSIG, which aim SIGIO at another process",
    ),
    *allow(
        "fstat stat lstat newfstatat statx statfs fstatfs access faccessat faccessat2"
        " readlink readlinkat getcwd getdents64 chdir fchdir",
        "metadata and directory listing (reading contents is Landlock's call)",
    ),
    *allow(
        "mkdir mkdirat rmdir unlink unlinkat rename renameat renameat2"
        " link linkat symlink symlinkat",
        "changes inside the work directory; Landlock refuses them elsewhere",
    ),
    *allow(
        "truncate ftruncate fallocate fsync fdatasync fadvise64 sendfile copy_file_range",
        "file contents the descriptor or Landlock already allows",
    ),
    *deny(
        "chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat"
        " utime utimes utimensat futimesat",
        "Landlock does not cover metadata: the owner of a read-only file could"
        " still change its mode, owner or times",
    ),
    *deny(
        "setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr",
        "extended attributes are metadata Landlock does not cover",
    ),
    *deny("splice tee vmsplice", "pipe page splicing: kernel attack surface, unused by Python"),
    *deny("memfd_create memfd_secret", "anonymous executable-capable files; no use here"),
    # --- polling and pipes -----------------------------------------------
    *allow(
        "poll ppoll select pselect6 epoll_create epoll_create1 epoll_ctl epoll_wait"
        " epoll_pwait epoll_pwait2 eventfd eventfd2 pipe pipe2",
        "selectors, trio, asyncio and gRPC event loops",
    ),
    *allow_values(
        "ioctl",
        1,
        (
            termios.TCGETS,
            termios.TIOCGWINSZ,
            termios.FIONBIO,
            termios.FIONREAD,
            termios.FIOCLEX,
            termios.FIONCLEX,
        ),
        "only TCGETS (isatty), TIOCGWINSZ, FIONBIO, FIONREAD, FIOCLEX, FIONCLEX",
    ),
    Rule(
        "ioctl",
        Action.ERRNO,
        "TIOCSTI pushes keystrokes into a terminal's input: refused (as is every"
        " request not listed)",
        errno=errno.EPERM,
        args=(ArgCheck.eq(1, termios.TIOCSTI),),
    ),
    # --- Unix sockets (the core's socket) --------------------------------
    *allow_values(
        "socket", 0, (socket.AF_UNIX,), "only AF_UNIX: the core's gRPC socket, loop wake-ups"
    ),
    *allow_values("socketpair", 0, (socket.AF_UNIX,), "only AF_UNIX (event loops' wake-ups)"),
    *allow(
        "connect recvfrom recvmsg recvmmsg shutdown getsockname getpeername getsockopt",
        "talking over sockets it may create",
    ),
    # A TCP Fast Open send connects inside sendto()/sendmsg(), where
    # Landlock's connect rule never looks: the flag is refused on every send.
    allow_if(
        "sendto",
        "unless MSG_FASTOPEN (a Fast Open send connects past Landlock's port rules)",
        ArgCheck.bits_clear(3, _MSG_FASTOPEN),
    ),
    allow_if(
        "sendmsg",
        "unless MSG_FASTOPEN (a Fast Open send connects past Landlock's port rules)",
        ArgCheck.bits_clear(2, _MSG_FASTOPEN),
    ),
    allow_if(
        "sendmmsg",
        "unless MSG_FASTOPEN (a Fast Open send connects past Landlock's port rules)",
        ArgCheck.bits_clear(3, _MSG_FASTOPEN),
    ),
    *allow_values(
        "setsockopt",
        1,
        (socket.SOL_SOCKET, socket.IPPROTO_IP, socket.IPPROTO_IPV6),
        "socket, IPv4 and IPv6 options (levels compared on all 64 bits)",
    ),
    *(
        allow_if(
            "setsockopt",
            "TCP options but TCP_FASTOPEN, TCP_FASTOPEN_CONNECT (connect() would then"
            " connect in the first write, past Landlock's port rules), TCP_FASTOPEN_KEY,"
            " TCP_FASTOPEN_NO_COOKIE, TCP_ULP, TCP_REPAIR and the rest unlisted",
            ArgCheck.eq(1, socket.IPPROTO_TCP),
            ArgCheck.eq(2, option),
        )
        for option in _TCP_OPTIONS
    ),
    # --- refused: kernel attack surface (EPERM, not kill: libraries probe
    # these and must fall back, and the call never runs either way) ------
    *deny(
        "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register"
        " keyctl add_key request_key",
        "kernel attack surface that libraries probe; the probe must fail cleanly",
    ),
    *deny("unshare", "no new namespaces"),
    *deny("personality seccomp", "no execution-domain changes; no further filters needed"),
    *deny(
        "setuid setgid setreuid setregid setresuid setresgid setfsuid setfsgid setgroups capset",
        "credentials only ever fall, and the launcher already lowered them",
    ),
    # --- killed: no use but attacking another process or the host --------
    *kill("execve execveat", "running another program is the first step of every escape"),
    *kill(
        "ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp",
        "reading or steering another process",
    ),
    *kill(
        "mount umount2 pivot_root chroot setns move_mount open_tree fsopen fsconfig"
        " fsmount fspick mount_setattr",
        "changing the filesystem view or joining another namespace",
    ),
    *kill(
        "init_module finit_module delete_module kexec_load kexec_file_load reboot"
        " swapon swapoff iopl ioperm open_by_handle_at",
        "host administration; open_by_handle_at bypasses path checks",
    ),
]

_NETWORK_CLIENT: list[Rule] = [
    allow_if(
        "socket",
        "also AF_INET/AF_INET6 SOCK_STREAM with protocol 0 or TCP (not SCTP or MPTCP,"
        " which Landlock's TCP rules do not cover); Landlock limits the ports",
        ArgCheck.eq(0, family),
        ArgCheck.masked(1, _SOCK_TYPE_MASK, socket.SOCK_STREAM),
        ArgCheck.eq(2, proto),
    )
    for family in (socket.AF_INET, socket.AF_INET6)
    for proto in (0, socket.IPPROTO_TCP)
]

_SERVE: list[Rule] = allow(
    "accept accept4",
    "serving on the listening socket the core bound and handed it (it can make,"
    " bind or listen on no TCP socket of its own)",
)

_ACCEPT: list[Rule] = [
    *allow(
        "listen accept accept4",
        "serving on the listening socket it was handed (it cannot make one)",
    ),
    *deny(
        "mlock mlock2 mlockall",
        "llama.cpp pins the model when it can: locked memory is never reclaimed under"
        " pressure; the server is told not to ask (--use_mlock False)",
    ),
]


def executor_policy() -> SeccompPolicy:
    """No network at all: Unix sockets to the core only."""
    return SeccompPolicy(tuple(_BASE))


def plugin_policy(*, egress: bool) -> SeccompPolicy:
    """A plugin: like an executor, plus TCP when it has egress. No UDP, not
    even for DNS: Landlock has no UDP rules, so a datagram socket could
    reach any host and port; the launcher resolves the declared hosts into
    the view's /etc/hosts instead (sandbox._hosts)."""
    return SeccompPolicy(tuple(_BASE + (_NETWORK_CLIENT if egress else [])))


def model_server_policy() -> SeccompPolicy:
    """The local model server: accepts on an inherited socket; no socket of its own
    but Unix ones (event-loop wake-ups)."""
    return SeccompPolicy(tuple(_BASE + _ACCEPT))


def gateway_policy() -> SeccompPolicy:
    """The gateway accepts on the socket the core handed it and reaches the
    core over Unix: no socket of its own but Unix ones, no bind, no listen."""
    return SeccompPolicy(tuple(_BASE + _SERVE))
