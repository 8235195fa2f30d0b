"""The core's main: take the home, open the ledger and kernel, serve, stop.

Order matters and is the point of this module:

1. the home and ``run/`` (0700) exist; the socket path fits;
2. ``run/core.lock`` is taken (a second core stops here, naming the first's
   pid), ``run/core.pid`` written, and only then a stale socket removed;
3. a fresh owner credential is written (0600);
4. the ledger is opened (recovering a torn tail), the plugins discovered
   and the kernel replayed;
5. the plugins the ledger says ran are started again (naga_core.plugins);
   the server binds with a umask that makes the socket 0600 from its first
   instant, and starts; readiness is ``task_status.started(CoreInfo)``;
6. on SIGTERM/SIGINT, a Shutdown call or a fatal ledger error: stop
   accepting, let calls in flight finish (grace), stop the plugin workers,
   close the ledger, remove the socket, pid file and credential, release
   the lock.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field

import trio

from naga.constants import (
    CORE_RPC_THREADS,
    MAX_RPC_REQUEST_BYTES,
    MAX_RPC_RESPONSE_BYTES,
    SHUTDOWN_GRACE_S,
)
from naga_core._home import Home
from naga_core._store import open_ledger, projection_path
from naga_core.daemon import (
    _kernel_service,
    _ledger_service,
    _plugin_service,
    _supervisor_service,
)
from naga_core.daemon._auth import Authorizer, OwnerCredential
from naga_core.daemon._bridge import Bridge
from naga_core.daemon._core import Core, CoreInfo
from naga_core.daemon._rundir import RunDir
from naga_core.kernel import Actions, open_kernel
from naga_core.ledger import Ledger, Projection
from naga_core.plugins import PluginHost, PluginsConfig

log = logging.getLogger("naga.core")


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """How to run one core. ``handle_signals`` only in a process's main thread."""

    home: Home
    handle_signals: bool = False
    grace_s: float = SHUTDOWN_GRACE_S
    threads: int = CORE_RPC_THREADS
    actions: Actions = field(default_factory=Actions)
    plugins: PluginsConfig = field(default_factory=PluginsConfig)


@dataclass(frozen=True, slots=True)
class CoreExit:
    """How a core ended: ``failed`` after a fatal ledger error."""

    reason: str
    failed: bool


async def serve_core(
    config: CoreConfig, *, task_status: trio.TaskStatus[CoreInfo] = trio.TASK_STATUS_IGNORED
) -> CoreExit:
    """Serve the home's core until asked to stop; see the module doc for the order."""
    rundir = RunDir(config.home)
    rundir.prepare()
    with rundir.locked():
        credential = OwnerCredential.create(rundir.token_path)
        with open_ledger(config.home, create=True) as ledger:
            _catch_up_projection(config.home, ledger)
            plugins = PluginHost.discover(config.home, config.plugins)
            plugins.install(config.actions)  # before the kernel re-runs interrupted actions
            kernel = open_kernel(ledger, config.actions)
            for line in kernel.recovered:
                log.info("kernel recovery: %s", line)
            core = Core(home=config.home, socket=rundir.socket_path, ledger=ledger, kernel=kernel)
            await _serve(core, rundir, credential, config, task_status, plugins=plugins)
            if core.failure is None:
                _catch_up_projection(config.home, ledger)
    return CoreExit(core.stop_reason, failed=core.failure is not None)


async def _serve(
    core: Core,
    rundir: RunDir,
    authorizer: Authorizer,
    config: CoreConfig,
    task_status: trio.TaskStatus[CoreInfo],
    *,
    plugins: PluginHost,
) -> None:
    bridge = Bridge(
        authorizer=authorizer,
        on_fatal=core.fail,
        settle=core.settle,
        on_settled=core.notify_appended,
        threads=config.threads,
        max_request_bytes=MAX_RPC_REQUEST_BYTES,
        max_response_bytes=MAX_RPC_RESPONSE_BYTES,
    )
    bridge.add(_kernel_service.SERVICE, _kernel_service.KernelServicer(core).methods())
    bridge.add(_ledger_service.SERVICE, _ledger_service.LedgerServicer(core).methods())
    supervisor = _supervisor_service.SupervisorServicer(
        core, lambda: _plugin_service.process_rows(plugins)
    )
    bridge.add(_supervisor_service.SERVICE, supervisor.methods())
    bridge.add(_plugin_service.SERVICE, _plugin_service.PluginServicer(plugins).methods())
    async with trio.open_nursery() as nursery:
        if config.handle_signals:
            await nursery.start(_stop_on_signals, core)
        # Plugins the ledger says ran start again before the socket opens;
        # they stop after it closes (this nursery is cancelled last).
        await nursery.start(plugins.serve, core)
        async with bridge.serving(rundir.address, grace=config.grace_s):
            rundir.secure_socket()
            log.info("naga-core serving on %s (pid %d)", rundir.address, core.pid)
            task_status.started(core.info)
            await core.stopping.wait()
        nursery.cancel_scope.cancel()


async def _stop_on_signals(core: Core, *, task_status: trio.TaskStatus[None]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            core.request_stop(signal.Signals(signum).name)


def _catch_up_projection(home: Home, ledger: Ledger) -> None:
    # The projection is derived (never the source of truth): keeping it
    # current at start and stop is what `naga ledger verify` compares.
    projection = Projection.open(projection_path(home))
    try:
        projection.catch_up(ledger)
    finally:
        projection.close()


__all__ = ["CoreConfig", "CoreExit", "serve_core"]
