"""``naga.v1.SupervisorService``: the process tree (the core, its plugin
and agent workers, its gateway), shutdown, and the owner's restart of the
gateway."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from naga.v1 import core_pb2 as cpb
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._core import Core
from naga_core.daemon._errors import DaemonError
from naga_core.daemon._gateway import GatewayProcess

SERVICE = "naga.v1.SupervisorService"
MAX_REASON_CHARS = 500


class NoGateway(DaemonError):
    """RestartGateway on a core that runs without a gateway."""


class SupervisorServicer:
    """``children`` lists the supervised processes besides the core (the
    plugin workers); called on the loop for every Status. ``gateway`` is
    None when the core runs without one."""

    def __init__(
        self,
        core: Core,
        children: Callable[[], Sequence[cpb.ProcessStatus]] = lambda: (),
        gateway: GatewayProcess | None = None,
    ) -> None:
        self._core = core
        self._children = children
        self._gateway = gateway

    def methods(self) -> list[Method]:
        return [
            Unary("Status", cpb.StatusRequest, self.status),
            Unary("Shutdown", cpb.ShutdownRequest, self.shutdown, check_shutdown),
            AsyncUnary(
                "RestartGateway",
                cpb.RestartGatewayRequest,
                self.restart_gateway,
                check_restart_gateway,
            ),
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

    async def restart_gateway(
        self, p: Principal, req: cpb.RestartGatewayRequest
    ) -> cpb.RestartGatewayResponse:
        if self._gateway is None:
            raise NoGateway(
                "this core runs without a gateway (started with --no-gateway): there is "
                "nothing to restart; stop it and start it without --no-gateway"
            )
        return await self._gateway.restart(
            f"RestartGateway by {p.name}" + (f": {req.reason}" if req.reason else "")
        )


def check_shutdown(req: cpb.ShutdownRequest) -> None:
    _checks.text("reason", req.reason, max_chars=MAX_REASON_CHARS, required=False)


def check_restart_gateway(req: cpb.RestartGatewayRequest) -> None:
    _checks.text("reason", req.reason, max_chars=MAX_REASON_CHARS, required=False)


__all__ = ["SERVICE", "NoGateway", "SupervisorServicer"]
