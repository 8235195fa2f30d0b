"""The sandboxed side: ``python -m sandbox._child SPEC_FD REPORT_FD LAUNCHER_PID``.

Asks to be killed when the launcher dies (``PR_SET_PDEATHSIG``, again once
the layers that may change its credentials are in place: no child outlives
its supervisor), reads one :class:`SandboxSpec` from ``SPEC_FD``, applies
the layers in this order, and reports on ``REPORT_FD``:

1. rlimits
2. no_new_privs
3. namespaces (a user namespace first when not root, then the network and
   mount ones), and the filesystem view: a new root holding only the
   profile's paths
4. capabilities dropped (needed until now to unshare and mount)
5. Landlock (restricts this thread and everything it starts later, so it
   goes before any thread exists)
6. import the target module, so its imports (and any threads it starts)
   happen while new code can still be mapped; or, when the spec names
   ``late_paths`` (a plugin's own folder) and the target is not found
   without them, import only the ``preload`` modules of the installation
7. every thread made the profile's ``nice`` steps nicer, then the seccomp
   filter, synchronised to every thread
8. for a late target: its folder appended to ``sys.path`` and the target
   imported now, under every layer (it can then load no shared library)

The interpreter was started isolated and without ``site`` (see
``sandbox._launcher``), on an import path holding only the installation's
read-only directories: no code of a plugin's folder is importable, let
alone run, before step 8.

then sends ``SetupReady``, closes the report pipe and calls the target with
its arguments. A layer that fails sends ``SetupFailure`` naming it and exits
with :data:`SETUP_FAILED`; nothing of the target runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar, cast

# Imported before any layer: pyseccomp locates libseccomp by running
# ldconfig, which needs exec and a full filesystem view.
from naga.v1 import sandbox_pb2
from sandbox import _landlock, _linux, _mounts, _seccomp, _wire
from sandbox._overlay import Overlay
from sandbox._wire import Layer

#: Exit status of a child whose setup failed (EX_SOFTWARE).
SETUP_FAILED = 70

T = TypeVar("T")
Target = Callable[[list[str]], object]


class _SetupError(Exception):
    def __init__(self, layer: Layer, errno: int, detail: str) -> None:
        super().__init__(detail)
        self.layer = layer
        self.errno = errno
        self.detail = detail


def _apply_rlimits(spec: sandbox_pb2.SandboxSpec) -> None:
    infinity = (1 << 64) - 1
    for lim in spec.rlimits:
        soft = resource.RLIM_INFINITY if lim.soft == infinity else lim.soft
        hard = resource.RLIM_INFINITY if lim.hard == infinity else lim.hard
        resource.setrlimit(lim.resource, (soft, hard))


def _enter_namespaces(spec: sandbox_pb2.SandboxSpec) -> None:
    flags = 0
    if spec.unshare_net:
        flags |= _linux.CLONE_NEWNET
    if spec.HasField("view"):
        flags |= _linux.CLONE_NEWNS
    if spec.unshare_user:
        uid, gid = os.getuid(), os.getgid()
        # The kernel creates the user namespace first, and the others
        # belong to it: we hold every capability there, none outside.
        _linux.unshare(_linux.CLONE_NEWUSER | flags)
        _linux.map_ids(uid, gid)
    else:
        _linux.unshare(flags)


def _enforce_landlock(spec: sandbox_pb2.LandlockSpec, task_dir: int) -> None:
    threads = _linux.thread_count(task_dir)
    if threads != 1:
        # Landlock binds only the calling thread and its later children.
        raise OSError(0, f"{threads} threads exist before Landlock; only this one may")
    _landlock.enforce(
        handled_fs=spec.handled_fs,
        handled_net=spec.handled_net,
        scoped=spec.scoped,
        paths=[(p.path, p.access) for p in spec.paths],
        bind_ports=spec.bind_ports,
        connect_ports=spec.connect_ports,
    )


def _resolve_target(target: str) -> Target:
    module_name, _, function_name = target.partition(":")
    module = importlib.import_module(module_name)
    function: object = getattr(module, function_name, None)
    if not callable(function):
        raise TypeError(f"{module_name} has no callable {function_name!r}")
    return cast("Target", function)


def _found_without_late_paths(target: str) -> bool:
    """Whether the target module resolves on the trusted path alone (then it
    is the installation's code, imported before the filter like any other)."""
    module_name = target.partition(":")[0]
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:  # a parent package is not there either
        return False


def _preload(names: list[str]) -> None:
    for name in names:
        importlib.import_module(name)


def _resolve_late(spec: sandbox_pb2.SandboxSpec) -> Target:
    # Appended, not prepended: nothing there can stand in for a module the
    # installation has (and those that matter are imported already).
    sys.path.extend(spec.late_paths)
    importlib.invalidate_caches()
    try:
        return _resolve_target(spec.target)
    except ImportError as e:
        raise ImportError(
            f"{e} (a plugin's own code is imported under the full sandbox, where no shared "
            "library can be loaded: it may use pure Python and the modules preloaded for it, "
            f"{', '.join(spec.preload) or 'none'})"
        ) from e


def _renice(nice: int, task_dir: int) -> None:
    """Every thread ``nice`` steps nicer, just before the filter (which then
    refuses setpriority): the setup ran at the launcher's priority, the
    target runs below it, and threads it starts later inherit that."""
    if not nice:
        return
    tids = [int(t) for t in os.listdir(task_dir)] if task_dir != -1 else [0]
    for tid in tids:
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


def _load_seccomp(spec: sandbox_pb2.SandboxSpec, task_dir: int) -> None:
    if not spec.seccomp.tsync and _linux.thread_count(task_dir) != 1:
        raise OSError(0, "other threads exist and this kernel cannot synchronise the filter")
    _renice(spec.nice, task_dir)
    _seccomp.load(spec.seccomp, os.getpid())


class _Setup:
    """Applies the layers, timing each, and turns failures into _SetupError."""

    def __init__(self) -> None:
        self.timings: list[tuple[Layer, int]] = []

    def step(self, layer: Layer, action: Callable[[], T]) -> T:
        start = time.monotonic_ns()
        try:
            result = action()
        except OSError as e:
            raise _SetupError(layer, e.errno or 0, str(e)) from e
        except Exception as e:  # any failure of the target's import is reported
            raise _SetupError(layer, 0, f"{type(e).__name__}: {e}") from e
        self.timings.append((layer, time.monotonic_ns() - start))
        return result


def _setup(spec: sandbox_pb2.SandboxSpec, setup: _Setup, launcher: int) -> Target:
    try:
        task_dir = _linux.open_task_dir()
    except OSError:
        task_dir = -1  # no /proc: the layers that must count threads fail, saying so
    try:
        return _setup_layers(spec, setup, task_dir, launcher)
    finally:
        if task_dir != -1:
            os.close(task_dir)  # the target gets no handle into /proc


def _setup_layers(
    spec: sandbox_pb2.SandboxSpec, setup: _Setup, task_dir: int, launcher: int
) -> Target:
    setup.step(Layer.RLIMITS, lambda: _apply_rlimits(spec))
    setup.step(Layer.NO_NEW_PRIVS, _linux.set_no_new_privs)
    if spec.unshare_user:
        setup.step(Layer.USER_NAMESPACE, lambda: _enter_namespaces(spec))
    elif spec.unshare_net:
        setup.step(Layer.NET_NAMESPACE, lambda: _enter_namespaces(spec))
    elif spec.HasField("view"):
        setup.step(Layer.MOUNT_NAMESPACE, lambda: _enter_namespaces(spec))
    if spec.HasField("view"):
        view = spec.view
        paths = [(p.path, p.writable) for p in view.paths]
        overlays = [(Overlay(o.lower, o.upper, o.work), o.target) for o in view.overlays]
        files = [(f.path, f.content) for f in view.files]
        setup.step(
            Layer.MOUNT_NAMESPACE, lambda: _mounts.enter_view(paths, view.cwd, overlays, files)
        )
    if spec.drop_capabilities:
        setup.step(Layer.CAPABILITIES, _linux.drop_capabilities)
    if spec.HasField("landlock"):
        setup.step(Layer.LANDLOCK_FS, lambda: _enforce_landlock(spec.landlock, task_dir))
    # Asked again: a change of credentials (the layers above) may clear the
    # parent-death signal, and the target's import comes next.
    _linux.die_with(launcher)
    late = bool(spec.late_paths) and not setup.step(
        Layer.TARGET, lambda: _found_without_late_paths(spec.target)
    )
    if late:
        setup.step(Layer.TARGET, lambda: _preload(list(spec.preload)))
        setup.step(Layer.SECCOMP, lambda: _load_seccomp(spec, task_dir))
        return setup.step(Layer.TARGET, lambda: _resolve_late(spec))
    target = setup.step(Layer.TARGET, lambda: _resolve_target(spec.target))
    setup.step(Layer.SECCOMP, lambda: _load_seccomp(spec, task_dir))
    return target


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 3 or not all(a.isdigit() for a in argv):
        sys.stderr.write("usage: python -m sandbox._child SPEC_FD REPORT_FD LAUNCHER_PID\n")
        sys.exit(2)
    spec_fd, report_fd, launcher = int(argv[0]), int(argv[1]), int(argv[2])
    # Before anything slow (the target's imports are most of a start): a
    # child whose supervisor is gone has no one to serve.
    _linux.die_with(launcher)
    spec = _wire.read_message(spec_fd, sandbox_pb2.SandboxSpec())
    os.close(spec_fd)
    if spec is None:
        sys.stderr.write("sandbox child: the launcher sent no spec\n")
        sys.exit(SETUP_FAILED)
    setup = _Setup()
    try:
        target = _setup(spec, setup, launcher)
    except _SetupError as e:
        failure = sandbox_pb2.SetupFailure(layer=e.layer.to_proto(), errno=e.errno, detail=e.detail)
        _wire.write_message(report_fd, sandbox_pb2.SetupReport(failure=failure))
        os._exit(SETUP_FAILED)
    ready = sandbox_pb2.SetupReady(
        timings=[
            sandbox_pb2.LayerTiming(layer=layer.to_proto(), nanoseconds=ns)
            for layer, ns in setup.timings
        ]
    )
    _wire.write_message(report_fd, sandbox_pb2.SetupReport(ready=ready))
    os.close(report_fd)
    result = target(list(spec.args))
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
