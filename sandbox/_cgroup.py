"""A cgroup per sandboxed child: a hard CPU quota and a memory ceiling the
kernel enforces at once (docs/adr/0031-sec-cgroups.md).

Rlimits bound what one process may ask for (address space, CPU seconds in
total); they say nothing of CPU *share*, so a worker's threads could take
every core until the supervisor's windowed check (``cpu_share`` over
``cpu_window_s``) ended it. A cgroup's quota caps it within one period
(100 ms), and its memory ceiling holds between the supervisor's checks.

Where: under this process's own cgroup (v2: in a ``naga`` directory; v1:
directly, since v1 weighs a group as one task against the tasks beside it),
one ``naga-<label>-p<pid>-<random>`` cgroup per child (``pid``: the
process that made it, so a later start can sweep what a killed core left
behind: :func:`sweep_stale_cgroups`), weighted as the child's
nice level, so a core in a container or a
systemd unit nests inside the limits it was given. Which: cgroup v2 when
its ``cpu`` and ``memory`` controllers can be enabled below us (a delegated
subtree: systemd ``Delegate=yes``, or the root of a container's own
namespace); else cgroup v1's ``cpu`` (CFS quota) and ``memory`` hierarchies
when they are mounted and writable (as root); else none, and
:func:`detect_cgroups` says why (``naga doctor``). The launcher puts the
child in its cgroup before it sends the child its spec, so no code of the
child runs outside it.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import secrets
import select
import signal
import time
from dataclasses import dataclass

from sandbox.errors import LaunchFailed

_PERIOD_US = 100_000
_PARENT = "naga"
#: At or above it, a v1 ``memory.limit_in_bytes`` means no limit.
_V1_UNLIMITED = 1 << 62
#: v1's memory+swap ceiling (present where the kernel accounts swap).
_MEMSW = "memory.memsw.limit_in_bytes"


class CgroupVersion(enum.Enum):
    V2 = "v2"
    V1 = "v1"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """Where per-child cgroups can be made, or why not."""

    version: CgroupVersion
    #: v2: the one parent directory; v1: the cpu hierarchy's parent.
    cpu_parent: str | None = None
    #: v1 only: the memory hierarchy's parent (v2: the same as cpu_parent).
    memory_parent: str | None = None
    #: Why this version (and not a better one).
    reason: str = ""
    #: Where a task-count limit can be set (v1: the pids hierarchy's parent;
    #: v2: cpu_parent, with pids enabled there); None: no pids controller.
    pids_parent: str | None = None

    @property
    def usable(self) -> bool:
        return self.version is not CgroupVersion.NONE

    def line(self) -> str:
        """One line for ``naga doctor``."""
        if not self.usable:
            return f"sandbox cgroups: no (CPU share by the supervisor's check only): {self.reason}"
        where = (
            self.cpu_parent
            if self.version is CgroupVersion.V2
            else (f"{self.cpu_parent}, {self.memory_parent}")
        )
        held = "cpu quota, memory ceiling" + (", task count" if self.pids_parent else "")
        said = f"sandbox cgroups: {self.version.value} ({held}) under {where}"
        not_v2 = self.version is CgroupVersion.V1 and self.reason
        return f"{said}; not v2: {self.reason}" if not_v2 else said


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """``cpus``: CPU time per wall second (0.5: half a core); ``memory_bytes``:
    the memory ceiling (the kernel's OOM killer ends the child past it)."""

    cpus: float | None = None
    memory_bytes: int | None = None
    #: The child's niceness as the group's CPU weight: a cgroup competes
    #: with the tasks beside it as one task, so its weight, not the nice
    #: level of the process inside, is what the core is measured against.
    nice: int = 0
    #: Processes and threads at most (``pids.max``): what holds a fork bomb
    #: where RLIMIT_NPROC cannot (it exempts root, and counts per user).
    pids: int | None = None

    def __post_init__(self) -> None:
        if self.cpus is not None and not 0.01 <= self.cpus <= 1024:
            raise ValueError(f"cgroup cpus must be within 0.01..1024, got {self.cpus!r}")
        if self.memory_bytes is not None and self.memory_bytes < 1 << 20:
            raise ValueError(f"cgroup memory_bytes must be at least 1 MiB, got {self.memory_bytes}")
        if self.pids is not None and not 1 <= self.pids <= 1 << 22:
            raise ValueError(f"cgroup pids must be within 1..4194304, got {self.pids!r}")


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where :func:`detect_cgroups` reads this process's mounts and cgroups,
    and the root the mount points are under: the real ones by default; a
    test points them at a tree of its own (a cgroup v2 host, where this
    machine has none)."""

    mountinfo: str = "/proc/self/mountinfo"
    own_cgroup: str = "/proc/self/cgroup"
    root: str = "/"

    def under_root(self, mount_point: str) -> str:
        return os.path.join(self.root, mount_point.lstrip("/"))


def _mounts(host: CgroupHost) -> list[tuple[str, str, str, set[str]]]:
    """(fs type, mount root, mount point, super options) of cgroup mounts."""
    found: list[tuple[str, str, str, set[str]]] = []
    with open(host.mountinfo, encoding="utf-8") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
                continue
            point = host.under_root(fields[4])
            found.append((rest[0], fields[3], point, set(rest[2].split(","))))
    return found


def _own_paths(host: CgroupHost) -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    with open(host.own_cgroup, encoding="utf-8") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _below(mount_root: str, mount_point: str, own: str) -> str:
    rel = os.path.relpath(own, mount_root) if own.startswith(mount_root) else own.lstrip("/")
    return os.path.normpath(os.path.join(mount_point, "" if rel == "." else rel))


def _writable_parent(base: str) -> str | None:
    parent = os.path.join(base, _PARENT)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError:
        return None
    return parent if os.access(parent, os.W_OK) else None


def _v2(mount_root: str, mount_point: str, own: str) -> tuple[str | None, str, bool]:
    """(the parent, why not, whether pids is enabled there too)."""
    base = _below(mount_root, mount_point, own)
    try:
        with open(os.path.join(base, "cgroup.controllers"), encoding="ascii") as f:
            available = set(f.read().split())
    except OSError as e:
        return None, f"cgroup v2 at {base} unreadable: {e.strerror}", False
    if not {"cpu", "memory"} <= available:
        offered = " ".join(sorted(available)) or "no controller"
        why = (
            f"cgroup v2 at {mount_point} offers {offered} here, not cpu and memory"
            " (they are bound to cgroup v1 hierarchies, or not delegated)"
        )
        return None, why, False
    if not os.access(os.path.join(base, "cgroup.subtree_control"), os.W_OK):
        return None, f"cgroup v2 at {base} is not writable (not delegated to this user)", False
    wanted = ["cpu", "memory"] + (["pids"] if "pids" in available else [])
    try:
        _enable_below(base, wanted)
    except OSError as e:
        return None, f"cannot enable cpu and memory below {base}: {e.strerror}", False
    parent = _writable_parent(base)
    if parent is None:
        return None, f"cannot make {os.path.join(base, _PARENT)}", False
    # A v2 cgroup with processes may not enable controllers for its children
    # (no internal processes): the parent is ours alone and holds none.
    try:
        _write(os.path.join(parent, "cgroup.subtree_control"), _plus(wanted))
    except OSError as e:
        return None, f"cannot enable cpu and memory in {parent}: {e.strerror}", False
    return parent, "", "pids" in wanted


def _plus(controllers: list[str]) -> str:
    return " ".join(f"+{c}" for c in controllers)


def _enable_below(base: str, wanted: list[str]) -> None:
    """Enable ``wanted`` for ``base``'s children. A v2 cgroup holding
    processes may not (no internal processes): as systemd asks of a
    delegated unit, this process first moves into a leaf of its own."""
    control = os.path.join(base, "cgroup.subtree_control")
    with open(control, encoding="ascii") as f:
        if set(wanted) <= set(f.read().split()):
            return
    try:
        _write(control, _plus(wanted))
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise
        leaf = os.path.join(base, "core")
        os.makedirs(leaf, exist_ok=True)
        _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
        _write(control, _plus(wanted))


def detect_cgroups(host: CgroupHost | None = None) -> CgroupSupport:
    """Find where this process can make per-child cgroups with a CPU quota
    and a memory ceiling (and a task count, where pids is there); v2 first."""
    host = host or CgroupHost()
    try:
        mounts, own = _mounts(host), _own_paths(host)
    except OSError as e:
        return CgroupSupport(CgroupVersion.NONE, reason=f"cannot read /proc: {e.strerror}")
    why_not_v2 = "no cgroup v2 mount"
    for kind, root, point, _ in mounts:
        if kind == "cgroup2" and "" in own:
            parent, why_not_v2, pids = _v2(root, point, own[""])
            if parent is not None:
                return CgroupSupport(
                    CgroupVersion.V2,
                    parent,
                    parent,
                    "cgroup v2, delegated",
                    pids_parent=parent if pids else None,
                )
    v1: dict[str, str] = {}
    for kind, root, point, options in mounts:
        for controller in ("cpu", "memory", "pids"):
            if kind == "cgroup" and controller in options and controller in own:
                # Each child's cgroup sits directly under this process's own
                # (v1 weighs a group against every task beside it: under a
                # shared parent, all children together would weigh as one task).
                base = _below(root, point, own[controller])
                if os.access(base, os.W_OK):
                    v1.setdefault(controller, base)
    if "cpu" in v1 and "memory" in v1:
        return CgroupSupport(
            CgroupVersion.V1, v1["cpu"], v1["memory"], why_not_v2, pids_parent=v1.get("pids")
        )
    missing = " and ".join(c for c in ("cpu", "memory") if c not in v1)
    return CgroupSupport(
        CgroupVersion.NONE,
        reason=f"{why_not_v2}; no writable cgroup v1 {missing} hierarchy either",
    )


def _read_int(path: str) -> int:
    with open(path, encoding="ascii") as f:
        return int(f.read().strip())


def _counter(path: str, key: str, missing: int | None = 0) -> int | None:
    """The value of ``key`` in a flat-keyed file (``memory.events``...)."""
    with open(path, encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return missing


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


class Cgroup:
    """One child's cgroup: made with its limits, the child added before it
    runs anything, removed once the child is reaped."""

    def __init__(
        self, support: CgroupSupport, dirs: tuple[str, ...], pids_dir: str | None = None
    ) -> None:
        self.support = support
        #: v2: one directory; v1: the cpu one, then the memory one (then pids').
        self.dirs = dirs
        #: Where its task count is limited (None: no pids controller, or no limit asked).
        self.pids_dir = pids_dir

    @classmethod
    def create(cls, support: CgroupSupport, label: str, limits: CgroupLimits) -> Cgroup:
        """Make it with ``limits``. A task-count limit needs the pids
        controller (``support.pids_parent``): without it, it is not set,
        and :attr:`pids_dir` is None for the caller to see."""
        if not support.usable or support.cpu_parent is None or support.memory_parent is None:
            raise ValueError(f"no cgroups here: {support.reason}")
        name = f"naga-{label}-p{os.getpid()}-{secrets.token_hex(4)}"
        pids_dir: str | None = None
        if support.version is CgroupVersion.V2:
            dirs = (os.path.join(support.cpu_parent, name),)
            if limits.pids is not None and support.pids_parent is not None:
                pids_dir = dirs[0]
        else:
            dirs = (
                os.path.join(support.cpu_parent, name),
                os.path.join(support.memory_parent, name),
            )
            if limits.pids is not None and support.pids_parent is not None:
                pids_dir = os.path.join(support.pids_parent, name)
                dirs += (pids_dir,)
        made: list[str] = []
        try:
            for d in dirs:
                os.mkdir(d, 0o755)
                made.append(d)
            group = cls(support, dirs, pids_dir)
            group._limit(limits)
        except OSError:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            raise
        return group

    def _limit(self, limits: CgroupLimits) -> None:
        cpu, memory = self.dirs[0], self.dirs[min(1, len(self.dirs) - 1)]
        v2 = self.support.version is CgroupVersion.V2
        if limits.cpus is not None:
            quota = max(1000, round(limits.cpus * _PERIOD_US))
            if v2:
                _write(os.path.join(cpu, "cpu.max"), f"{quota} {_PERIOD_US}")
            else:
                _write(os.path.join(cpu, "cpu.cfs_period_us"), str(_PERIOD_US))
                _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(quota))
        # v2: the group weighs as its child's nice level. v1 keeps its default
        # weight (1024, one nice-0 task): measured here, a v1 group of the
        # nice-10 weight (110) got a fifth of what a nice-10 process gets,
        # too little for a worker to start within its deadline under load
        # (docs/adr/0035-sec11-udp-and-shell-cgroups.md has the figures).
        if limits.nice and v2:
            _write(os.path.join(cpu, "cpu.weight.nice"), str(limits.nice))
        if limits.memory_bytes is not None:
            name = "memory.max" if v2 else "memory.limit_in_bytes"
            _write(os.path.join(memory, name), str(limits.memory_bytes))
            # No swap to spill into past the ceiling (v1: memory+swap capped
            # at the same figure, where the kernel accounts swap at all).
            swap = ("memory.swap.max", "0") if v2 else (_MEMSW, str(limits.memory_bytes))
            with contextlib.suppress(OSError):
                _write(os.path.join(memory, swap[0]), swap[1])
        if limits.pids is not None and self.pids_dir is not None:
            _write(os.path.join(self.pids_dir, "pids.max"), str(limits.pids))

    def add(self, pid: int) -> None:
        """Move ``pid`` (every thread of it) into this cgroup."""
        try:
            for d in self.dirs:
                _write(os.path.join(d, "cgroup.procs"), str(pid))
        except OSError as e:
            raise LaunchFailed(
                f"cannot put the child in its cgroup {self.dirs[0]}: {e.strerror}",
                errno=e.errno or 0,
            ) from e

    def pids(self) -> list[int]:
        """The processes in it now (of its first hierarchy: every one holds them all)."""
        try:
            with open(os.path.join(self.dirs[0], "cgroup.procs"), encoding="ascii") as f:
                return [int(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in it and wait for their ends (by pidfd: a
        pid is signalled only while it is still the process listed);
        True once it is empty. Whatever they start meanwhile is in it too
        (a child inherits its cgroup), so rounds repeat until none is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pidfds: list[int] = []
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, OSError):
                    pidfds.append(os.pidfd_open(pid))
            if not pidfds:
                return not self.pids()
            try:
                for fd in pidfds:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                for fd in pidfds:  # readable once that process has ended
                    select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            finally:
                for fd in pidfds:
                    os.close(fd)
        return not self.pids()

    def pids_peak(self) -> int | None:
        """The most tasks it held at once (``pids.peak``; None: not limited,
        or a kernel before 6.1 that does not keep it)."""
        if self.pids_dir is None:
            return None
        try:
            return _read_int(os.path.join(self.pids_dir, "pids.peak"))
        except (OSError, ValueError):
            return None

    def throttled(self) -> int:
        """How many periods the quota held the child back (``nr_throttled``)."""
        with open(os.path.join(self.dirs[0], "cpu.stat"), encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "nr_throttled":
                    return int(value)
        return 0

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer killed a task of this cgroup at its
        memory ceiling. Read it once the child is gone and before
        :meth:`remove` (the counters go with the directory); unreadable: False.

        v2: ``memory.events`` ``oom_kill``. v1: ``memory.oom_control``
        ``oom_kill`` (kernels since 4.13); older, the ceiling was reached
        (``memory.failcnt`` above 0, or ``memory.max_usage_in_bytes`` at the
        limit): the kernel reclaims there, and kills when reclaim cannot keep up.
        """
        try:
            return self._oom_recorded()
        except (OSError, ValueError):
            return False

    def _oom_recorded(self) -> bool:
        memory = self._memory_dir
        if self.support.version is CgroupVersion.V2:
            return (_counter(os.path.join(memory, "memory.events"), "oom_kill") or 0) > 0
        kills = _counter(os.path.join(memory, "memory.oom_control"), "oom_kill", None)
        if kills is not None:
            return kills > 0
        if _read_int(os.path.join(memory, "memory.failcnt")) > 0:
            return True
        limit = self.memory_limit()
        peak = _read_int(os.path.join(memory, "memory.max_usage_in_bytes"))
        return limit is not None and peak >= limit

    @property
    def _memory_dir(self) -> str:
        return self.dirs[min(1, len(self.dirs) - 1)]

    def memory_limit(self) -> int | None:
        """Its memory ceiling in bytes (None: none set, or unreadable)."""
        v2 = self.support.version is CgroupVersion.V2
        name = "memory.max" if v2 else "memory.limit_in_bytes"
        try:
            with open(os.path.join(self._memory_dir, name), encoding="ascii") as f:
                value = f.read().strip()
            limit = None if value == "max" else int(value)
        except (OSError, ValueError):
            return None
        # v1 says "no limit" as the largest page-aligned count.
        return None if limit is None or limit >= _V1_UNLIMITED else limit

    def remove(self, timeout: float = 0.0) -> bool:
        """Remove it (after the child is reaped; a cgroup with a task stays);
        True once it is gone. ``timeout``: how long to keep trying while it
        is busy. A process whose parent died before it is reaped by init,
        not by us, so its cgroup stays busy until init gets to it; nothing
        announces that in cgroup v1, so this tries again every 10 ms."""
        deadline = time.monotonic() + timeout
        left = list(self.dirs)
        while True:
            for d in list(left):
                try:
                    os.rmdir(d)
                except OSError as e:
                    if e.errno not in (errno.ENOENT, errno.EBUSY):
                        raise
                    if e.errno == errno.EBUSY:
                        continue
                left.remove(d)
            if not left or time.monotonic() >= deadline:
                return not left
            time.sleep(0.01)


def _maker(name: str) -> int | None:
    """The pid in a ``naga-<label>-p<pid>-<hex>`` name; None for a name of
    an earlier release, which carried none."""
    parts = name.rsplit("-", 2)
    if len(parts) == 3 and parts[1].startswith("p") and parts[1][1:].isdigit():
        return int(parts[1][1:])
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: alive
    return True


def sweep_stale_cgroups(support: CgroupSupport) -> int:
    """Remove the empty ``naga-*`` cgroups whose maker is gone (a core
    killed before it could remove its children's groups: 1,370 were seen
    left on one machine); those of a live process, another core's
    included, are left alone. Returns how many were removed. A group that
    still holds a task stays (rmdir refuses it)."""
    if not support.usable:
        return 0
    parents = {p for p in (support.cpu_parent, support.memory_parent, support.pids_parent) if p}
    removed = 0
    for parent in sorted(parents):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not name.startswith("naga-"):
                continue
            maker = _maker(name)
            if maker is not None and _alive(maker):
                continue
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                continue  # busy, gone, or not a directory
            removed += 1
    return removed


__all__ = [
    "Cgroup",
    "CgroupHost",
    "CgroupLimits",
    "CgroupSupport",
    "CgroupVersion",
    "detect_cgroups",
    "sweep_stale_cgroups",
]
