"""``naga.v1.SupervisorService``: the process tree (the core and its plugin
workers, until the gateway and executors arrive) and shutdown."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from naga.v1 import core_pb2 as cpb
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import Method, Unary
from naga_core.daemon._core import Core

SERVICE = "naga.v1.SupervisorService"
MAX_REASON_CHARS = 500


class SupervisorServicer:
    """``children`` lists the supervised processes besides the core (the
    plugin workers); called on the loop for every Status."""

    def __init__(
        self, core: Core, children: Callable[[], Sequence[cpb.ProcessStatus]] = lambda: ()
    ) -> None:
        self._core = core
        self._children = children

    def methods(self) -> list[Method]:
        return [
            Unary("Status", cpb.StatusRequest, self.status),
            Unary("Shutdown", cpb.ShutdownRequest, self.shutdown, check_shutdown),
        ]

    def status(self, _p: Principal, _req: cpb.StatusRequest) -> cpb.StatusResponse:
        core = self._core
        state = cpb.PROCESS_STATE_STOPPING if core.stopping.is_set() else cpb.PROCESS_STATE_RUNNING
        return cpb.StatusResponse(
            processes=[
                cpb.ProcessStatus(
                    role="core", pid=core.pid, state=state, started_ns=core.started_ns
                ),
                *self._children(),
            ],
            socket=core.socket,
            home=core.home.root,
            ledger_size=core.ledger.size,
        )

    def shutdown(self, p: Principal, req: cpb.ShutdownRequest) -> cpb.ShutdownResponse:
        # The reply is in flight when the server stops; the grace lets it out.
        self._core.request_stop(f"Shutdown by {p.name}" + (f": {req.reason}" if req.reason else ""))
        return cpb.ShutdownResponse()


def check_shutdown(req: cpb.ShutdownRequest) -> None:
    _checks.text("reason", req.reason, max_chars=MAX_REASON_CHARS, required=False)


__all__ = ["SERVICE", "SupervisorServicer"]
