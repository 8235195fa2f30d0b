"""What one kind of sandboxed process may do: :class:`Profile`.

A profile is plain frozen data built through one named constructor per
process kind (:meth:`Profile.gateway`, :meth:`Profile.executor`,
:meth:`Profile.plugin`, :meth:`Profile.model_server`). It says nothing about
how the layers are applied; the launcher turns it into a plan for the kernel
at hand.
"""

from __future__ import annotations

import enum
import os
import resource
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from naga import constants
from sandbox import _syscalls
from sandbox._overlay import Overlay
from sandbox._policy import SeccompPolicy
from sandbox._shell_policy import shell_policy
from sandbox.errors import ProfileInvalid

#: Environment variable carrying the capability token (set per launch).
TOKEN_ENV = constants.TOKEN_ENV
#: A plugin's niceness above the core's: under contention the core (and
#: whoever it answers) gets the CPU first; a plugin cannot lower it.
PLUGIN_NICE = 10
#: Environment variable carrying the core's gRPC socket path.
CORE_SOCKET_ENV = constants.CORE_SOCKET_ENV
#: Environment variable carrying the path of the core's egress proxy socket
#: (plugins that reach the network only through the core's CONNECT proxy).
EGRESS_SOCKET_ENV = constants.EGRESS_SOCKET_ENV

#: Copied from the launcher's environment when present; nothing else is.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")

#: The system's CA bundle, wherever the distribution keeps it: the one file
#: TLS needs of /etc/ssl and /etc/pki (which also hold private keys).
CA_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL (a link to the next)
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",  # Alpine
)
#: Read-only for every kind: system libraries, the CA bundle, the dynamic
#: linker cache, time zones, the CPU count. Not /etc as a whole (passwd,
#: shadow, machine secrets), not /proc (other processes, /proc/self/mem).
SYSTEM_READ_ONLY = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    *CA_BUNDLES,
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/sys/devices/system/cpu",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
)
#: Read-only for kinds on the host network: name resolution, but for DNS
#: (no resolv.conf) and the host's hosts and nsswitch files: the view gets
#: its own, naming the declared hosts only (sandbox._hosts).
NETWORK_READ_ONLY = (
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/services",
    "/etc/protocols",
)
#: Devices the sandbox may also write (``open(os.devnull, "w")``).
DEVICES = ("/dev/null",)

_MIB = 1 << 20
_GIB = 1 << 30
#: RLIMIT_AS of the model server by default; see :meth:`Profile.model_server`.
MODEL_SERVER_ADDRESS_SPACE = 3 * _GIB
#: RLIMIT_FSIZE of the model server by default: its log (its stdout) grows
#: by a few lines per request for as long as the core runs.
MODEL_SERVER_LOG_LIMIT = 1 * _GIB


class Kind(enum.Enum):
    GATEWAY = "gateway"
    EXECUTOR = "executor"
    PLUGIN = "plugin"
    MODEL_SERVER = "model_server"
    SHELL = "shell"


class NetworkPolicy(enum.Enum):
    #: A private network namespace; only Unix sockets.
    NONE = "none"
    #: A private network namespace; the core's Unix socket path still works
    #: (path sockets live in the filesystem, not the network namespace).
    CORE_ONLY = "core-only"
    #: The host network, TCP connect only to the listed ports (Landlock).
    EGRESS = "egress"
    #: A private network namespace; it serves on a listening socket the
    #: launcher bound and passed in (sockets keep the namespace they were
    #: made in), and cannot make a TCP socket of its own: no bind, no
    #: listen, no connect. The gateway and the model server.
    ACCEPT = "accept"

    @property
    def private_netns(self) -> bool:
        return self in (NetworkPolicy.NONE, NetworkPolicy.CORE_ONLY, NetworkPolicy.ACCEPT)


@dataclass(frozen=True, slots=True)
class Rlimits:
    """Resource limits; ``None`` leaves the launcher's own limit.

    Core dumps are always off (RLIMIT_CORE 0): a dump would write the
    process's memory, token included, to disk. ``processes`` counts every
    process and thread of the real user id, system-wide outside a user
    namespace, and root is exempt; the seccomp clone rule is what stops
    fork bombs, so it defaults to ``None``.
    """

    address_space: int | None = None
    cpu_seconds: int | None = None
    open_files: int | None = None
    file_size: int | None = None
    processes: int | None = None

    def __post_init__(self) -> None:
        for name in ("address_space", "cpu_seconds", "open_files", "file_size", "processes"):
            value: object = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProfileInvalid(f"rlimit {name} must be a positive integer, got {value!r}")

    def triples(self) -> list[tuple[int, int, int]]:
        """``(RLIMIT_*, soft, hard)`` to apply, RLIMIT_CORE included.

        RLIMIT_CPU gets a hard limit one second above the soft one: SIGXCPU
        first (a clear cause in the exit status), SIGKILL if it is ignored.
        """
        out = [(resource.RLIMIT_CORE, 0, 0)]
        if self.address_space is not None:
            out.append((resource.RLIMIT_AS, self.address_space, self.address_space))
        if self.cpu_seconds is not None:
            out.append((resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1))
        if self.open_files is not None:
            out.append((resource.RLIMIT_NOFILE, self.open_files, self.open_files))
        if self.file_size is not None:
            out.append((resource.RLIMIT_FSIZE, self.file_size, self.file_size))
        if self.processes is not None:
            out.append((resource.RLIMIT_NPROC, self.processes, self.processes))
        return out


@dataclass(frozen=True, slots=True)
class Egress:
    """One destination a plugin's manifest declares."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host or len(self.host) > 253 or any(c.isspace() for c in self.host):
            raise ProfileInvalid(f"egress host must be a host name or address, got {self.host!r}")
        _check_port(self.port, "egress port")


def _check_port(port: object, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ProfileInvalid(f"{what} must be an integer in 1..65535, got {port!r}")
    return port


def _absolute(path: str | os.PathLike[str], what: str) -> str:
    raw = os.fspath(path)
    if not raw or "\0" in raw:
        raise ProfileInvalid(f"{what} must be a path, got {raw!r}")
    if not os.path.isabs(raw):
        raise ProfileInvalid(f"{what} must be absolute, got {raw!r}")
    return os.path.normpath(raw)


def _within(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def source_root() -> str:
    """The directory holding the ``sandbox`` package (the project source, or
    site-packages): the child imports ``sandbox._child`` from it."""
    return str(Path(__file__).resolve().parent.parent)


def python_read_only() -> tuple[str, ...]:
    """This interpreter's prefixes (stdlib, venv) and the project source."""
    found = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, source_root()]
    found += [os.path.realpath(p) for p in found]
    return tuple(dict.fromkeys(os.path.normpath(p) for p in found))


def _existing(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(p for p in dict.fromkeys(paths) if os.path.exists(p))


@dataclass(frozen=True, slots=True)
class Profile:
    """Everything one kind of sandboxed process is allowed; build it with
    :meth:`gateway`, :meth:`executor`, :meth:`plugin` or :meth:`model_server`."""

    kind: Kind
    rlimits: Rlimits
    #: Landlock read-only hierarchies (absolute, existing).
    read_only: tuple[str, ...]
    #: Landlock read-write devices (/dev/null).
    devices: tuple[str, ...]
    #: The one read-write directory; bound at launch when ``None`` here.
    work_dir: str | None
    network: NetworkPolicy
    bind_ports: tuple[int, ...]
    connect_ports: tuple[int, ...]
    #: Declared egress hosts. The kernel enforces ports only; see the design doc.
    egress_hosts: tuple[str, ...]
    core_socket: str | None
    seccomp: SeccompPolicy = field(repr=False)
    #: Names ``launch(env=...)`` may set (the token); everything else is scrubbed.
    env_allowed: frozenset[str] = frozenset({TOKEN_ENV})
    #: Run with whatever layers this kernel has, recording what is missing.
    allow_degraded: bool = False
    #: Landlock lets it execute programs from its view (only Profile.shell).
    may_execute: bool = False
    #: Added to the child's niceness: its CPU share below the core's.
    nice: int = 0
    #: The core's egress proxy (a Unix socket), shown in the view: the
    #: plugin's only way out, with no network of its own (private netns,
    #: Unix sockets only). See :meth:`plugin`.
    egress_socket: str | None = None
    #: When set, the work directory is shown and granted read-only (a plugin
    #: whose tools are all R0: they read, so nothing of theirs is written)
    #: and this directory, wiped by its owner, is the writable TMPDIR.
    scratch_dir: str | None = None
    #: When set (only Profile.shell), the work directory is this overlay's
    #: mount point in the child: its writes land in the upper directory.
    overlay: Overlay | None = None

    @classmethod
    def gateway(
        cls,
        core_socket: str | os.PathLike[str],
        *,
        rlimits: Rlimits | None = None,
        read_only: Sequence[str | os.PathLike[str]] = (),
        allow_degraded: bool = False,
    ) -> Profile:
        """The gateway: serves HTTP on the listening socket the core bound
        and passes in (``pass_fds``), reaches the core over its Unix socket,
        and has no network of its own: a private network namespace, and no
        right to make, bind or listen on a TCP socket (so no ephemeral port
        by ``listen()`` without ``bind()`` either)."""
        return cls._build(
            Kind.GATEWAY,
            rlimits or Rlimits(address_space=1 * _GIB, open_files=1024, file_size=16 * _MIB),
            read_only=read_only,
            work_dir=None,
            network=NetworkPolicy.ACCEPT,
            bind_ports=(),
            egress=(),
            core_socket=_absolute(core_socket, "core socket"),
            seccomp=_syscalls.gateway_policy(),
            allow_degraded=allow_degraded,
        )

    @classmethod
    def executor(
        cls,
        core_socket: str | os.PathLike[str],
        *,
        rlimits: Rlimits | None = None,
        read_only: Sequence[str | os.PathLike[str]] = (),
        work_dir: str | os.PathLike[str] | None = None,
        allow_degraded: bool = False,
    ) -> Profile:
        """An agent executor: no network, only the core's Unix socket."""
        return cls._build(
            Kind.EXECUTOR,
            rlimits
            or Rlimits(
                address_space=2 * _GIB, cpu_seconds=600, open_files=256, file_size=256 * _MIB
            ),
            read_only=read_only,
            work_dir=work_dir,
            network=NetworkPolicy.CORE_ONLY,
            bind_ports=(),
            egress=(),
            core_socket=_absolute(core_socket, "core socket"),
            seccomp=_syscalls.executor_policy(),
            allow_degraded=allow_degraded,
        )

    @classmethod
    def plugin(
        cls,
        *,
        work_dir: str | os.PathLike[str] | None,
        egress: Sequence[Egress] = (),
        core_socket: str | os.PathLike[str] | None = None,
        read_only: Sequence[str | os.PathLike[str]] = (),
        rlimits: Rlimits | None = None,
        allow_degraded: bool = False,
        egress_socket: str | os.PathLike[str] | None = None,
    ) -> Profile:
        """A plugin, from its manifest: ``egress`` destinations (none: no
        network), its code directories (``read_only``), its work directory.

        With ``egress_socket`` (the core's egress proxy for this plugin) the
        plugin gets no network at all: a private network namespace and Unix
        sockets only, the proxy's socket in its view. ``egress`` is then
        only recorded (``egress_hosts``); the proxy checks the hosts."""
        for item in list[object](egress):
            if not isinstance(item, Egress):
                raise ProfileInvalid(f"egress entries must be Egress, got {item!r}")
        if egress_socket is not None:
            proxy = _absolute(egress_socket, "egress socket")
            profile = cls.plugin(
                work_dir=work_dir,
                core_socket=core_socket,
                read_only=read_only,
                rlimits=rlimits,
                allow_degraded=allow_degraded,
            )
            if profile.network is NetworkPolicy.NONE:
                # The proxy is a path socket: reachable from a private netns.
                profile = replace(profile, network=NetworkPolicy.CORE_ONLY)
            hosts = tuple(dict.fromkeys(e.host for e in egress))
            return replace(profile, egress_socket=proxy, egress_hosts=hosts)
        if egress:
            network = NetworkPolicy.EGRESS
        elif core_socket is not None:
            network = NetworkPolicy.CORE_ONLY
        else:
            network = NetworkPolicy.NONE
        return cls._build(
            Kind.PLUGIN,
            rlimits or Rlimits(address_space=1 * _GIB, open_files=256, file_size=64 * _MIB),
            read_only=read_only,
            work_dir=work_dir,
            network=network,
            bind_ports=(),
            egress=egress,
            core_socket=None if core_socket is None else _absolute(core_socket, "core socket"),
            seccomp=_syscalls.plugin_policy(egress=bool(egress)),
            allow_degraded=allow_degraded,
        ).with_nice(PLUGIN_NICE)

    @classmethod
    def model_server(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        work_dir: str | os.PathLike[str] | None = None,
        rlimits: Rlimits | None = None,
        read_only: Sequence[str | os.PathLike[str]] = (),
        allow_degraded: bool = False,
    ) -> Profile:
        """The embedded local model server (llama.cpp behind uvicorn): reads
        ``model_dir``, answers HTTP on a listening socket the launcher passes
        in (``pass_fds``), and has no network of its own and no core socket.

        The address-space default covers llama.cpp with the 469 MiB model
        mmapped, a 4096-token context and its threads (1.5-1.6 GiB at its
        peak, measured: docs/design/sandbox.md) with room to spare; the file-size limit
        bounds the log it writes through its stdout.
        """
        directory = _absolute(model_dir, "model directory")
        if not os.path.isdir(directory):
            raise ProfileInvalid(
                f"model directory does not exist or is not a directory: {directory}"
            )
        profile = cls._build(
            Kind.MODEL_SERVER,
            rlimits
            or Rlimits(
                address_space=MODEL_SERVER_ADDRESS_SPACE,
                open_files=256,
                file_size=MODEL_SERVER_LOG_LIMIT,
            ),
            read_only=(directory, *read_only),
            work_dir=None,
            network=NetworkPolicy.ACCEPT,
            bind_ports=(),
            egress=(),
            core_socket=None,
            seccomp=_syscalls.model_server_policy(),
            allow_degraded=allow_degraded,
        )
        # OpenMP reads its wait policy when llama.cpp's library loads, before
        # the target runs: PASSIVE keeps idle workers from spinning on a CPU.
        profile = replace(profile, env_allowed=frozenset({"OMP_WAIT_POLICY"}))
        return profile if work_dir is None else profile.with_work_dir(work_dir)

    @classmethod
    def shell(
        cls,
        *,
        work_dir: str | os.PathLike[str],
        rlimits: Rlimits | None = None,
        read_only: Sequence[str | os.PathLike[str]] = (),
        overlay: Overlay | None = None,
    ) -> Profile:
        """One shell command (the shell tool, docs/design/tools.md): programs
        may run, the system is read-only, ``work_dir`` (a staged copy of the
        workspace, or with ``overlay`` the empty directory it is mounted on)
        is the one writable directory, no network at all, and the command
        cannot leave its process group. Never degraded: the signal scope of
        Landlock and the mount view are what hold a program that may fork
        and exec."""
        profile = cls._build(
            Kind.SHELL,
            rlimits
            or Rlimits(
                address_space=1 * _GIB,
                cpu_seconds=600,
                open_files=256,
                file_size=64 * _MIB,
                processes=256,
            ),
            read_only=read_only,
            work_dir=work_dir,
            network=NetworkPolicy.NONE,
            bind_ports=(),
            egress=(),
            core_socket=None,
            seccomp=shell_policy(),
            allow_degraded=False,
        )
        if overlay is not None:
            assert profile.work_dir is not None  # set from work_dir above
            for layer in (overlay.lower, overlay.upper, overlay.work):
                if _within(profile.work_dir, layer) or _within(layer, profile.work_dir):
                    raise ProfileInvalid(
                        f"work directory {profile.work_dir} overlaps the overlay's {layer}"
                    )
        return replace(profile, may_execute=True, overlay=overlay)

    @classmethod
    def _build(
        cls,
        kind: Kind,
        rlimits: Rlimits,
        *,
        read_only: Sequence[str | os.PathLike[str]],
        work_dir: str | os.PathLike[str] | None,
        network: NetworkPolicy,
        bind_ports: tuple[int, ...],
        egress: Sequence[Egress],
        core_socket: str | None,
        seccomp: SeccompPolicy,
        allow_degraded: bool,
    ) -> Profile:
        if not isinstance(rlimits, Rlimits):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ProfileInvalid(f"rlimits must be Rlimits, got {rlimits!r}")
        extra = tuple(_absolute(p, "read-only path") for p in read_only)
        for path in extra:
            if not os.path.exists(path):
                raise ProfileInvalid(f"read-only path does not exist: {path}")
        system = SYSTEM_READ_ONLY + (NETWORK_READ_ONLY if not network.private_netns else ())
        profile = cls(
            kind=kind,
            rlimits=rlimits,
            read_only=_existing((*system, *python_read_only(), *extra)),
            devices=_existing(DEVICES),
            work_dir=None,
            network=network,
            bind_ports=bind_ports,
            connect_ports=tuple(sorted({e.port for e in egress})),
            egress_hosts=tuple(dict.fromkeys(e.host for e in egress)),
            core_socket=core_socket,
            seccomp=seccomp,
            allow_degraded=bool(allow_degraded),
        )
        return profile if work_dir is None else profile.with_work_dir(work_dir)

    @property
    def name(self) -> str:
        return self.kind.value

    def with_nice(self, nice: int) -> Profile:
        """This profile with its child ``nice`` steps nicer (0..19)."""
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ProfileInvalid(f"nice must be an integer in 0..19, got {nice!r}")
        return replace(self, nice=nice)

    def with_read_only_work(self, scratch_dir: str | os.PathLike[str]) -> Profile:
        """This profile with its work directory read-only (mount and Landlock)
        and ``scratch_dir`` (existing, outside every other path) its only
        writable directory, its TMPDIR."""
        path = _absolute(scratch_dir, "scratch directory")
        if not os.path.isdir(path):
            raise ProfileInvalid(f"scratch directory does not exist or is not a directory: {path}")
        real = os.path.realpath(path)
        others = [*self.read_only, *self.devices]
        if self.work_dir is not None:
            others.append(self.work_dir)
        for other in others:
            other_real = os.path.realpath(other)
            if _within(real, other_real) or _within(other_real, real):
                raise ProfileInvalid(f"scratch directory {path} overlaps {other}")
        return replace(self, scratch_dir=real)

    def with_work_dir(self, work_dir: str | os.PathLike[str]) -> Profile:
        """This profile with its one read-write directory set.

        The directory must exist and must not overlap a read-only hierarchy:
        a writable ancestor of the interpreter or the project source would
        let the sandbox rewrite code that runs outside it.
        """
        path = _absolute(work_dir, "work directory")
        if not os.path.isdir(path):
            raise ProfileInvalid(f"work directory does not exist or is not a directory: {path}")
        real = os.path.realpath(path)
        for ro in self.read_only + self.devices:
            ro_real = os.path.realpath(ro)
            if _within(real, ro_real) or _within(ro_real, real):
                raise ProfileInvalid(
                    f"work directory {path} overlaps the read-only path {ro}; "
                    "give the sandbox a directory of its own"
                )
        if self.work_dir is not None and self.work_dir != real:
            raise ProfileInvalid(
                f"profile already has the work directory {self.work_dir}, not {path}"
            )
        return replace(self, work_dir=real)
