"""Start a sandboxed child and supervise its end: :func:`launch`, :class:`Sandboxed`.

``launch`` is plain blocking code, not async: it returns once the child
reported ready (tens of milliseconds) or failed, bounded by ``ready_timeout``.
A trio supervisor calls it through ``trio.to_thread.run_sync`` and awaits the
child's end with ``trio.lowlevel.wait_readable(handle.pidfd)`` before
``handle.wait(0)``; nothing here needs an event loop or a thread of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO, cast

from naga.v1 import sandbox_pb2
from sandbox import _hosts, _wire
from sandbox._cgroup import Cgroup
from sandbox._detect import KernelReport, detect
from sandbox._exit import Exit, ExitKind, describe_status
from sandbox._fork import Forker
from sandbox._plan import Degradation, plan
from sandbox._profile import (
    CORE_SOCKET_ENV,
    EGRESS_SOCKET_ENV,
    PASSTHROUGH_ENV,
    NetworkPolicy,
    Profile,
    source_root,
)
from sandbox._wire import Layer
from sandbox.errors import LaunchFailed, ProfileInvalid, ProtocolError

_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: How often a waiting supervisor checks whether the child is stopped: a
#: stopped child never exits, so it is only seen by looking.
STOP_CHECK_SECONDS = 0.05


def _child_env(profile: Profile, work_dir: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}
    # No PYTHON* variable: the child runs isolated (-I ignores them) and gets
    # its import path on its command line (_child_command).
    env.update(
        # RLIMIT_AS counts address space glibc reserves per malloc arena
        # (64 MiB each, one per thread by default); two arenas keep a
        # threaded worker well inside its limit.
        MALLOC_ARENA_MAX="2",
        HOME=work_dir,
        TMPDIR=profile.scratch_dir or work_dir,
    )
    if profile.core_socket is not None and profile.network is not NetworkPolicy.NONE:
        env[CORE_SOCKET_ENV] = profile.core_socket
    if profile.egress_socket is not None:
        env[EGRESS_SOCKET_ENV] = profile.egress_socket
    for name, value in extra.items():
        if name not in profile.env_allowed:
            raise ProfileInvalid(
                f"environment variable {name!r} is not allowed for the {profile.name} profile "
                f"(allowed: {', '.join(sorted(profile.env_allowed))})"
            )
        if not _ENV_NAME.fullmatch(name) or "\0" in value:
            raise ProfileInvalid(f"malformed environment variable {name!r}")
        env[name] = value
    return env


#: Run by ``python -I -S -B -c``: isolated (no PYTHON* variables, no user
#: site, neither the script's directory nor the working directory on the
#: path) and without ``site`` (no sitecustomize, usercustomize or .pth file
#: is looked for anywhere). The import path is exactly the trusted one the
#: launcher hands over; a plugin's folder joins it only once every layer is
#: in force (``SandboxSpec.late_paths``).
#: The launcher's pid follows the two descriptors: the child dies with it
#: (``_linux.die_with``), so none outlives its supervisor.
_BOOT = (
    "import sys; sys.path[:] = sys.argv[4:]; del sys.argv[4:]; "
    "from sandbox._child import main; main(sys.argv[1:])"
)


def child_sys_path(profile: Profile) -> list[str]:
    """The child's import path: this package's root, then the launcher's own
    path entries that lie inside the profile's read-only hierarchies (the
    standard library, the environment's site-packages and what its .pth
    files added); never the working directory or anything writable."""
    read_only = [os.path.realpath(p) for p in profile.read_only]
    found: list[str] = []
    for raw in [source_root(), *sys.path]:
        if not raw or not os.path.isabs(raw):
            continue
        path = os.path.realpath(raw)
        if not any(_inside(path, ro) for ro in read_only):
            continue
        if os.path.exists(path) and path not in found:
            found.append(path)
    return found


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _check_import_paths(profile: Profile, import_paths: Sequence[str]) -> list[str]:
    checked: list[str] = []
    for raw in import_paths:
        path = os.path.realpath(raw)
        if not any(_inside(path, ro) for ro in map(os.path.realpath, profile.read_only)):
            raise ProfileInvalid(f"import path {raw} is outside the profile's read-only paths")
        checked.append(path)
    return checked


def launch(
    profile: Profile,
    target: str,
    args: Sequence[str] = (),
    *,
    forker: Forker,
    work_dir: str | os.PathLike[str] | None = None,
    pass_fds: Sequence[int] = (),
    env: Mapping[str, str] | None = None,
    import_paths: Sequence[str] = (),
    preload: Sequence[str] = (),
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    kernel: KernelReport | None = None,
    ready_timeout: float = 10.0,
    cgroup: Cgroup | None = None,
) -> Sandboxed:
    """Start ``target`` ("package.module:function", called with ``args`` as a
    list of strings) in a child sandboxed by ``profile``; return once it is
    ready, its layers all in place.

    ``forker`` (:class:`Forker`, its owner's) forks the child: the child
    dies when the Forker's thread ends (its owner closed it or died).
    ``work_dir`` is the one writable directory (or the profile's own).
    ``pass_fds`` are inherited by the child at the same numbers; every other
    descriptor is closed. ``env`` adds variables the profile allows (the
    token); the rest of the environment is scrubbed. ``kernel`` is a
    :func:`detect` report to reuse. ``import_paths`` (a plugin's own
    folder) become importable only once every layer, the filter included,
    is in force: a target not found without them is imported then, after
    ``preload`` (modules of the installation that may load shared
    libraries, which the filter forbids) was imported before it. stdin is /dev/null; ``stdout`` and
    ``stderr`` are inherited unless given (as for ``subprocess.Popen``).
    ``cgroup`` (:class:`Cgroup`, made by the caller with its limits) gets
    the child before the child reads its spec, so nothing of it runs
    outside; the child's handle removes it once the child is reaped.

    Raises :class:`ProfileInvalid` for bad arguments, ``ForkerUnavailable``
    when ``forker`` cannot fork (closed, or its owner's in a forked copy), ``LayerUnavailable``
    when the kernel cannot enforce the profile (unless it allows degraded
    mode), :class:`LaunchFailed` when the child does not become ready.
    """
    # Callers are typed, but a supervisor may pass what a manifest said.
    raw_target = cast("object", target)
    if not isinstance(raw_target, str) or not _TARGET.fullmatch(raw_target):
        raise ProfileInvalid(f"target must look like 'package.module:function', got {target!r}")
    raw_args = cast("object", args)
    if isinstance(raw_args, str) or not all(isinstance(a, str) for a in list[object](args)):
        raise ProfileInvalid("args must be a sequence of strings")
    if work_dir is not None:
        profile = profile.with_work_dir(work_dir)
    if profile.work_dir is None:
        raise ProfileInvalid(f"the {profile.name} profile needs a work directory: pass work_dir=")
    for fd in list[object](pass_fds):
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 3:
            raise ProfileInvalid(f"pass_fds must be descriptors >= 3, got {fd!r}")
    late = _check_import_paths(profile, import_paths)
    for name in list[object](preload):
        if not isinstance(name, str) or not _MODULE.fullmatch(name):
            raise ProfileInvalid(f"preload entries must be module names, got {name!r}")
    child_env = _child_env(profile, profile.work_dir, env or {})
    # No DNS in a host-network child (no UDP at all): its names resolved here.
    files = _hosts.view_files(profile.egress_hosts) if not profile.network.private_netns else []
    spec, degraded = plan(
        profile, kernel or detect(), target=target, args=list(args), view_files=files
    )
    spec.late_paths.extend(late)
    spec.preload.extend(preload)

    started = time.monotonic()
    spec_r, spec_w = os.pipe()
    report_r, report_w = os.pipe()
    try:
        argv = [
            sys.executable,
            *("-I", "-S", "-B", "-c", _BOOT),
            str(spec_r),
            str(report_w),
            str(os.getpid()),
            *child_sys_path(profile),
        ]
        # Forked by the owner's long-lived thread, not this one: the child's
        # parent-death signal follows the forking thread (_fork).
        popen = forker.run(
            lambda: subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=child_env,
                cwd=profile.work_dir,
                pass_fds=(spec_r, report_w, *pass_fds),
                close_fds=True,
                start_new_session=True,
            )
        )
    except BaseException as e:  # an unusable Forker too: no descriptor is left open
        for fd in (spec_r, spec_w, report_r, report_w):
            os.close(fd)
        if isinstance(e, OSError):
            raise LaunchFailed(f"cannot start the interpreter: {e}", errno=e.errno or 0) from e
        raise
    os.close(spec_r)
    os.close(report_w)
    handle = Sandboxed(popen, profile, degraded, cgroup)
    try:
        if cgroup is not None:
            cgroup.add(popen.pid)  # it waits for its spec: nothing of it ran yet
        try:
            _wire.write_message(spec_w, spec)
        except BrokenPipeError:
            pass  # the child died first; its exit status says why, below
        finally:
            os.close(spec_w)
        report = _await_report(handle, report_r, started + ready_timeout)
    except BaseException:
        handle.close()  # no child outlives a failed or interrupted launch
        raise
    finally:
        os.close(report_r)
    handle.ready_seconds = time.monotonic() - started
    handle.timings = tuple(
        (layer, t.nanoseconds)
        for t in report.ready.timings
        if (layer := Layer.from_proto(t.layer)) is not None
    )
    return handle


def _await_report(handle: Sandboxed, fd: int, deadline: float) -> sandbox_pb2.SetupReport:
    try:
        report = _wire.read_message(fd, sandbox_pb2.SetupReport(), deadline=deadline)
    except TimeoutError:
        end = handle.kill()
        raise LaunchFailed("not ready before the deadline", exit=str(end)) from None
    except ProtocolError as e:
        end = handle.kill()
        raise LaunchFailed(f"garbled setup report: {e}", exit=str(end)) from e
    if report is None:
        end = handle.wait(timeout=max(deadline - time.monotonic(), 1.0))
        raise LaunchFailed("it exited before reporting", exit=str(end))
    if report.HasField("failure"):
        failure = report.failure
        layer = Layer.from_proto(failure.layer)
        end = handle.wait(timeout=max(deadline - time.monotonic(), 1.0))
        raise LaunchFailed(
            failure.detail,
            layer=layer.value if layer else None,
            errno=failure.errno,
            exit=str(end),
        )
    if not report.HasField("ready"):
        handle.kill()
        raise LaunchFailed("empty setup report")
    return report


class Sandboxed:
    """A running sandboxed child. Reap it with :meth:`wait` or :meth:`close`
    (also a context manager: leaving the block kills a child still running)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        profile: Profile,
        degraded: tuple[Degradation, ...],
        cgroup: Cgroup | None = None,
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.profile = profile
        #: Its cgroup (CPU quota, memory ceiling), if the launch was given one.
        self.cgroup = cgroup
        #: Layers the profile wanted and this kernel could not give.
        self.degraded = degraded
        #: Seconds from launch to the child's ready report.
        self.ready_seconds = 0.0
        #: Nanoseconds each layer took in the child, in the order applied.
        self.timings: tuple[tuple[Layer, int], ...] = ()
        self.stdout = popen.stdout
        self.stderr = popen.stderr
        self._exit: Exit | None = None
        try:
            #: Readable once the child has exited (for event loops).
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except OSError:
            self.pidfd = None

    def __enter__(self) -> Sandboxed:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def exit(self) -> Exit | None:
        """How the child ended, once reaped."""
        return self._exit

    def _reap(self, kind: ExitKind | None = None) -> Exit:
        if self._exit is None:
            status = self._popen.wait()
            # Its cgroup's counters say whether the kernel's OOM killer sent
            # a SIGKILL the supervisor did not; they go with the cgroup.
            oom = (
                status == -signal.SIGKILL
                and kind is None
                and self.cgroup is not None
                and self.cgroup.oom_killed()
            )
            limit = self.cgroup.memory_limit() if oom and self.cgroup is not None else None
            self._exit = describe_status(status, kind, oom_killed=oom, memory_limit=limit)
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None
            if self.cgroup is not None:
                with contextlib.suppress(OSError):
                    self.cgroup.remove()
        return self._exit

    def _exited(self, timeout: float) -> bool:
        if self.pidfd is None:
            return self._popen.poll() is not None
        return bool(select.select([self.pidfd], [], [], max(timeout, 0))[0])

    def stopped(self) -> bool:
        """Whether the child is stopped (SIGSTOP, SIGTSTP): alive, making no progress."""
        if self._exit is not None:
            return False
        try:
            info = os.waitid(os.P_PID, self.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        return info is not None and info.si_code == os.CLD_STOPPED

    def has_exited(self) -> bool:
        """Whether the child has ended, reaped or not (does not reap: the
        supervisor waiting on the pidfd still sees the end and its cause)."""
        return self._exit is not None or self._exited(0)

    def poll(self) -> Exit | None:
        if self._exit is None and self._exited(0):
            return self._reap()
        return self._exit

    def wait(self, timeout: float | None = None) -> Exit:
        """Wait for the end. Past ``timeout`` seconds the child is killed
        (:attr:`ExitKind.DEADLINE`); a child seen stopped is killed at once
        (:attr:`ExitKind.STOPPED`): it would never reach its deadline's work."""
        if self._exit is not None:
            return self._exit
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = STOP_CHECK_SECONDS
            if deadline is not None:
                step = min(step, deadline - time.monotonic())
            if self._exited(step):
                return self._reap()
            if self.stopped():
                self._signal(signal.SIGKILL)
                return self._reap(ExitKind.STOPPED)
            if deadline is not None and time.monotonic() >= deadline:
                self._signal(signal.SIGKILL)
                return self._reap(ExitKind.DEADLINE)

    def kill(self) -> Exit:
        """SIGKILL the child (if still running) and reap it."""
        if self._exit is None:
            self._signal(signal.SIGKILL)
            return self._reap(ExitKind.KILLED)
        return self._exit

    def close(self) -> Exit:
        return self.kill()

    def _signal(self, signum: int) -> None:
        # Its own process group (start_new_session): nothing it could have
        # started survives it. Already gone: reaping tells how.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)
