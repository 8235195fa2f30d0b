"""The core's main and composition root: take the home, open the ledger and
kernel, build the token authority, serve, stop.

Order matters and is the point of this module:

1. the home and ``run/`` (0700) exist; the socket path fits;
2. ``run/core.lock`` is taken (a second core stops here, naming the first's
   pid), ``run/core.pid`` written, and only then a stale socket removed;
3. a fresh owner credential is written (0600); the token root key is read
   (``keys/token.key``, created 0600 on the first start);
4. the ledger is opened (recovering a torn tail; systemd is asked for more
   start-up time while that runs), the plugins discovered (their world
   actions installed before the kernel may re-run interrupted ones) and the
   kernel replayed, with the authorization ratchets (a rollback cannot
   un-revoke a token or refund a budget without the owner);
5. the plugins the ledger says ran are started again (naga_core.plugins);
   the server binds with a umask that makes the socket 0600 from its first
   instant, and starts; readiness is ``task_status.started(CoreInfo)`` and,
   under systemd, ``READY=1`` (watchdog pings run from the start);
6. on SIGTERM/SIGINT, a Shutdown call or a fatal ledger error: ``STOPPING=1``,
   stop accepting, let calls in flight finish (grace), stop the plugin
   workers, close the ledger, remove the socket, pid file and credential,
   release the lock.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

import sandbox
from naga.constants import (
    CORE_RPC_THREADS,
    MAX_RPC_REQUEST_BYTES,
    MAX_RPC_RESPONSE_BYTES,
    SHUTDOWN_GRACE_S,
)
from naga_core._home import Home
from naga_core._sdnotify import Notifier, NotifyFailed, extending_timeout, run_watchdog
from naga_core._store import open_ledger, projection_path
from naga_core.agent import Agent, AgentConfig, AgentWorkers
from naga_core.authz import AUTHZ_RATCHETS, TokenAuthority, ViolationPolicy, load_token_key
from naga_core.daemon import (
    _authz_service,
    _kernel_service,
    _ledger_service,
    _plugin_service,
    _supervisor_service,
    _turn_service,
)
from naga_core.daemon._auth import OwnerCredential
from naga_core.daemon._bridge import Bridge
from naga_core.daemon._core import Core, CoreInfo
from naga_core.daemon._credentials import CoreAuthorizer
from naga_core.daemon._errors import DaemonError
from naga_core.daemon._gateway import GatewayOptions, GatewayProcess
from naga_core.daemon._policy import POLICY
from naga_core.daemon._rundir import RunDir
from naga_core.errors import NagaError
from naga_core.kernel import RATCHETS, Actions, Kernel
from naga_core.ledger import Ledger, Projection
from naga_core.plugins import PluginHost, PluginsConfig, journaled

log = logging.getLogger("naga.core")


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """How to run one core. ``handle_signals`` only in a process's main
    thread. ``clock`` (Unix ns) is what token expiry is checked against.
    ``notifier``/``watchdog_ns`` come from systemd's environment
    (``_sdnotify.take_notify_environ``); None outside systemd."""

    home: Home
    handle_signals: bool = False
    grace_s: float = SHUTDOWN_GRACE_S
    threads: int = CORE_RPC_THREADS
    actions: Actions = field(default_factory=Actions)
    clock: Callable[[], int] = time.time_ns
    notifier: Notifier | None = None
    watchdog_ns: int | None = None
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    gateway: GatewayOptions = field(default_factory=GatewayOptions)


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
    notifier = config.notifier
    with rundir.locked(), contextlib.ExitStack() as stack:
        credential = OwnerCredential.create(rundir.token_path)
        key = load_token_key(config.home, create=True)
        if notifier is not None:
            notifier.status("opening the ledger")
        with extending_timeout(notifier):
            ledger = stack.enter_context(open_ledger(config.home, create=True))
            _catch_up_projection(config.home, ledger)
            plugins = PluginHost.discover(config.home, config.plugins)
            plugins.install(config.actions)  # before the kernel re-runs interrupted actions
            kernel = Kernel.open(ledger, config.actions, ratchets=(*RATCHETS, *AUTHZ_RATCHETS))
        for line in kernel.recovered:
            log.info("kernel recovery: %s", line)
        core = Core(home=config.home, socket=rundir.socket_path, ledger=ledger, kernel=kernel)
        core.authority = TokenAuthority.over_kernel(kernel, key, clock=config.clock)
        authorizer = CoreAuthorizer(
            owner=credential,
            authority=core.authority,
            violations=ViolationPolicy.over(kernel),
            write=core.write,
            trust=core.trust_watch,
        )
        # A rollback can bring a revocation back: open streams check again.
        core.on_rollback(authorizer.revocations.bump)
        await _serve(core, rundir, authorizer, config, task_status, plugins=plugins)
        if core.failure is None:
            _catch_up_projection(config.home, ledger)
    return CoreExit(core.stop_reason, failed=core.failure is not None)


def _bridge(
    core: Core,
    authorizer: CoreAuthorizer,
    config: CoreConfig,
    plugins: PluginHost,
    agent: Agent,
    *,
    gateway: GatewayProcess | None,
) -> Bridge:
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
        core,
        lambda: [
            *_plugin_service.process_rows(plugins),
            *_plugin_service.agent_rows(agent.workers),
            *([gateway.row()] if gateway is not None else []),
        ],
        gateway,
    )
    bridge.add(_supervisor_service.SERVICE, supervisor.methods())
    bridge.add(_plugin_service.SERVICE, _plugin_service.PluginServicer(plugins).methods())
    bridge.add(_authz_service.SERVICE, _authz_service.AuthzServicer(core, authorizer).methods())
    bridge.add(_turn_service.TURN_SERVICE, _turn_service.TurnServicer(agent).methods())
    bridge.add(_turn_service.MODEL_SERVICE, _turn_service.ModelServicer(agent).methods())
    bridge.add(_turn_service.TOOL_SERVICE, _turn_service.ToolServicer(agent).methods())
    unruled = sorted(set(bridge.served) - set(POLICY))
    if unruled:  # every call to them would be refused; say so at once instead
        raise DaemonError(f"methods without an access rule in _policy.POLICY: {unruled}")
    return bridge


async def _serve(
    core: Core,
    rundir: RunDir,
    authorizer: CoreAuthorizer,
    config: CoreConfig,
    task_status: trio.TaskStatus[CoreInfo],
    *,
    plugins: PluginHost,
) -> None:
    # Asked once for every sandboxed child of this core (each probe starts
    # interpreters), before anything launches.
    report = await trio.to_thread.run_sync(sandbox.detect)
    workers = AgentWorkers(config.home, config.agent, config.plugins.tuning)
    agent = Agent(core, plugins, workers, config.agent)
    gateway = (
        GatewayProcess(
            home=config.home.root,
            socket=rundir.socket_path,
            authority=lambda: core.authority,
            minted=core.minted,
            options=config.gateway,
            port_setting=lambda: core.settings.get_int("gateway.port"),
            settings_changed=lambda: _next_append(core),
            report=report,
        )
        if config.gateway.enabled
        else None
    )
    bridge = _bridge(core, authorizer, config, plugins, agent, gateway=gateway)
    notifier = config.notifier
    async with trio.open_nursery() as nursery:
        if config.handle_signals:
            await nursery.start(_stop_on_signals, core)
        if notifier is not None and config.watchdog_ns is not None:
            await nursery.start(run_watchdog, notifier, config.watchdog_ns)
        # Plugins the ledger says ran start again before the socket opens;
        # they stop after it closes (this nursery is cancelled last).
        await nursery.start(plugins.serve, core, report)
        # The executors and the provider start warming up now; a turn that
        # arrives before one is ready waits for it.
        await nursery.start(workers.serve, core, report)
        await nursery.start(agent.serve)
        async with bridge.serving(rundir.address, grace=config.grace_s):
            rundir.secure_socket()
            log.info("naga-core serving on %s (pid %d)", rundir.address, core.pid)
            if gateway is not None:
                # It talks to the core: only once the socket answers. The core
                # serves whether or not its gateway came up.
                await nursery.start(gateway.serve, _journal_note(core))
                core.webchat_url = gateway.url
            task_status.started(core.info)
            if notifier is not None:
                # After start(): the socket is bound and answering.
                notifier.ready(
                    status=f"serving on {rundir.address}; ledger {core.ledger.size} records"
                )
            await core.stopping.wait()
            if notifier is not None:
                try:
                    notifier.stopping(status=f"stopping: {core.stop_reason}")
                except NotifyFailed as exc:  # stopping cleanly matters more
                    log.warning("%s", exc)
        nursery.cancel_scope.cancel()


async def _next_append(core: Core) -> None:
    """Return after the ledger's next durable record (never once stopping:
    the core is going away and nothing needs to follow it)."""
    if core.stopping.is_set():
        await trio.sleep_forever()
    await core.wait_past(core.ledger.size)


def _journal_note(core: Core) -> Callable[[str], Awaitable[object]]:
    async def note(text: str) -> None:
        try:
            await journaled(core, lambda: core.kernel.perform([], None, description=text))
        except NagaError:
            log.exception("cannot journal %r", text)

    return note


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
