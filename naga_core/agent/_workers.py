"""The executor pool, the model-provider worker and the embedded local
model server, each in its own sandbox.

Executors run ``naga_plugins/executor`` in the executor profile (no
network, the core's socket only); ``size`` of them are started with the
core and kept warm, and a turn takes an idle one. The provider worker runs
``naga_plugins.providers`` in a plugin profile whose only egress is the
provider's host and port from providers.json; its manifest is written by
the core (into ``$NAGA_HOME/work/provider``) because its egress is the
configuration's. Which provider runs is the ``model.provider`` setting
(:mod:`naga_core.agent._provider_choice`) read against providers.json
(:mod:`naga_core.agent._provider_reload`, re-read when it changed), both
at every model call: when they name another provider, or the same one with
another config, than the running worker's, a worker for the new one is
started and the old one stopped once its calls in flight have ended. The
embedded local model server (:mod:`naga_core._localmodel`, the
``model_server`` sandbox profile) is started at the first call that needs
it, and stopped when the setting moves away from it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

import sandbox
from naga.constants import PROVIDER_TOOL
from naga.plugin import Manifest
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga_core._home import Home
from naga_core._localmodel import (
    LOCAL_CONTEXT_WINDOW,
    LocalModelEndpoint,
    LocalModelError,
    LocalModelSettings,
    serve_local_model,
)
from naga_core._modules import package_dir
from naga_core._providers import DEFAULT_CONTEXT_WINDOW, Provider
from naga_core.agent._config import AgentConfig
from naga_core.agent._errors import NoExecutor, NoModelProvider
from naga_core.agent._provider_choice import SETTING, Choice, choose
from naga_core.agent._provider_manifest import clear_configs, remove_config, write_provider
from naga_core.agent._provider_reload import ProviderFileWatch
from naga_core.errors import NagaError
from naga_core.kernel import Settings
from naga_core.plugins import HostCore as Core
from naga_core.plugins import Installed, OnProgress, TypedCall, Worker, WorkerState, journaled
from naga_core.supervisor import WorkerTuning, launch_in, worker_cgroup

log = logging.getLogger("naga.agent")

EXECUTOR_DIR = package_dir("naga_plugins.executor")

#: The local model server's role in ``naga daemon status``.
LOCAL_MODEL_ROLE = "local-model"


@dataclass(frozen=True, slots=True)
class LocalModelStatus:
    """The local model server as ``naga daemon status`` shows it."""

    #: 0 when it is not running.
    pid: int
    #: RUNNING, FAILED (it did not start, or it crashed) or STOPPED (with the core).
    state: WorkerState
    started_ns: int
    #: While it runs: the model and where it answers; otherwise why it is not.
    detail: str


def _first_line(exc: BaseException) -> str:
    # The rest is the server's log tail, which is in run/local-model.log.
    return f"{exc}".split("\n", 1)[0]


def _egress_key(plugin: Installed) -> str:
    """One proxy per provider worker (a replaced one may still drain calls)."""
    return "provider-" + re.sub(r"[^A-Za-z0-9_@-]", "-", os.path.basename(plugin.directory))


def _with_call_timeout(tuning: WorkerTuning, call_timeout_s: float) -> WorkerTuning:
    return dataclasses.replace(tuning, call_timeout_s=call_timeout_s)


class AgentWorkers:
    """Owns the executor pool and the provider worker for one core."""

    def __init__(self, home: Home, config: AgentConfig, tuning: WorkerTuning) -> None:
        self._home = home
        self._config = config
        self._tuning = tuning
        self._core: Core | None = None
        self._report: sandbox.KernelReport | None = None
        self._forker: sandbox.Forker | None = None
        self._executor = Installed(
            Manifest.load(os.path.join(EXECUTOR_DIR, "plugin.toml")), EXECUTOR_DIR, shipped=True
        )
        self.executors: list[Worker] = []
        self._idle: list[Worker] = []
        self._idle_changed = trio.Event()
        # Turns waiting for an executor are served first come, first served
        # (trio.Lock is FIFO): woken all at once by an Event, the waiters
        # would race in trio's shuffled run order, and with 20 sessions on
        # 2 executors some turns waited seconds while others went ahead.
        self._take_turn = trio.Lock()
        self.provider: Worker | None = None
        self.provider_name = ""
        self.provider_problem = ""
        self._settings: Settings | None = None
        self._watch = ProviderFileWatch(home)
        #: Numbers each provider worker's config directory.
        self._generation = 0
        #: What ``provider`` serves; None while no worker runs.
        self._current: Choice | None = None
        # One switch at a time; calls in flight per worker, so that a
        # replaced worker is stopped only once its last call has ended.
        self._switch = trio.Lock()
        self._inflight: dict[int, int] = {}
        # The embedded local model, started at the first call that needs it
        # (it holds ~700 MB; most cores never need it).
        self._local_worker: Worker | None = None
        self._local_scope: trio.CancelScope | None = None
        self._local_failed = ""
        self._local_status: LocalModelStatus | None = None
        self._nursery: trio.Nursery | None = None
        #: Set by the daemon: the core's egress proxy for a provider worker
        #: (its key, its manifest) -> the socket; and closing it. None: the
        #: worker gets its Landlock port instead.
        self.egress_open: Callable[[str, Manifest], Awaitable[str]] | None = None
        self.egress_close: Callable[[str], None] | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def serve(
        self,
        core: Core,
        forker: sandbox.Forker,
        report: sandbox.KernelReport | None = None,
        *,
        task_status: trio.TaskStatus[AgentWorkers],
    ) -> None:
        """Run the workers until cancelled; started once they are launching.
        ``forker`` (the core's) forks every worker and the local model
        server; ``report``: what the kernel offers the sandbox (asked here if None)."""
        self._core = core
        self._forker = forker
        self._report = report or await trio.to_thread.run_sync(sandbox.detect)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # A turn is one call to its executor: it may run as long as a turn.
            turns = _with_call_timeout(self._tuning, self._config.turn_timeout_s)
            for _ in range(self._config.executors):
                worker = Worker(
                    self._executor,
                    spawn=self._spawn_executor,
                    tuning=turns,
                    note=self._note,
                    give_up=self._gave_up,
                    # Its disk quota: an executor that fills it is ended (the
                    # executors share one work directory; the quota bounds it).
                    work_dir=os.path.join(self._home.root, "work", "executor"),
                )
                self.executors.append(worker)
                self._idle.append(worker)
                nursery.start_soon(worker.run)
            self._settings = Settings(core.kernel)
            await trio.to_thread.run_sync(clear_configs, self._home.root)
            try:
                choice = self._choice()
            except NoModelProvider as exc:
                self.provider_problem = f"{exc}"
            else:
                if choice.provider is not None:  # warm now; the embedded one waits
                    self._start_configured(choice, choice.provider)
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                for worker in [*self.executors, *([self.provider] if self.provider else [])]:
                    worker.stop()

    def _worker(
        self, plugin: Installed, spawn: Callable[[Installed, int, int], sandbox.Sandboxed]
    ) -> Worker:
        return Worker(
            plugin,
            spawn=spawn,
            tuning=self._tuning,
            note=self._note,
            give_up=self._gave_up,
            work_dir=os.path.join(self._home.root, "work", "model-provider"),
        )

    async def _note(self, text: str) -> None:
        core = self._bound()
        log.warning("%s", text)
        try:
            await journaled(core, lambda: core.kernel.perform([], None, description=text))
        except NagaError:
            log.exception("cannot journal %r", text)

    async def _gave_up(self, worker: Worker, reason: str) -> None:
        log.error("agent worker %s failed: %s", worker.name, reason)

    def _bound(self) -> Core:
        assert self._core is not None, "serve() binds the core first"
        return self._core

    def _forked_by(self) -> sandbox.Forker:
        assert self._forker is not None, "serve() is given the core's Forker first"
        return self._forker

    # --- launching (in a thread) ----------------------------------------------------------

    def _spawn_executor(self, plugin: Installed, fd: int, output: int) -> sandbox.Sandboxed:
        core = self._bound()
        work = os.path.join(self._home.root, "work", "executor")
        os.makedirs(work, mode=0o700, exist_ok=True)
        profile = sandbox.Profile.executor(
            core.socket,
            work_dir=work,
            read_only=[plugin.directory],
            allow_degraded=self._tuning.allow_degraded,
        )
        return self._launch(profile, plugin, fd, output, label="executor")

    def _spawn_provider(self, plugin: Installed, fd: int, output: int) -> sandbox.Sandboxed:
        m = plugin.manifest
        work = os.path.join(self._home.root, "work", "model-provider")
        os.makedirs(work, mode=0o700, exist_ok=True)
        proxy: str | None = None
        if self.egress_open is not None:
            proxy = trio.from_thread.run(self.egress_open, _egress_key(plugin), m)
        profile = sandbox.Profile.plugin(
            work_dir=work,
            egress=[sandbox.Egress(e.host, e.port) for e in m.egress],
            read_only=[plugin.directory],
            allow_degraded=self._tuning.allow_degraded,
            egress_socket=proxy,
        )
        return self._launch(profile, plugin, fd, output, label="model-provider")

    def _launch(
        self,
        profile: sandbox.Profile,
        plugin: Installed,
        fd: int,
        output: int,
        *,
        label: str,
    ) -> sandbox.Sandboxed:
        """Launch one worker in a cgroup of its own where there are cgroups."""
        t = self._tuning
        forker = self._forked_by()
        cgroup = worker_cgroup(self._report, t, label, t.memory_bytes, nice=profile.nice)
        return launch_in(
            cgroup,
            lambda group: sandbox.launch(
                profile,
                plugin.manifest.entry,
                [str(fd), plugin.manifest_path],
                forker=forker,
                pass_fds=[fd],
                env={},
                import_paths=[],
                stdout=output,  # a pipe the core copies into its log, under its name
                stderr=output,
                kernel=self._report,
                ready_timeout=t.launch_timeout_s,
                cgroup=group,
            ),
        )

    def _write_manifest(self, provider: Provider, *, embedded: bool = False) -> Installed:
        self._generation += 1
        installed, _config = write_provider(
            self._home.root, provider, self._config, self._generation, embedded=embedded
        )
        self.provider_name = provider.name
        return installed

    # --- use ----------------------------------------------------------------------------

    async def take_executor(self, timeout_s: float) -> Worker:
        """An idle executor (waiting up to ``timeout_s`` for one), in the
        order the turns asked."""
        with trio.move_on_after(timeout_s):
            async with self._take_turn:
                while True:
                    for worker in self._idle:
                        if worker.state is not WorkerState.FAILED:
                            self._idle.remove(worker)
                            return worker
                    changed = self._idle_changed
                    await changed.wait()
        raise NoExecutor(
            f"no agent executor was free within {timeout_s:g} s "
            f"({len(self.executors)} in the pool, all busy or failed)"
        )

    def give_back(self, worker: Worker) -> None:
        self._idle.append(worker)
        self._idle_changed.set()
        self._idle_changed = trio.Event()

    # --- choosing and switching the provider ----------------------------------------------

    def _choice(self) -> Choice:
        assert self._settings is not None, "serve() reads the settings first"
        setting = self._settings.get_text(SETTING)
        return choose(setting, self._watch.current(), local_allowed=self._config.local_model)

    async def _provider_for_call(self) -> Worker:
        """The worker of the provider the setting names now, started (and
        the previous one retired) if it is not the one running."""
        async with self._switch:
            try:
                choice = self._choice()
            except NoModelProvider as exc:
                self.provider_problem = f"{exc}"
                if self._watch.current().problem and self.provider is not None:
                    # A refused file is no licence to go on with the old one's key.
                    old, self.provider, self._current = self.provider, None, None
                    log.info("model provider %s stopped: file refused", self.provider_name)
                    self._retire(old)
                raise
            if self.provider is not None and self._current == choice:
                return self.provider
            old, self.provider, self._current = self.provider, None, None
            if old is not None:
                why = SETTING if choice.name != self.provider_name else "providers.json changed"
                log.info("model provider: %s -> %s (%s)", self.provider_name, choice.name, why)
                self._retire(old)
            if choice.provider is None:
                await self._start_local_model(choice)
            else:
                self._start_configured(choice, choice.provider)
            assert self.provider is not None
            return self.provider

    def context_window(self) -> int:
        """The context window (tokens) of the provider the next model call
        goes to: its entry's ``context_window``, or the embedded model's
        ``n_ctx``; the default when no provider can be chosen (the call
        will fail and say why)."""
        try:
            choice = self._choice()
        except NoModelProvider:
            return DEFAULT_CONTEXT_WINDOW
        if choice.provider is None:
            return LOCAL_CONTEXT_WINDOW
        return choice.provider.context_window

    def vision(self) -> bool:
        """The provider the next model call goes to sees images (its entry's
        ``vision``); the embedded model does not."""
        try:
            choice = self._choice()
        except NoModelProvider:
            return False
        return choice.provider is not None and choice.provider.vision

    def _start_configured(self, choice: Choice, provider: Provider) -> None:
        assert self._nursery is not None
        self.provider = self._worker(self._write_manifest(provider), self._spawn_provider)
        self._current = choice
        self.provider_problem = ""
        self._nursery.start_soon(self.provider.run)

    def _retire(self, worker: Worker) -> None:
        if self._inflight.get(id(worker), 0) == 0:
            self._stop(worker)
        # else: the last call to end stops it (complete())

    def _stop(self, worker: Worker) -> None:
        worker.stop()
        if worker is not self.provider:
            # Its process read its config at start; the key should not linger.
            remove_config(self._home.root, worker.plugin)
            if self.egress_close is not None:
                self.egress_close(_egress_key(worker.plugin))
        if worker is self._local_worker:
            self._local_worker = None
            status = self._local_status
            if status is not None and status.state is WorkerState.RUNNING:
                self._local_status = LocalModelStatus(
                    0, WorkerState.STOPPED, status.started_ns, f"stopped: {SETTING} changed"
                )
            if self._local_scope is not None:
                self._local_scope.cancel()
                self._local_scope = None

    async def _start_local_model(self, choice: Choice) -> None:
        """Start the embedded local model and a provider worker for it."""
        if self._local_failed:  # said once; a restart of the core tries again
            raise NoModelProvider(self._local_failed)
        assert self._nursery is not None
        attempt_ns = time.time_ns()
        try:
            settings = LocalModelSettings.from_cache(
                log_path=Path(self._home.root, "run", "local-model.log"),
                work_dir=Path(self._home.root, "work", "local-model"),
                allow_degraded=self._tuning.allow_degraded,
                kernel=self._report,
            )
            endpoint: LocalModelEndpoint = await self._nursery.start(
                self._serve_local_model, settings
            )
        except LocalModelError as exc:
            self._local_failed = f"the embedded local model did not start: {exc}"
            self.provider_problem = self._local_failed
            self._local_status = LocalModelStatus(
                0, WorkerState.FAILED, attempt_ns, _first_line(exc)
            )
            log.exception("%s", self._local_failed)
            raise NoModelProvider(self._local_failed) from None
        detail = f"{endpoint.model} on {endpoint.base_url}"
        if endpoint.degraded:
            detail += f" (degraded: {'; '.join(endpoint.degraded)})"
        self._local_status = LocalModelStatus(
            endpoint.pid, WorkerState.RUNNING, endpoint.started_ns, detail
        )
        log.info(
            "embedded local model %s serving on %s (pid %d)",
            endpoint.model,
            endpoint.base_url,
            endpoint.pid,
        )
        local = Provider(
            name="local",
            api="openai",
            base_url=endpoint.base_url,
            api_key="",
            model=endpoint.model,
        )
        installed = self._write_manifest(local, embedded=True)
        self.provider = self._local_worker = self._worker(installed, self._spawn_provider)
        self._current = choice
        self.provider_problem = ""
        self._nursery.start_soon(self.provider.run)

    async def _serve_local_model(
        self,
        settings: LocalModelSettings,
        *,
        task_status: trio.TaskStatus[LocalModelEndpoint] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # A server that dies after it was ready must not take the core down:
        # the provider's calls fail (a MODEL error per turn) and it is said.
        try:
            # Cancelled when model.provider moves away from the embedded model.
            with trio.CancelScope() as self._local_scope:
                await serve_local_model(settings, self._forked_by(), task_status=task_status)
        except LocalModelError as exc:
            if self._local_worker is None:  # before it was ready: the starter reports it
                raise
            self.provider_problem = f"the embedded local model stopped: {exc}"
            self._local_ended(WorkerState.FAILED, _first_line(exc))
            log.exception("%s", self.provider_problem)
        finally:
            self._local_ended(WorkerState.STOPPED, "stopped with the core")

    def _local_ended(self, state: WorkerState, detail: str) -> None:
        status = self._local_status
        if status is not None and status.state is WorkerState.RUNNING:
            self._local_status = LocalModelStatus(0, state, status.started_ns, detail)

    def local_model_status(self) -> LocalModelStatus | None:
        """The local model server once a turn needed it (None before): running,
        failed to start or crashed, or stopped with the core."""
        return self._local_status

    async def complete(
        self, request: mpb.ChatRequest, timeout_s: float, on_text: OnProgress | None = None
    ) -> apb.ProviderReply:
        """The provider's reply to ``request``, from the provider
        ``model.provider`` names now (NoModelProvider if none), within
        ``timeout_s``; ``on_text`` gets the reply's visible text as the
        model produces it."""
        worker = await self._provider_for_call()
        key = id(worker)
        self._inflight[key] = self._inflight.get(key, 0) + 1
        try:
            result = await worker.call_typed(
                PROVIDER_TOOL,
                TypedCall("chat_request", request, "provider_reply"),
                timeout_s,
                on_progress=on_text,
            )
        finally:
            left = self._inflight.pop(key) - 1
            if left:
                self._inflight[key] = left
            elif worker is not self.provider:  # replaced while this call ran
                self._stop(worker)
        return result.provider_reply

    def pids(self) -> list[tuple[str, Worker]]:
        rows = [(f"executor:{n}", w) for n, w in enumerate(self.executors)]
        if self.provider is not None:
            rows.append((f"provider:{self.provider_name}", self.provider))
        return rows


__all__ = ["EXECUTOR_DIR", "LOCAL_MODEL_ROLE", "AgentWorkers", "LocalModelStatus"]
