"""A worker's own cgroup, where the kernel offers cgroups (sandbox._cgroup,
docs/adr/0031-sec-cgroups.md): ``WorkerTuning.cpu_max`` CPUs and a memory
ceiling ``cgroup_memory_factor`` times the worker's resident ceiling."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import sandbox
from naga_core.supervisor._tuning import WorkerTuning

log = logging.getLogger("naga.supervisor")


def worker_cgroup(
    report: sandbox.KernelReport | None,
    tuning: WorkerTuning,
    label: str,
    resident_bytes: int,
    *,
    nice: int = 0,
) -> sandbox.Cgroup | None:
    """A fresh cgroup for one launch, or None where there are none (``naga
    doctor`` says why) or one cannot be made (logged: it runs without)."""
    support = None if report is None else report.cgroups
    if support is None or not support.usable:
        return None
    limits = sandbox.CgroupLimits(
        cpus=tuning.cpu_max,
        memory_bytes=resident_bytes * tuning.cgroup_memory_factor,
        nice=nice,
    )
    try:
        return sandbox.Cgroup.create(support, label, limits)
    except OSError as exc:
        log.warning("%s: runs without a cgroup of its own: %s", label, exc)
        return None


def launch_in(
    cgroup: sandbox.Cgroup | None, launch: Callable[[sandbox.Cgroup | None], sandbox.Sandboxed]
) -> sandbox.Sandboxed:
    """``launch(cgroup)``; the cgroup removed if the launch fails before the
    child's handle owns it (the handle removes it once it reaps the child)."""
    try:
        return launch(cgroup)
    except BaseException:
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.remove()
        raise


__all__ = ["launch_in", "worker_cgroup"]
