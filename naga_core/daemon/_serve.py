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
   refund a live token's budget without the owner) and keeps (a rollback
   never lifts a revocation, ADR 0046);
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
import functools
import logging
import os
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
from naga_core import constitution
from naga_core._home import Home
from naga_core._sdnotify import Notifier, NotifyFailed, extending_timeout, run_watchdog
from naga_core._store import blob_store, open_ledger, projection_path
from naga_core.agent import (
    Agent,
    AgentConfig,
    AgentWorkers,
    Distillations,
    StartFold,
    ToolCalls,
    enable_shipped_tools,
    web_open_hosts,
)
from naga_core.approvals import Approvals
from naga_core.authz import (
    AUTHZ_KEEPS,
    EndedTokens,
    TokenAuthority,
    ViolationPolicy,
    load_token_key,
)
from naga_core.daemon import (
    _approval_service,
    _authz_service,
    _console_login,
    _install_service,
    _job_service,
    _kernel_service,
    _ledger_service,
    _memory_service,
    _plugin_service,
    _skill_service,
    _supervisor_service,
    _turn_service,
)
from naga_core.daemon._auth import OwnerCredential
from naga_core.daemon._bridge import Bridge
from naga_core.daemon._console_admin import SERVICE as CONSOLE_ADMIN_SERVICE
from naga_core.daemon._console_admin import ConsoleAdminServicer
from naga_core.daemon._core import Core, CoreInfo
from naga_core.daemon._credentials import CoreAuthorizer
from naga_core.daemon._errors import DaemonError
from naga_core.daemon._gateway import GatewayOptions, GatewayProcess
from naga_core.daemon._liveness import Liveness
from naga_core.daemon._policy import POLICY
from naga_core.daemon._rehash import RehashOptions, serve_rehash
from naga_core.daemon._rundir import RunDir
from naga_core.daemon._session_meta import SessionMeta
from naga_core.daemon._startup import StartSnapshots, open_state, snapshot_store
from naga_core.daemon._trim import trim_heap
from naga_core.daemon._wechat_service import (
    WECHAT_MEDIA_SERVICE,
    WECHAT_SERVICE,
    WechatMediaServicer,
    WechatServicer,
    wechat_rows,
)
from naga_core.egress import EgressProxies
from naga_core.errors import NagaError
from naga_core.kernel import RATCHETS, Actions
from naga_core.ledger import Ledger, Projection
from naga_core.plugins import PluginHost, PluginsConfig, journaled
from naga_core.scheduler import AgentRunner, FireLog, JobCreateTool, Scheduler, SchedulerConfig
from naga_core.skills import Library, SkillStore, curate_when_idle, sealed_files_root
from naga_core.skills import clear_files as clear_skill_files
from naga_core.wechat import ChannelConfig, WechatChannel, WechatSendFileTool
from naga_core.workspace import Workspace

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
    wechat: ChannelConfig = field(default_factory=ChannelConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    gateway: GatewayOptions = field(default_factory=GatewayOptions)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    #: the background rehash of sealed segments (ADR 0057, ADR 0061)
    rehash: RehashOptions = field(default_factory=RehashOptions)
    #: Enable the shipped tools (fs, shell, web) on a fresh home, at its start.
    default_tools: bool = True


@dataclass(frozen=True, slots=True)
class CoreExit:
    """How a core ended: ``failed`` after a fatal ledger error."""

    reason: str
    failed: bool


@dataclass(frozen=True, slots=True)
class _Start:
    """What this start found of the last stop: what its open cleaned (lines
    for the start's note) and whether that stop was a crash; and the
    kernel ratchet's ended turn tokens, for the agent to fill."""

    cleaned: list[str]
    crashed: bool
    ended: EndedTokens
    #: the agent's start-up fold (from a snapshot, or empty) and the writer
    #: of the next snapshots (naga_core.daemon._startup)
    fold: StartFold
    fires: FireLog
    snapshots: StartSnapshots
    guard: constitution.Guard


async def serve_core(
    config: CoreConfig, *, task_status: trio.TaskStatus[CoreInfo] = trio.TASK_STATUS_IGNORED
) -> CoreExit:
    """Serve the home's core until asked to stop; see the module doc for the order."""
    rundir = RunDir(config.home)
    rundir.prepare()
    notifier = config.notifier
    with rundir.locked(), contextlib.ExitStack() as stack:
        # Forks every sandboxed child of this core. Closed by the stack,
        # after _serve's nursery has reaped them all: its thread's end would
        # SIGKILL any still running (PR_SET_PDEATHSIG; ADR 0062).
        forker = stack.enter_context(sandbox.Forker())
        credential = OwnerCredential.create(rundir.token_path)
        key = load_token_key(config.home, create=True)
        if notifier is not None:
            notifier.status("opening the ledger")
        with extending_timeout(notifier):
            # The sealed segments are rehashed after readiness, not before
            # (ADR 0057: the start's CPU and reads grew with every segment).
            ledger = stack.enter_context(
                open_ledger(config.home, create=True, check_contents=False)
            )
            cleaned = [*ledger.report.lines()[1:], *_catch_up_projection(config.home, ledger)]
            plugins = PluginHost.discover(config.home, config.plugins)
            plugins.install(config.actions)  # before the kernel re-runs interrupted actions
            workspace = Workspace(config.home, blob_store(config.home), lambda: "")
            workspace.install(config.actions)  # workspace.apply, for the same reason
            constitution.install(config.actions, config.home, blob_store(config.home))
            # A refund to an ended turn's token raises nothing (INV-6):
            # the agent says which have ended. A rollback never lifts a
            # revocation (ADR 0046): a restart revokes every worker's.
            ended = EndedTokens()
            store = snapshot_store(config.home)
            opened = open_state(
                ledger,
                config.actions,
                ratchets=(*RATCHETS, *ended.ratchets),
                keeps=AUTHZ_KEEPS,
                store=store,
                new_fold=lambda also: StartFold(keys_kept=config.agent.keys_kept, also=also),
                keys_kept=config.agent.keys_kept,
            )
            kernel = opened.kernel
        tail = ledger.size - 1 - opened.image_seq
        log.info(
            "naga-core start-up state: %s",
            f"snapshot at seq {opened.image_seq} and {tail} records after it"
            if opened.image_seq >= 0
            else f"full replay of {ledger.size} records",
        )
        for line in kernel.recovered:
            log.info("kernel recovery: %s", line)
        core = Core(home=config.home, socket=rundir.socket_path, ledger=ledger, kernel=kernel)
        # INV-5: verified (or, on a first start, the default installed) before
        # anything is served; a mismatch refuses the start after a ledger note.
        guard = constitution.Guard(
            config.home,
            kernel,
            interval_s=lambda: core.settings.get_real("constitution.check_s"),
            status_dir=rundir.path,
        )
        guard.at_start()
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
        # A worker's tokens are revoked when it ends: its open streams end too.
        plugins.on_revoked(authorizer.revocations.bump)
        workspace.read_setting(lambda: core.settings.get_text("workspace.path"))
        tools = ToolCalls(core, plugins, workspace, Approvals(core, config.clock), forker)
        snapshots = StartSnapshots(
            ledger,
            kernel,
            store,
            every=lambda: core.settings.get_int("ledger.snapshot_every"),
            clock=config.clock,
            last_seq=opened.image_seq,
        )
        start = _Start(
            cleaned=cleaned,
            crashed=rundir.stale_pid is not None,
            ended=ended,
            fold=opened.fold,
            fires=opened.fires,
            snapshots=snapshots,
            guard=guard,
        )
        try:
            await _serve(
                core,
                rundir,
                authorizer,
                config,
                task_status,
                plugins=plugins,
                tools=tools,
                start=start,
                forker=forker,
            )
        finally:  # sealed skills' plaintext files go with the core that wrote them
            with contextlib.suppress(OSError):
                clear_skill_files(sealed_files_root(config.home.root))
        if core.failure is None:
            _catch_up_projection(config.home, ledger)
            try:  # the next start replays nothing
                snapshots.write()
            except NagaError as exc:
                log.warning("naga-core: no start-up snapshot at the stop: %s", exc)
    return CoreExit(core.stop_reason, failed=core.failure is not None or guard.tampered)


def _bridge(
    core: Core,
    authorizer: CoreAuthorizer,
    config: CoreConfig,
    plugins: PluginHost,
    agent: Agent,
    *,
    gateway: GatewayProcess | None,
    wechat: WechatChannel,
    scheduler: Scheduler,
    distillations: Distillations,
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
    kernel_service = _kernel_service.KernelServicer(core)
    bridge.add(_kernel_service.SERVICE, kernel_service.methods())
    bridge.add(
        _ledger_service.SERVICE, _ledger_service.LedgerServicer(core, agent.memory.sealer).methods()
    )
    supervisor = _supervisor_service.SupervisorServicer(
        core,
        lambda: [
            *_plugin_service.process_rows(plugins),
            *_plugin_service.agent_rows(agent.workers),
            *wechat_rows(wechat),
            *([gateway.row()] if gateway is not None else []),
        ],
        gateway,
    )
    bridge.add(_supervisor_service.SERVICE, supervisor.methods())
    plugin_service = _plugin_service.PluginServicer(
        plugins, lambda m: web_open_hosts(core, plugins, m)
    )
    bridge.add(_plugin_service.SERVICE, plugin_service.methods())
    bridge.add(_authz_service.SERVICE, _authz_service.AuthzServicer(core, authorizer).methods())
    meta = SessionMeta(core)
    bridge.add(_turn_service.TURN_SERVICE, _turn_service.TurnServicer(agent, meta).methods())
    bridge.add(_turn_service.MODEL_SERVICE, _turn_service.ModelServicer(agent).methods())
    bridge.add(_turn_service.TOOL_SERVICE, _turn_service.ToolServicer(agent).methods())
    approvals = _approval_service.ApprovalServicer(agent.tools.approvals)
    bridge.add(_approval_service.SERVICE, approvals.methods())
    wechat_service = WechatServicer(wechat)
    bridge.add(WECHAT_SERVICE, wechat_service.methods())
    bridge.add(WECHAT_MEDIA_SERVICE, WechatMediaServicer(wechat).methods())
    logins = _console_login.ConsoleLogins.of_home(core.home, clock=config.clock)
    console = _console_login.ConsoleServicer(
        logins, core.home, gateway=gateway, note=_journal_note(core)
    )
    bridge.add(_console_login.SERVICE, console.methods())
    installs = _install_service.InstallServicer(core, plugins)
    bridge.add(_install_service.SERVICE, installs.methods())
    skills = None
    if agent.skills is not None:
        skills = _skill_service.SkillServicer(core, agent.skills)
        bridge.add(_skill_service.SERVICE, skills.methods())
    jobs = _job_service.JobServicer(scheduler, agent.workers, wechat)
    bridge.add(_job_service.SERVICE, jobs.methods())
    memory = _memory_service.MemoryServicer(core, agent)
    bridge.add(_memory_service.SERVICE, memory.methods())
    admin = ConsoleAdminServicer(
        core,
        logins,
        agent,
        meta,
        kernel=kernel_service,
        plugins=plugin_service,
        wechat=wechat_service,
        installs=installs,
        skills=skills,
        distillations=distillations,
    )
    bridge.add(CONSOLE_ADMIN_SERVICE, admin.methods())
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
    tools: ToolCalls,
    start: _Start,
    forker: sandbox.Forker,
) -> None:
    # Asked once for every sandboxed child of this core (each probe starts
    # interpreters), before anything launches.
    report = await trio.to_thread.run_sync(sandbox.detect)
    if report.cgroups is not None and report.cgroups.usable:
        swept = await trio.to_thread.run_sync(sandbox.sweep_stale_cgroups, report.cgroups)
        # Said at every start, none or some: whether the sweep ran is for
        # the log to tell (another core's start may have removed them first).
        log.info("naga-core: removed %d empty cgroups left by killed processes", swept)
    workers = AgentWorkers(config.home, config.agent, config.plugins.tuning)
    # The skill library: versions in the blob store, refs in kernel state;
    # its usage counts are read back from the ledger's skill.turn records
    # in the agent's start scan.
    # Viewed versions' files (for shell.run) are a cache of the blob store,
    # cleared at each start.
    skill_files = os.path.join(config.home.root, "work", "skills")
    await trio.to_thread.run_sync(clear_skill_files, skill_files)
    # Sealed (session and peer) versions' files: outside the home, in memory
    # (docs/adr/0060), cleared at start and at stop.
    sealed_files = sealed_files_root(config.home.root)
    await trio.to_thread.run_sync(clear_skill_files, sealed_files)
    skills = Library(
        SkillStore(core.kernel, blob_store(config.home)),
        files_root=skill_files,
        sealed_root=sealed_files,
    )
    agent = Agent(
        core,
        plugins,
        workers,
        config.agent,
        standing_of=authorizer.standing_of,
        tools=tools,
        ended=start.ended,
        skills=skills,
    )
    gateway = (
        GatewayProcess(
            home=config.home.root,
            socket=rundir.socket_path,
            authority=lambda: core.authority,
            minted=core.minted,
            options=config.gateway,
            forker=forker,
            port_setting=lambda: core.settings.get_int("gateway.port"),
            settings_changed=lambda: _next_append(core),
            report=report,
        )
        if config.gateway.enabled
        else None
    )
    proxies = EgressProxies(rundir.path, note=_journal_note(core))
    wechat = WechatChannel(
        core,
        config.home.root,
        agent,
        proxies,
        tuning=config.plugins.tuning,
        report=report,
        forker=forker,
        config=config.wechat,
    )
    runner = AgentRunner(agent, deliver=wechat.deliver_job)
    scheduler = Scheduler(core, runner, clock=config.clock, config=config.scheduler)
    core.on_rollback(scheduler.poke)  # a rollback may bring a job back or take it away
    agent.core_tools.add(JobCreateTool(scheduler.jobs, scheduler.committed, scheduler.upcoming))
    agent.core_tools.add(WechatSendFileTool(wechat, tools.workspace))
    distillations = Distillations(agent)
    bridge = _bridge(
        core,
        authorizer,
        config,
        plugins,
        agent,
        gateway=gateway,
        wechat=wechat,
        scheduler=scheduler,
        distillations=distillations,
    )
    notifier = config.notifier
    liveness = Liveness(core.ledger, stopping=core.stopping.is_set)
    async with trio.open_nursery() as nursery:
        if config.handle_signals:
            await nursery.start(_stop_on_signals, core)
        if notifier is not None and config.watchdog_ns is not None:
            await nursery.start(run_watchdog, notifier, config.watchdog_ns, liveness)
        # Before the plugins: a plugin asking for egress_proxy gets its socket.
        await nursery.start(proxies.serve)
        plugins.egress_socket = proxies.opener(
            lambda: _loopback_hosts(core), lambda m: web_open_hosts(core, plugins, m)
        )
        workers.egress_open = proxies.provider_opener(lambda: _loopback_hosts(core))
        workers.egress_close = proxies.close
        # The sessions are rebuilt and the turns the last stop left open are
        # ended or queued to run again before anything is served.
        agent.constitution = lambda: start.guard.text

        def tampered(why: str) -> None:
            if notifier is not None:
                with contextlib.suppress(NotifyFailed):
                    notifier.status(f"stopping: {why}")
            core.request_stop(why)

        await nursery.start(start.guard.serve, tampered)
        await nursery.start(agent.serve, start.cleaned, start.crashed, start.fold)
        # Archived sessions the last core did not distil (its stop cancelled
        # them, or it crashed): read off the fold while it is at the head and
        # nothing else reads it (the snapshot writer advances it off the loop).
        due = [session for session, _ in start.fold.distill_due.due()]
        # And its idle sessions' part: the idle timer follows its own copy.
        idle = start.fold.distill_idle.copy()
        # The fold is at the head and nothing advances it until the snapshot
        # writer follows it: the scheduler's fires are copied from it here.
        scheduler.begin(start.fires.copy(), start.fold.seq)
        start.snapshots.follow(start.fold, start.fires)
        await nursery.start(start.snapshots.serve, core.wait_past)
        async with bridge.serving(rundir.address, grace=config.grace_s):
            rundir.secure_socket()
            # Children start only once what their views bind exists: the
            # socket (a sandbox view of a missing path fails at the mount
            # layer, and counts toward the crash-loop limit). Plugins the
            # ledger says ran start again before readiness is announced;
            # they stop after the socket closes (this nursery is cancelled
            # last). The executors and the provider warm up from here; a turn
            # that arrives before one is ready waits for it.
            await nursery.start(
                liveness.watched, "the plugins", plugins.serve, core, forker, report
            )
            if config.default_tools:
                # Before readiness: from the first start, the plugin list
                # and the console say what a turn is offered.
                await enable_shipped_tools(core, plugins)
            await nursery.start(
                liveness.watched, "the executors", workers.serve, core, forker, report
            )
            # Once the provider can be started; an archive served before this
            # queued its session already. Cancelled with the nursery at the
            # stop: a call in flight records nothing, and is due again.
            await nursery.start(distillations.serve, due, idle)
            agent.recover()
            await nursery.start(wechat.serve)
            if agent.skills is not None:  # skills.curate_every_h; off by default
                await nursery.start(
                    curate_when_idle,
                    agent.skills,
                    core.settings,
                    core.write,
                    lambda: _settle_off_loop(core),
                    lambda: not agent.running,
                )
            # After the agent's recovery: a fire recorded before a crash
            # whose turn never started starts now, once.
            await nursery.start(scheduler.serve)
            log.info("naga-core serving on %s (pid %d)", rundir.address, core.pid)
            if gateway is not None:
                # It talks to the core: only once the socket answers. The core
                # serves whether or not its gateway came up.
                await nursery.start(gateway.serve, _journal_note(core))
                core.webchat_url = gateway.url
            task_status.started(core.info)
            # What the start freed (snapshot, fold, whole segments read) goes
            # back to the system instead of staying resident (issue 19).
            trim_heap()
            # What the start's open left out (ADR 0057), the segments due
            # only, paced and on a low-priority thread (ADR 0061).
            nursery.start_soon(
                functools.partial(
                    serve_rehash,
                    core.ledger,
                    core.home.ledger_dir,
                    days=lambda: core.settings.get_int("ledger.reverify_days"),
                    clock=config.clock,
                    note=_journal_note(core),
                    fail=core.fail,
                    options=config.rehash,
                )
            )
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


async def _settle_off_loop(core: Core) -> None:
    if await trio.to_thread.run_sync(core.settle):
        core.notify_appended()


async def _next_append(core: Core) -> None:
    """Return after the ledger's next durable record (never once stopping:
    the core is going away and nothing needs to follow it)."""
    if core.stopping.is_set():
        await trio.sleep_forever()
    await core.wait_past(core.ledger.size)


def _loopback_hosts(core: Core) -> list[str]:
    return core.settings.get_text("egress.loopback_hosts").split(",")


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


def _catch_up_projection(home: Home, ledger: Ledger) -> list[str]:
    """Bring the projection to the ledger's head; what it did, if it was
    behind by more than a clean stop leaves (a line for the start's note)."""
    # The projection is derived (never the source of truth): keeping it
    # current at start and stop is what `naga ledger verify` compares.
    projection = Projection.open(projection_path(home))
    try:
        caught = projection.catch_up(ledger)
    finally:
        projection.close()
    if caught.rebuilt:
        return [f"projection rebuilt ({caught.reason}): {caught.applied} records"]
    if caught.applied:
        return [f"projection caught up: {caught.applied} records behind the ledger"]
    return []


__all__ = ["CoreConfig", "CoreExit", "serve_core"]
