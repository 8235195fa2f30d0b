"""``naga.v1.PluginService``: list, enable, disable, replace plugins, and
call their tools (proto/naga/v1/plugin_service.proto).

Enable, Disable and Replace journal through the kernel (staged, settled by
the bridge before the answer); they then wait, within the request's
``wait_ms``, for the worker to run or stop, so the answer says how far it
got. Invoke waits for the plugin's answer on the loop while other calls are
served (an :class:`AsyncUnary`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from naga.constants import (
    MAX_PLUGIN_CALLS_IN_FLIGHT,
    PLUGIN_MAX_ARGUMENTS_CHARS,
    PLUGIN_MAX_NAME_CHARS,
    TOKEN_MAX_TOOL_NAME_CHARS,
)
from naga.plugin import Manifest, kind_to_proto, risk_to_proto
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_service_pb2 as spb
from naga_core.agent import LOCAL_MODEL_ROLE, AgentWorkers
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._errors import RequestRefused
from naga_core.egress import OPEN_PORTS
from naga_core.plugins import PluginHost, PluginView, Worker, WorkerState

SERVICE = "naga.v1.PluginService"
MAX_WAIT_MS = 60_000
MAX_TIMEOUT_MS = 600_000

_STATES = {
    "disabled": spb.PLUGIN_STATE_DISABLED,
    "starting": spb.PLUGIN_STATE_STARTING,
    "running": spb.PLUGIN_STATE_RUNNING,
    "failed": spb.PLUGIN_STATE_FAILED,
    "pending": spb.PLUGIN_STATE_PENDING,
    "stopped": spb.PLUGIN_STATE_STARTING,
}


class PluginServicer:
    def __init__(
        self, host: PluginHost, open_hosts: Callable[[Manifest], Iterable[str]] = lambda _: ()
    ) -> None:
        """``open_hosts``: the hosts a plugin reaches beyond its manifest's
        egress (the web tool's ``web.allowed_hosts``), shown in its info."""
        self._host = host
        self._open_hosts = open_hosts
        self._calls = 0  # Invokes in flight (on the loop: no lock)

    def methods(self) -> list[Method]:
        return [
            Unary("List", spb.ListPluginsRequest, self.list),
            AsyncUnary("Enable", spb.EnablePluginRequest, self.enable, check_enable),
            AsyncUnary("Disable", spb.DisablePluginRequest, self.disable, check_disable),
            AsyncUnary("Replace", spb.ReplacePluginRequest, self.replace, check_replace),
            AsyncUnary("Invoke", spb.InvokeToolRequest, self.invoke, check_invoke),
        ]

    def list(self, _p: Principal, _req: spb.ListPluginsRequest) -> spb.ListPluginsResponse:
        return spb.ListPluginsResponse(plugins=[self.info(v) for v in self._host.views()])

    async def enable(self, _p: Principal, req: spb.EnablePluginRequest) -> spb.EnablePluginResponse:
        changed = self._host.enable(req.name)
        await self._host.wait_ready(req.name, req.wait_ms / 1000)
        return spb.EnablePluginResponse(
            plugin=self.info(self._host.view(req.name)), changed=changed
        )

    async def disable(
        self, _p: Principal, req: spb.DisablePluginRequest
    ) -> spb.DisablePluginResponse:
        changed = self._host.disable(req.name)
        if changed:
            await self._host.wait_stopped(req.name)
        return spb.DisablePluginResponse(
            plugin=self.info(self._host.view(req.name)), changed=changed
        )

    async def replace(
        self, _p: Principal, req: spb.ReplacePluginRequest
    ) -> spb.ReplacePluginResponse:
        previous = self._host.replace(req.name, req.version)
        await self._host.wait_ready(req.name, req.wait_ms / 1000)
        return spb.ReplacePluginResponse(
            plugin=self.info(self._host.view(req.name)), previous_version=previous
        )

    async def invoke(self, _p: Principal, req: spb.InvokeToolRequest) -> spb.InvokeToolResponse:
        if self._calls >= MAX_PLUGIN_CALLS_IN_FLIGHT:
            raise RequestRefused.exhausted(
                f"{self._calls} plugin calls are in flight, the most the core runs at once; "
                "retry when one has ended"
            )
        self._calls += 1
        try:
            timeout = req.timeout_ms / 1000 if req.timeout_ms else None
            result, pid = await self._host.invoke(req.plugin, req.tool, req.arguments_json, timeout)
        finally:
            self._calls -= 1
        return spb.InvokeToolResponse(result_json=result, pid=pid)

    def info(self, view: PluginView) -> spb.PluginInfo:
        out = info(view)
        if view.installed is not None:
            hosts = sorted(h for h in self._open_hosts(view.installed.manifest) if h.strip())
            out.egress.extend(f"{h}:{port}" for h in hosts for port in sorted(OPEN_PORTS))
        return out


def info(view: PluginView) -> spb.PluginInfo:
    out = spb.PluginInfo(
        name=view.name,
        versions=list(view.versions),
        enabled=view.enabled,
        state=_STATES.get(view.state, spb.PLUGIN_STATE_UNSPECIFIED),
        last_failure=view.failure,
        problems=list(view.problems),
    )
    if view.installed is not None:
        m = view.installed.manifest
        out.version = m.version
        out.kind = kind_to_proto(m.kind)
        out.directory = view.installed.directory
        out.shipped = view.installed.shipped
        out.tools.extend(
            spb.PluginTool(name=t.name, risk=risk_to_proto(t.risk), description=t.description)
            for t in m.tools
        )
        out.egress.extend(f"{e.host}:{e.port}" for e in m.egress)
        out.capabilities.extend(sorted(m.capabilities))
    worker = view.worker
    if worker is not None:
        out.pid = worker.pid
        out.restarts = worker.restarts
        out.last_failure = out.last_failure or worker.last_failure
    return out


_PROCESS_STATES = {
    WorkerState.STARTING: cpb.PROCESS_STATE_STARTING,
    WorkerState.BACKOFF: cpb.PROCESS_STATE_STARTING,
    WorkerState.RUNNING: cpb.PROCESS_STATE_RUNNING,
    WorkerState.FAILED: cpb.PROCESS_STATE_FAILED,
    WorkerState.STOPPED: cpb.PROCESS_STATE_STOPPED,
}


def process_rows(host: PluginHost) -> list[cpb.ProcessStatus]:
    """One row per plugin worker, for SupervisorService.Status."""
    return [_row(w) for w in host.workers()]


def agent_rows(workers: AgentWorkers) -> list[cpb.ProcessStatus]:
    """One row per executor of the pool, for the model-provider worker, and for
    the embedded local model server once it was started."""
    rows = [_row(w, role) for role, w in workers.pids()]
    local = workers.local_model_status()
    if local is not None:
        rows.append(
            cpb.ProcessStatus(
                role=LOCAL_MODEL_ROLE,
                pid=local.pid,
                state=_PROCESS_STATES[local.state],
                started_ns=local.started_ns,
                detail=local.detail,
            )
        )
    return rows


def worker_row(worker: Worker, role: str | None = None) -> cpb.ProcessStatus:
    """One worker as a process row (the daemon's other services use it too)."""
    return _row(worker, role)


def _row(worker: Worker, role: str | None = None) -> cpb.ProcessStatus:
    state = _PROCESS_STATES[worker.state]
    if worker.stopping and worker.state is not WorkerState.STOPPED:
        state = cpb.PROCESS_STATE_STOPPING
    return cpb.ProcessStatus(
        role=role or f"plugin:{worker.name}",
        pid=worker.pid,
        state=state,
        started_ns=worker.started_ns,
        restarts=worker.restarts,
        detail=worker.last_failure,
    )


# --- request checks (server thread) ---------------------------------------------------


def _name(field: str, value: str) -> None:
    _checks.text(field, value, max_chars=PLUGIN_MAX_NAME_CHARS)


def _wait(value: int) -> None:
    if value > MAX_WAIT_MS:
        raise RequestRefused.invalid(f"wait_ms {value} is above the maximum of {MAX_WAIT_MS}")


def check_enable(req: spb.EnablePluginRequest) -> None:
    _name("name", req.name)
    _wait(req.wait_ms)


def check_disable(req: spb.DisablePluginRequest) -> None:
    _name("name", req.name)


def check_replace(req: spb.ReplacePluginRequest) -> None:
    _name("name", req.name)
    _checks.text("version", req.version, max_chars=32)
    _wait(req.wait_ms)


def check_invoke(req: spb.InvokeToolRequest) -> None:
    _name("plugin", req.plugin)
    _checks.text("tool", req.tool, max_chars=TOKEN_MAX_TOOL_NAME_CHARS)
    if len(req.arguments_json) > PLUGIN_MAX_ARGUMENTS_CHARS:
        raise RequestRefused.invalid(
            f"arguments_json has {len(req.arguments_json)} characters; "
            f"at most {PLUGIN_MAX_ARGUMENTS_CHARS} are accepted"
        )
    if req.timeout_ms > MAX_TIMEOUT_MS:
        raise RequestRefused.invalid(
            f"timeout_ms {req.timeout_ms} is above the maximum of {MAX_TIMEOUT_MS}"
        )


__all__ = ["SERVICE", "PluginServicer", "agent_rows", "info", "process_rows"]
