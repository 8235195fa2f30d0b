"""The supervisor's parts that know nothing of what a worker does: when to
restart and when to give up (:class:`RestartPolicy`), the numbers it watches
by (:class:`WorkerTuning`), and a sandboxed child as a trio task sees it
(:func:`sandboxed`, :func:`wait_exit`, :func:`resident_bytes`).

The plugin host (``naga_core.plugins``) builds its workers on these; the
gateway and the executors will too. docs/design/plugins.md.
"""

from naga_core.supervisor._child import proc_status, resident_bytes, sandboxed, wait_exit
from naga_core.supervisor._restart import (
    Decision,
    RestartHistory,
    RestartPolicy,
    RestartPolicyInvalid,
    SupervisorError,
)
from naga_core.supervisor._tuning import WorkerTuning

__all__ = [
    "Decision",
    "RestartHistory",
    "RestartPolicy",
    "RestartPolicyInvalid",
    "SupervisorError",
    "WorkerTuning",
    "proc_status",
    "resident_bytes",
    "sandboxed",
    "wait_exit",
]
