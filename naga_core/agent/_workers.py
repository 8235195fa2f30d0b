"""The executor pool, the model-provider worker and the embedded local
model server, each in its own sandbox.

Executors run ``naga_plugins/executor`` in the executor profile (no
network, the core's socket only); ``size`` of them are started with the
core and kept warm, and a turn takes an idle one. The provider worker runs
``naga_plugins.providers`` in a plugin profile whose only egress is the
provider's host and port from providers.json; its manifest is written by
the core (into ``$NAGA_HOME/work/provider``) because its egress is the
configuration's. With no providers.json, the local model server
(:mod:`naga_core._localmodel`, the ``model_server`` sandbox profile) is
started at the first turn that needs a model and the provider worker is
pointed at it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

import naga_plugins.executor
import sandbox
from naga.plugin import Manifest
from naga.v1 import agent_pb2 as apb
from naga_core._home import Home
from naga_core._localmodel import (
    LocalModelEndpoint,
    LocalModelError,
    LocalModelSettings,
    serve_local_model,
)
from naga_core._providers import NoProviderConfigured, Provider, Providers, ProvidersFileError
from naga_core.agent._config import AgentConfig
from naga_core.agent._errors import NoExecutor, NoModelProvider
from naga_core.errors import NagaError
from naga_core.plugins import Installed, OnProgress, Worker, WorkerState, journaled
from naga_core.plugins._host import Core
from naga_core.supervisor import WorkerTuning
from naga_plugins.providers import CONFIG_FILE, PROVIDER_PLUGIN, PROVIDER_TOOL

log = logging.getLogger("naga.agent")

EXECUTOR_DIR = os.path.dirname(os.path.abspath(naga_plugins.executor.__file__))

_PROVIDER_MANIFEST = """\
name = "{name}"
version = "1.0.0"
kind = "model_provider"
description = "Model calls to {provider} ({api}), written by naga-core from providers.json"
entry = "naga_plugins.providers:main"

[limits]
call_timeout_s = 30
max_concurrent_calls = 8

[[egress]]
host = "{host}"
port = {port}

[[tools]]
name = "{tool}"
risk = "R0"
description = "One chat completion; a base64 naga.v1.ChatRequest"

[tools.params.request]
type = "string"
max_length = 60000
"""


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


def _with_call_timeout(tuning: WorkerTuning, call_timeout_s: float) -> WorkerTuning:
    return dataclasses.replace(tuning, call_timeout_s=call_timeout_s)


def _host_port(base_url: str) -> tuple[str, int]:
    url = urllib.parse.urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.hostname or "", port


class AgentWorkers:
    """Owns the executor pool and the provider worker for one core."""

    def __init__(self, home: Home, config: AgentConfig, tuning: WorkerTuning) -> None:
        self._home = home
        self._config = config
        self._tuning = tuning
        self._core: Core | None = None
        self._report: sandbox.KernelReport | None = None
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
        self._provider_config: apb.ProviderConfig | None = None
        # No providers.json: the embedded local model, started at the first
        # turn that needs it (it holds ~700 MB; most cores never need it).
        self._use_local = False
        self._local_lock = trio.Lock()
        self._local_status: LocalModelStatus | None = None
        self._nursery: trio.Nursery | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def serve(self, core: Core, *, task_status: trio.TaskStatus[AgentWorkers]) -> None:
        """Run the workers until cancelled; started once they are launching."""
        self._core = core
        self._report = await trio.to_thread.run_sync(sandbox.detect)
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
                )
                self.executors.append(worker)
                self._idle.append(worker)
                nursery.start_soon(worker.run)
            provider = self._provider_installed()
            if provider is not None:
                self.provider = self._worker(provider, self._spawn_provider)
                nursery.start_soon(self.provider.run)
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                for worker in [*self.executors, *([self.provider] if self.provider else [])]:
                    worker.stop()

    def _worker(
        self, plugin: Installed, spawn: Callable[[Installed, int], sandbox.Sandboxed]
    ) -> Worker:
        return Worker(
            plugin, spawn=spawn, tuning=self._tuning, note=self._note, give_up=self._gave_up
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

    # --- launching (in a thread) ----------------------------------------------------------

    def _spawn_executor(self, plugin: Installed, fd: int) -> sandbox.Sandboxed:
        core = self._bound()
        work = os.path.join(self._home.root, "work", "executor")
        os.makedirs(work, mode=0o700, exist_ok=True)
        profile = sandbox.Profile.executor(
            core.socket,
            work_dir=work,
            read_only=[plugin.directory],
            allow_degraded=self._tuning.allow_degraded,
        )
        return sandbox.launch(
            profile,
            plugin.manifest.entry,
            [str(fd), plugin.manifest_path],
            pass_fds=[fd],
            env={},
            import_paths=[],
            kernel=self._report,
            ready_timeout=self._tuning.launch_timeout_s,
        )

    def _spawn_provider(self, plugin: Installed, fd: int) -> sandbox.Sandboxed:
        assert self._provider_config is not None
        m = plugin.manifest
        work = os.path.join(self._home.root, "work", "model-provider")
        os.makedirs(work, mode=0o700, exist_ok=True)
        profile = sandbox.Profile.plugin(
            work_dir=work,
            egress=[sandbox.Egress(e.host, e.port) for e in m.egress],
            read_only=[plugin.directory],
            allow_degraded=self._tuning.allow_degraded,
        )
        return sandbox.launch(
            profile,
            m.entry,
            [str(fd), plugin.manifest_path],
            pass_fds=[fd],
            env={},
            import_paths=[],
            kernel=self._report,
            ready_timeout=self._tuning.launch_timeout_s,
        )

    def _provider_installed(self) -> Installed | None:
        try:
            provider = Providers.load(self._home).default_provider
        except NoProviderConfigured as exc:
            self.provider_problem = f"{exc}"
            self._use_local = self._config.local_model
            return None
        except ProvidersFileError as exc:
            self.provider_problem = f"{exc}"
            log.warning("no model provider: %s", exc)
            return None
        return self._write_manifest(provider)

    def _write_manifest(self, provider: Provider) -> Installed:
        host, port = _host_port(provider.base_url)
        # Beside the work directory, not in it: the sandbox maps this one read-only.
        directory = os.path.join(self._home.root, "work", "provider-config")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, "plugin.toml")
        text = _PROVIDER_MANIFEST.format(
            name=PROVIDER_PLUGIN,
            provider=provider.name,
            api=provider.api,
            host=host,
            port=port,
            tool=PROVIDER_TOOL,
        )
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.provider_name = provider.name
        self._provider_config = apb.ProviderConfig(
            provider=provider.name,
            api=provider.api,
            base_url=provider.base_url,
            api_key=provider.api_key,
            model=provider.model,
            read_timeout_s=self._config.model_read_timeout_s,
            max_retries=self._config.model_max_retries,
        )
        config = os.path.join(directory, CONFIG_FILE)
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._provider_config.SerializeToString())
        return Installed(Manifest.load(path), directory, shipped=True)

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

    async def _start_local_model(self) -> None:
        """Start the embedded local model and a provider worker for it, once."""
        async with self._local_lock:
            if self.provider is not None or not self._use_local:
                return
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
                self.provider_problem = f"the embedded local model did not start: {exc}"
                self._use_local = False  # said once; a restart of the core tries again
                self._local_status = LocalModelStatus(
                    0, WorkerState.FAILED, attempt_ns, _first_line(exc)
                )
                log.exception("%s", self.provider_problem)
                return
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
            self.provider = self._worker(self._write_manifest(local), self._spawn_provider)
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
            await serve_local_model(settings, task_status=task_status)
        except LocalModelError as exc:
            if self.provider is None:  # before it was ready: the starter reports it
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
        self, request_b64: str, timeout_s: float, on_text: OnProgress | None = None
    ) -> str:
        """The provider's result JSON for one base64 ChatRequest; ``on_text``
        gets the reply's visible text as the model produces it."""
        if self.provider is None and self._use_local:
            await self._start_local_model()
        if self.provider is None:
            raise NoModelProvider(
                f"no model provider is configured: {self.provider_problem or 'none'}; "
                "write $NAGA_HOME/credentials/providers.json (docs/design/models.md)"
            )
        result, _pid = await self.provider.call(
            PROVIDER_TOOL, f'{{"request": "{request_b64}"}}', timeout_s, on_progress=on_text
        )
        return result

    def pids(self) -> list[tuple[str, Worker]]:
        rows = [(f"executor:{n}", w) for n, w in enumerate(self.executors)]
        if self.provider is not None:
            rows.append((f"provider:{self.provider_name}", self.provider))
        return rows


__all__ = ["EXECUTOR_DIR", "LOCAL_MODEL_ROLE", "AgentWorkers", "LocalModelStatus"]
