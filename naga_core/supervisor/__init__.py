"""The supervisor's parts that know nothing of what a worker does: when to
restart and when to give up (:class:`RestartPolicy`), the numbers it watches
by (:class:`WorkerTuning`), and a sandboxed child as a trio task sees it
(:func:`sandboxed`, :func:`wait_exit`, :func:`resident_bytes`), and its
output copied into the core's log under its name (:func:`pump_output`).

The plugin host (``naga_core.plugins``) builds its workers on these; the
gateway and the executors will too. docs/design/plugins.md.
"""

from naga_core.supervisor._cgroups import launch_in, worker_cgroup
from naga_core.supervisor._child import proc_status, resident_bytes, sandboxed, wait_exit
from naga_core.supervisor._output import OutputLimits, pump_output
from naga_core.supervisor._restart import (
    Decision,
    RestartHistory,
    RestartPolicy,
    RestartPolicyInvalid,
    SupervisorError,
)
from naga_core.supervisor._tuning import WorkerTuning
from naga_core.supervisor._usage import CpuWindow, DiskUse, cpu_seconds, disk_use, thread_count

__all__ = [
    "CpuWindow",
    "Decision",
    "DiskUse",
    "OutputLimits",
    "RestartHistory",
    "RestartPolicy",
    "RestartPolicyInvalid",
    "SupervisorError",
    "WorkerTuning",
    "cpu_seconds",
    "launch_in",
    "worker_cgroup",
    "disk_use",
    "proc_status",
    "pump_output",
    "resident_bytes",
    "sandboxed",
    "thread_count",
    "wait_exit",
]
