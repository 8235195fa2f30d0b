"""The plugin host: installed plugins as kernel components, their workers,
and the operations the PluginService offers (docs/design/plugins.md).

Each installed plugin name is a component ``plugin.<name>`` of a
:class:`~naga_core.kernel.ComponentRuntime`: enabling and disabling are
registrations, starting and stopping its worker are performs, so all of it
is in the ledger and a rollback undoes it (the runtime reconciles after a
rollback: rolling back an enable stops the worker). The component's start
only hands a :class:`Worker` to the host's nursery; launching is the
worker's business, in a thread, and a caller that wants to know how it went
waits for readiness after the effect. Which installed version runs is the
registration ``plugin.version/<name>`` (absent: the newest), so replacing a
version is an effect too.

Everything here runs on the core's trio thread.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import trio

import sandbox
from naga.plugin import Manifest, ToolRisk, check_arguments
from naga.plugin.errors import InvalidArguments
from naga_core._home import Home
from naga_core._modules import package_dir
from naga_core.authz import RevocationList, Token, TokenAuthority, stage_minted
from naga_core.errors import NagaError
from naga_core.kernel import Actions, ComponentRuntime, ComponentSpec, Kernel, Settings
from naga_core.ledger import Ledger
from naga_core.plugins._catalog import Catalog, Installed, Root
from naga_core.plugins._data import data_dir_name, migrate, work_root
from naga_core.plugins._errors import (
    PluginNotFound,
    PluginUnavailable,
    ToolArgumentsInvalid,
)
from naga_core.plugins._install import INSTALL_FAMILY
from naga_core.plugins._tokens import PluginTokens
from naga_core.plugins._worker import Worker, WorkerState
from naga_core.supervisor import WorkerTuning, launch_in, worker_cgroup
from naga_core.workspace import default_root

log = logging.getLogger("naga.plugins")

T = TypeVar("T")

VERSION_FAMILY = "plugin.version"
COMPONENT_PREFIX = "plugin."
#: Plugins that need the network require this fact: present when the kernel
#: can hold them to their declared ports (Landlock ABI >= 4), or when the
#: configuration accepts degraded sandboxes.
NET_FACT = "cap:net"
#: Imported in a home plugin's worker before the sandbox's filter (its own
#: code comes after it, and can then load no shared library): the SDK and
#: the standard library's extension modules a tool commonly needs.
PLUGIN_PRELOAD = (
    "naga_plugins",
    "array",
    "binascii",
    "bz2",
    "csv",
    "ctypes",
    "datetime",
    "decimal",
    "hashlib",
    "json",
    "lzma",
    "math",
    "pickle",
    "random",
    "select",
    "socket",
    "sqlite3",
    "ssl",
    "struct",
    "unicodedata",
    "uuid",
    "zlib",
    "zoneinfo",
)
#: The plugins shipped with Naga.
SHIPPED_ROOT = package_dir("naga_plugins.examples")
#: The tools shipped with Naga (fs, shell: docs/design/tools.md).
TOOLS_ROOT = package_dir("naga_plugins.tools")


@dataclass(frozen=True, slots=True)
class PluginsConfig:
    """Where plugins are found and how their workers are watched."""

    #: Extra roots after the shipped plugins and $NAGA_HOME/plugins.
    roots: tuple[str, ...] = ()
    shipped: bool = True
    tuning: WorkerTuning = field(default_factory=WorkerTuning)


@dataclass(frozen=True, slots=True)
class PluginView:
    """One plugin as the service reports it."""

    name: str
    installed: Installed | None
    versions: tuple[str, ...]
    enabled: bool
    state: str
    worker: Worker | None
    problems: tuple[str, ...]
    failure: str


class Core(Protocol):
    """What the host needs of the daemon's core (naga_core.daemon's Core)."""

    @property
    def kernel(self) -> Kernel: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def socket(self) -> str: ...

    def write(self, fn: Callable[[], T]) -> T: ...

    def settle(self) -> bool: ...

    def notify_appended(self) -> None: ...

    def on_rollback(self, hook: Callable[[], None]) -> None: ...

    @property
    def authority(self) -> TokenAuthority | None: ...


def _direct_egress(installed: Installed) -> bool:
    """Egress of its own (Landlock ports), not through the core's proxy."""
    m = installed.manifest
    return bool(m.egress) and "egress_proxy" not in m.capabilities


def component(name: str) -> str:
    return COMPONENT_PREFIX + name


async def journaled(core: Core, fn: Callable[[], T]) -> T:
    """A kernel write outside any RPC: staged on the loop, then made durable
    on a thread (no RPC's settle would do it), then subscribers woken."""
    result = core.write(fn)
    if await trio.to_thread.run_sync(core.settle):
        core.notify_appended()
    return result


class _PluginComponent:
    """What the component runtime starts and stops for one plugin."""

    def __init__(self, host: PluginHost, name: str) -> None:
        self._host = host
        self._name = name

    def start(self) -> None:
        self._host.start_worker(self._name)

    def stop(self) -> None:
        self._host.stop_worker(self._name)


class PluginHost:
    """Build with :meth:`discover`; :meth:`install` before the kernel opens;
    run :meth:`serve` in the core's nursery."""

    def __init__(self, home: Home, config: PluginsConfig, catalog: Catalog) -> None:
        self._home = home
        self._config = config
        self._catalog = catalog
        self._tuning = config.tuning
        self._runtime = ComponentRuntime.of(
            *(
                (
                    ComponentSpec.of(
                        component(name),
                        requires=[NET_FACT] if any(map(_direct_egress, versions)) else [],
                    ),
                    _PluginComponent(self, name),
                )
                for name, versions in catalog.plugins.items()
            )
        )
        self._core: Core | None = None
        self._nursery: trio.Nursery | None = None
        self._tokens: PluginTokens | None = None
        self._kernel_report: sandbox.KernelReport | None = None
        self._forker: sandbox.Forker | None = None
        self._workers: dict[str, Worker] = {}
        self._retiring: set[Worker] = set()
        self._failures: dict[str, str] = {}
        self._revoked_hooks: list[Callable[[], None]] = []
        #: Set by the daemon: the socket of the core's egress proxy for a
        #: plugin whose manifest asks for ``egress_proxy`` (started on the
        #: loop, its destinations checked there). None: such plugins fail.
        self.egress_socket: Callable[[Manifest], Awaitable[str]] | None = None

    @classmethod
    def discover(cls, home: Home, config: PluginsConfig) -> PluginHost:
        return cls(home, config, Catalog.scan(cls.roots_of(home, config)))

    @staticmethod
    def roots_of(home: Home, config: PluginsConfig) -> list[Root]:
        roots = (
            [Root(SHIPPED_ROOT, shipped=True), Root(TOOLS_ROOT, shipped=True)]
            if config.shipped
            else []
        )
        roots.append(Root(os.path.join(home.root, "plugins"), shipped=False, installs=True))
        # Roots the owner's configuration names may reach local services.
        roots += [Root(os.path.abspath(r), shipped=False, local_egress=True) for r in config.roots]
        return roots

    def install(self, actions: Actions) -> None:
        """Register the runtime's world actions (before the kernel opens)."""
        self._runtime.install(actions)

    async def serve(
        self,
        core: Core,
        forker: sandbox.Forker,
        report: sandbox.KernelReport | None = None,
        *,
        task_status: trio.TaskStatus[PluginHost],
    ) -> None:
        """Own every worker until cancelled; ready once the plugins the
        ledger says ran are starting again. ``forker`` (the core's) forks
        every plugin; ``report`` is what the kernel offers the sandbox, if
        the caller asked already (else asked here)."""
        self._core = core
        self._forker = forker
        self.rescan()  # the kernel is open: only installed home plugins run
        # A home from before data was keyed by install: each installed name
        # keeps its old work/plugins/<name> (once), under its own registration.
        installed = {
            p.manifest.name for v in self._catalog.plugins.values() for p in v if p.by_install
        }
        await journaled(core, lambda: migrate(core.kernel, self._home.root, installed))
        self._kernel_report = report or await trio.to_thread.run_sync(sandbox.detect)
        self._tokens = (
            PluginTokens(core.authority)
            if core.authority is not None
            else PluginTokens.for_home(self._home, core.kernel)
        )
        net = self._kernel_report.landlock_abi >= 4 or self._tuning.allow_degraded
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await journaled(
                core, lambda: self._runtime.bind(core.kernel, facts=[NET_FACT] if net else [])
            )
            core.on_rollback(self.after_rollback)
            task_status.started(self)
            await trio.sleep_forever()

    # --- the component's world -------------------------------------------------------

    def start_worker(self, name: str) -> None:
        if self._nursery is None or self._tokens is None:
            raise PluginUnavailable("the plugin host is not serving")
        installed = self.selected(name)
        if installed is None:
            raise PluginUnavailable(f"plugin {name} has no valid version installed")
        issued: list[bytes] = []  # the ids of the tokens its current life holds
        worker = Worker(
            installed,
            spawn=lambda plugin, fd, output: self._spawn(plugin, fd, output, issued),
            tuning=self._tuning,
            note=self._note,
            give_up=self._gave_up,
            renew=lambda: self._renewed(installed, issued),
            life_ended=lambda: self._revoke(name, issued),
            work_dir=self._work_dir(installed),
        )
        old = self._workers.get(name)
        if old is not None and not old.stopped.is_set():
            self._retire(old)
        self._workers[name] = worker
        self._failures.pop(name, None)
        self._nursery.start_soon(self._run_worker, worker)

    async def _run_worker(self, worker: Worker) -> None:
        try:
            await worker.run()
        except Exception:  # a supervisor bug ends this plugin's worker, never the core
            log.exception("plugin %s: its supervisor failed", worker.name)
            self._failures[worker.name] = "its supervisor failed; see the core log"

    def stop_worker(self, name: str) -> None:
        worker = self._workers.get(name)
        if worker is not None and not worker.stopped.is_set():
            self._retire(worker)

    def _retire(self, worker: Worker) -> None:
        self._retiring.add(worker)
        worker.stop()
        assert self._nursery is not None
        self._nursery.start_soon(self._forget, worker)

    async def _forget(self, worker: Worker) -> None:
        await worker.stopped.wait()
        self._retiring.discard(worker)

    def _spawn(
        self, plugin: Installed, fd: int, output: int, issued: list[bytes]
    ) -> sandbox.Sandboxed:
        """Launch one worker (in a thread: only reads what it is given)."""
        assert self._tokens is not None
        assert self._core is not None
        m = plugin.manifest
        work = self._work_dir(plugin)
        os.makedirs(work, mode=0o700, exist_ok=True)
        read_only = [plugin.directory]
        if "workspace" in m.capabilities:
            read_only.append(_workspace_view(self._home, self._core.kernel, work))
        proxy: str | None = None
        if "egress_proxy" in m.capabilities:
            if self.egress_socket is None:
                raise PluginUnavailable(f"plugin {m.name} needs the egress proxy; none runs")
            proxy = trio.from_thread.run(self.egress_socket, m)
        profile = sandbox.Profile.plugin(
            work_dir=work,
            egress=[sandbox.Egress(e.host, e.port) for e in m.egress],
            core_socket=self._core.socket if "core" in m.capabilities else None,
            read_only=read_only,
            allow_degraded=self._tuning.allow_degraded,
            egress_socket=proxy,
        )
        if m.max_risk == ToolRisk.R0:
            # The owner approved reads only: its work directory is read-only
            # too, with a scratch TMPDIR (Python wants one) wiped each start.
            scratch = os.path.join(self._home.root, "work", "plugin-tmp", m.name)
            shutil.rmtree(scratch, ignore_errors=True)
            os.makedirs(scratch, mode=0o700)
            profile = profile.with_read_only_work(scratch)
        minted = self._tokens.mint(m, self._tuning.token_ttl_s)
        issued.append(minted.id)
        token = self._minted(minted, f"core: plugin {m.name}")
        resident = min(
            m.limits.memory_bytes or self._tuning.memory_bytes, self._tuning.memory_bytes
        )
        cgroup = worker_cgroup(
            self._kernel_report, self._tuning, f"plugin-{m.name}", resident, nice=profile.nice
        )
        return launch_in(
            cgroup,
            lambda group: self._launch(plugin, profile, fd, output, token=token, cgroup=group),
        )

    def _launch(
        self,
        plugin: Installed,
        profile: sandbox.Profile,
        fd: int,
        output: int,
        *,
        token: bytes,
        cgroup: sandbox.Cgroup | None,
    ) -> sandbox.Sandboxed:
        m = plugin.manifest
        if self._forker is None:
            raise PluginUnavailable("the plugin host is not serving")
        return sandbox.launch(
            profile,
            m.entry,
            [str(fd), plugin.manifest_path],
            forker=self._forker,
            pass_fds=[fd],
            env={sandbox.TOKEN_ENV: base64.b64encode(token).decode("ascii")},
            # A home plugin's folder becomes importable only under every
            # layer; what its code may need that loads a shared library is
            # imported before the filter, from the installation.
            import_paths=[] if plugin.shipped else [plugin.directory],
            preload=PLUGIN_PRELOAD,
            stdout=output,
            stderr=output,
            kernel=self._kernel_report,
            ready_timeout=self._tuning.launch_timeout_s,
            cgroup=cgroup,
        )

    def _work_dir(self, plugin: Installed) -> str:
        """Its data: by install for a home plugin, by name for the others."""
        kernel = self._bound().kernel
        return os.path.join(work_root(self._home.root), data_dir_name(kernel, plugin))

    def _minted(self, token: Token, by: str) -> bytes:
        """From the launch thread: the mint staged on the loop (the single
        writer) and made durable here, before the token leaves the core."""
        core = self._bound()
        trio.from_thread.run_sync(core.write, lambda: stage_minted(core.ledger, token, by=by))
        if core.settle():
            trio.from_thread.run_sync(core.notify_appended)
        return token.to_bytes()

    async def _renewed(self, plugin: Installed, issued: list[bytes]) -> bytes:
        """A fresh token for a running worker, in the ledger before it leaves."""
        assert self._tokens is not None
        core = self._bound()
        token = self._tokens.mint(plugin.manifest, self._tuning.token_ttl_s)
        issued.append(token.id)
        by = f"core: plugin {plugin.manifest.name} (renewal)"
        await journaled(core, lambda: stage_minted(core.ledger, token, by=by))
        return token.to_bytes()

    def on_revoked(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` after revoking tokens (the core wakes open streams)."""
        self._revoked_hooks.append(hook)

    async def _revoke(self, name: str, issued: list[bytes]) -> None:
        """A worker's process is gone: every token it held is revoked, so a
        copy taken out of it is refused from now on."""
        ids, issued[:] = list(issued), []
        if not ids:
            return
        core = self._bound()
        revocations = RevocationList(core.kernel)
        reason = f"plugin {name}: its worker ended"
        try:
            await journaled(core, lambda: [revocations.revoke(i, reason) for i in ids])
        except NagaError:  # the core is stopping: its tokens die with its key's use
            log.exception("cannot revoke the tokens of plugin %s", name)
            return
        for hook in self._revoked_hooks:
            hook()

    async def _note(self, text: str) -> None:
        core = self._bound()
        log.warning("%s", text)
        try:
            await journaled(core, lambda: core.kernel.perform([], None, description=text))
        except NagaError:  # the core is stopping; the log keeps the line
            log.exception("cannot journal %r", text)

    async def _gave_up(self, worker: Worker, reason: str) -> None:
        log.error("plugin %s failed: %s", worker.name, reason)
        self._failures[worker.name] = reason
        name = component(worker.name)
        if self._workers.get(worker.name) is not worker or name not in self._runtime.running:
            return
        try:
            await journaled(self._bound(), lambda: self._runtime.crashed(name, reason))
        except NagaError:
            log.exception("cannot journal the failure of plugin %s", worker.name)

    # --- reading ------------------------------------------------------------------------

    def _bound(self) -> Core:
        if self._core is None:
            raise PluginUnavailable("the plugin host is not serving")
        return self._core

    def rescan(self) -> None:
        """Pick up versions installed (or manifests fixed) since the last scan.
        A new plugin *name* needs a core restart: components are fixed when
        the kernel opens."""
        installs = None if self._core is None else self._core.kernel.state.family(INSTALL_FAMILY)
        self._catalog = Catalog.scan(self.roots_of(self._home, self._config), installs)

    def names(self) -> list[str]:
        """Every plugin name found (with a valid version or a problem)."""
        return self._catalog.names()

    def selected(self, name: str, kernel: Kernel | None = None) -> Installed | None:
        """The version that runs when ``name`` is enabled (``kernel``: read
        its choice there, before the host serves)."""
        kernel = kernel if kernel is not None else self._bound().kernel
        chosen = kernel.state.get((VERSION_FAMILY, name))
        if isinstance(chosen, str):
            found = self._catalog.get(name, chosen)
            if found is not None:
                return found
        return self._catalog.get(name)

    def known(self, name: str) -> str:
        if component(name) not in self._runtime.planner.specs:
            if name in self._catalog.problems:
                raise PluginUnavailable(
                    f"plugin {name} has no valid manifest: "
                    + "; ".join(self._catalog.problems[name])
                )
            if self._catalog.get(name) is not None:
                raise PluginUnavailable(
                    f"plugin {name} was installed after the core started; restart the core "
                    "(naga daemon stop; naga daemon start) to load it"
                )
            known = ", ".join(n for n in self._catalog.names()) or "none"
            raise PluginNotFound(f"no plugin named {name!r} is installed (installed: {known})")
        return component(name)

    def view(self, name: str) -> PluginView:
        comp = component(name)
        problems = self._catalog.problems.get(name, ())
        if comp not in self._runtime.planner.specs:
            installed = self._catalog.get(name)
            return PluginView(name, installed, (), False, "broken", None, problems, "")
        status = self._runtime.status(comp)
        worker = self._workers.get(name)
        state = str(status.state)
        failure = status.reason or self._failures.get(name, "")
        if state == "active" and worker is not None:
            state = {
                WorkerState.RUNNING: "running",
                WorkerState.FAILED: "failed",
                WorkerState.STOPPED: "stopped",
            }.get(worker.state, "starting")
        elif state == "blocked":
            state = "pending"
        versions = tuple(v.manifest.version for v in self._catalog.versions(name))
        enabled = comp in self._runtime.planner.enabled
        return PluginView(
            name, self.selected(name), versions, enabled, state, worker, problems, failure
        )

    def views(self) -> list[PluginView]:
        return [self.view(name) for name in self._catalog.names()]

    def workers(self) -> list[Worker]:
        """The workers of enabled plugins (failed ones too, without a
        process), then those still stopping, by name."""
        enabled = self._runtime.planner.enabled
        live = [w for n, w in sorted(self._workers.items()) if component(n) in enabled]
        return live + sorted(self._retiring, key=lambda w: w.name)

    # --- operations (the service) ------------------------------------------------------

    async def wait_ready(self, name: str, timeout_s: float) -> None:
        """Until ``name``'s worker runs, fails or stops, at most ``timeout_s``."""
        worker = self._workers.get(name)
        if worker is None or timeout_s <= 0:
            return
        with trio.move_on_after(timeout_s):
            await worker.wait_settled()

    def enable(self, name: str) -> bool:
        """Enable ``name`` (or retry it after it failed); False if it already was."""
        comp = self.known(name)
        self.rescan()
        if self._catalog.get(name) is None:  # e.g. copied in, never installed
            raise PluginUnavailable(
                f"plugin {name} cannot run: " + "; ".join(self._catalog.problems.get(name, ()))
            )
        core = self._bound()
        status = self._runtime.status(comp)
        if str(status.state) == "failed":
            core.write(lambda: self._runtime.retry(comp))
            return True
        if comp in self._runtime.planner.enabled:
            return False
        core.write(lambda: self._runtime.enable(comp))
        return True

    def disable(self, name: str) -> bool:
        comp = self.known(name)
        if comp not in self._runtime.planner.enabled:
            return False
        self._bound().write(lambda: self._runtime.disable(comp))
        return True

    async def wait_stopped(self, name: str) -> None:
        worker = self._workers.get(name)
        if worker is not None:
            with trio.move_on_after(4 * self._tuning.shutdown_grace_s):
                await worker.stopped.wait()

    def replace(self, name: str, version: str) -> str:
        """Run ``version`` of ``name`` from now on; the version selected before."""
        comp = self.known(name)
        self.rescan()
        target = self._catalog.get(name, version)
        if target is None:
            have = ", ".join(v.manifest.version for v in self._catalog.versions(name))
            raise PluginNotFound(f"plugin {name} has no version {version} installed (have: {have})")
        current = self.selected(name)
        previous = current.manifest.version if current is not None else ""
        if previous == version:
            return previous
        core = self._bound()
        enabled = comp in self._runtime.planner.enabled

        def switch() -> None:
            if enabled:
                self._runtime.disable(comp)
            core.kernel.register(
                VERSION_FAMILY,
                name,
                version,
                description=f"select plugin {name} {version} (was {previous})",
            )
            if enabled:
                self._runtime.enable(comp)

        core.write(switch)
        return previous

    async def invoke(
        self, plugin: str, tool: str, arguments_json: str, timeout_s: float | None
    ) -> tuple[str, int]:
        comp = self.known(plugin)
        status = self._runtime.status(comp)
        state = str(status.state)
        if state == "disabled":
            raise PluginUnavailable(f"plugin {plugin} is disabled (naga plugin enable {plugin})")
        if state == "failed":
            raise PluginUnavailable(
                f"plugin {plugin} failed: {status.reason}; "
                f"enable it again to retry (naga plugin enable {plugin})"
            )
        worker = self._workers.get(plugin)
        if state != "active" or worker is None:
            raise PluginUnavailable(f"plugin {plugin} is not running: {status}")
        spec = worker.plugin.manifest.tool(tool)
        if spec is None:
            tools = ", ".join(t.name for t in worker.plugin.manifest.tools) or "none"
            raise PluginNotFound(f"plugin {plugin} has no tool {tool!r} (its tools: {tools})")
        try:
            check_arguments(spec, arguments_json)
        except InvalidArguments as exc:
            raise ToolArgumentsInvalid(str(exc)) from None
        return await worker.call(tool, arguments_json, timeout_s or worker.call_timeout_s)

    def after_rollback(self) -> None:
        """A rollback changed the kernel state: converge the components, and
        run the version the state now selects where another one runs."""
        self.rescan()  # an install or a removal may have been undone
        self._runtime.resync()
        core = self._bound()
        for name, worker in list(self._workers.items()):
            if worker.stopped.is_set() or worker.stopping:
                continue
            chosen = self.selected(name)
            if chosen is None or chosen.manifest == worker.plugin.manifest:
                continue
            core.kernel.perform(
                [],
                None,
                description=(
                    f"supervisor: plugin {name} switches from {worker.plugin.manifest.version} "
                    f"to {chosen.manifest.version}, the version selected after a rollback"
                ),
            )
            self.start_worker(name)


def _workspace_view(home: Home, kernel: Kernel, work: str) -> str:
    """The workspace, for a plugin that asks for it: shown read-only, named
    by the ``workspace`` link in its work directory (its path at launch)."""
    root = Settings(kernel).get_text("workspace.path") or default_root(home)
    os.makedirs(root, mode=0o700, exist_ok=True)
    link = os.path.join(work, "workspace")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(root, link)
    return root


__all__ = ["PluginHost", "PluginView", "PluginsConfig", "component", "journaled"]
