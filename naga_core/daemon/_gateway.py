"""naga-gateway as a supervised, sandboxed process of the core.

The core mints the gateway a capability token (role ``gateway``, fresh at
every launch), starts ``python -m naga_gateway``'s entry point under
``sandbox.Profile.gateway(core_socket)`` with the token and the socket
in the environment the sandbox passes, and takes its first stdout line
(``naga-gateway listening on HOST:PORT``) as readiness; later output goes
to ``run/gateway.log``. It also inherits the read end of a lifeline pipe
whose write end only the core holds, so a core killed outright does not
leave its gateway running (and holding the port the next core's gateway
needs). A gateway that exits is started again with the plugin workers'
backoff and crash-loop damping; every restart and its cause is a ledger
entry. The core serves whether or not the gateway runs: a busy port is a
failed gateway (in ``naga daemon status``), not a failed core.

The core binds the console's address itself, at every launch, and hands
the listening socket to the gateway (``--listen-fd``, ``pass_fds``), then
closes its own copy: the gateway runs in a private network namespace with
no right to make, bind or listen on a TCP socket (``Profile.gateway``), so
it can open no port of its own, not even the ephemeral one ``listen()``
without ``bind()`` would give it. A busy port fails here, in the bind,
with the same give-up path as before.

Its port is ``naga daemon start --gateway-port`` for that run when given,
else the ``gateway.port`` setting, read at every launch; while it runs, a
change of the setting makes the core stop it and start it on the new port
at once (a ledger entry says so; it is not counted as a failure). WebSocket
connections drop; the console must be opened at the new port.

After a crash loop the core gives up (FAILED in ``naga daemon status``, with
the cause and what to do). A change of ``gateway.port`` revives it: its
failures are forgotten and it is started on the new port (a ledger entry
says so), as when the owner frees the port by moving the console. A port
pinned by ``--gateway-port`` is the run's: it is not moved.

The owner may also restart it in place (``naga daemon restart-gateway``,
the ``RestartGateway`` RPC), as after freeing the port another program
held: a running gateway is stopped, a given-up one leaves FAILED, its
failures are forgotten and it is started on its current port; the caller
gets the outcome of that first attempt (a ledger entry says so when it
serves, the usual failure entry when not).
"""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

import sandbox
from naga.tokens import Risk, TokenError
from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga_core.authz import Token, TokenAuthority
from naga_core.errors import NagaError
from naga_core.supervisor import RestartPolicy, disk_use, pump_output

log = logging.getLogger("naga.core")

#: What the owner runs to restart the gateway in place (named in hints).
RESTART_COMMAND = "naga daemon restart-gateway"

GATEWAY_TARGET = "naga_gateway.__main__:main"
_READY_PREFIX = b"naga-gateway listening on "
#: Where the WebChat console is served unless configured otherwise (SPEC 1).
WEBCHAT_HOST = "127.0.0.1"
WEBCHAT_PORT = 18789


class _Ended(enum.Enum):
    """Why :meth:`GatewayProcess._watch` stopped watching a gateway."""

    EXITED = "exited"  # a failure: backoff and crash-loop count
    MOVED = "moved"  # gateway.port changed
    RESTART = "restart"  # the owner asked


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """Whether and where the core runs its gateway."""

    enabled: bool = False
    host: str = WEBCHAT_HOST
    #: None: the ``gateway.port`` setting, followed while the core runs.
    port: int | None = None
    ready_timeout_s: float = 15.0
    stop_grace_s: float = 5.0
    allow_degraded: bool = False
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    #: The sandbox target (``module:function``); tests swap in a stand-in
    #: that attacks from inside the real sandboxed gateway, then serves.
    target: str = GATEWAY_TARGET
    #: What its work directory may hold (bytes, files; unlinked files it
    #: keeps open count), checked every ``disk_check_s``: past it the gateway
    #: is stopped, a failure like a crash (its disk is the core's disk).
    disk_bytes: int = 256 << 20
    disk_files: int = 10_000
    disk_check_s: float = 2.0


class GatewayError(NagaError):
    """The gateway could not be started."""


@dataclass(eq=False, slots=True)
class _Restart:
    """One owner's restart request, answered by the attempt that takes it."""

    said: str
    done: trio.Event = field(default_factory=trio.Event)
    answer: cpb.RestartGatewayResponse | None = None


class GatewayProcess:
    """Owns the gateway process for one core; :meth:`serve` in its nursery."""

    def __init__(
        self,
        *,
        home: str,
        socket: str,
        authority: Callable[[], TokenAuthority | None],
        minted: Callable[[Token, str], Awaitable[None]],
        options: GatewayOptions,
        forker: sandbox.Forker,
        port_setting: Callable[[], int] = lambda: WEBCHAT_PORT,
        settings_changed: Callable[[], Awaitable[None]] | None = None,
        report: sandbox.KernelReport | None = None,
    ) -> None:
        """``forker`` (the core's) forks each gateway launch;
        ``port_setting`` reads ``gateway.port``; ``settings_changed``
        returns after the next durable change of the core's state (None:
        the port is not followed while the gateway runs)."""
        self._home = home
        self._socket = socket
        self._authority = authority
        self._minted = minted
        self._options = options
        self._forker = forker
        self._port_setting = port_setting
        self._settings_changed = settings_changed
        self.pid = 0
        self.started_ns = 0
        self.restarts = 0
        self.detail = ""
        self.state = cpb.PROCESS_STATE_STOPPED
        self.url = ""
        #: The read end of the lifeline each gateway launch inherits.
        self._lifeline = -1
        self._kernel: sandbox.KernelReport | None = report
        #: Restart requests no attempt has taken yet; ``_wake`` is set while any wait.
        self._pending: list[_Restart] = []
        self._wake = trio.Event()
        self._supervising = False

    async def restart(self, said: str) -> cpb.RestartGatewayResponse:
        """Restart the gateway on its current port with a fresh crash-loop
        history; return once that attempt served or failed. ``said`` (who
        asked and why) goes into the ledger entry."""
        if not self._supervising:
            raise GatewayError("the gateway is not supervised (the core is starting or stopping)")
        request = _Restart(said)
        self._pending.append(request)
        self._wake.set()
        await request.done.wait()
        assert request.answer is not None  # set before done
        return request.answer

    def _take_restarts(self) -> list[_Restart]:
        taken, self._pending = self._pending, []
        self._wake = trio.Event()
        return taken

    def _answer(self, taken: list[_Restart], port: int, cause: str) -> None:
        for request in taken:
            if request.done.is_set():  # answered when it served, before it ended
                continue
            request.answer = cpb.RestartGatewayResponse(
                serving=not cause,
                port=port,
                url="" if cause else self.url,
                cause=cause,
                gateway=self.row(),
            )
            request.done.set()

    def row(self) -> cpb.ProcessStatus:
        running = self.state == cpb.PROCESS_STATE_RUNNING
        return cpb.ProcessStatus(
            role="gateway",
            pid=self.pid,
            state=self.state,
            started_ns=self.started_ns,
            restarts=self.restarts,
            detail=self.url if running else self.detail,
        )

    async def serve(
        self,
        note: Callable[[str], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the gateway until cancelled; started after the first attempt
        (whether it came up or not: the core does not wait on its gateway)."""
        # What the kernel offers is asked once, not at every (re)launch.
        self._kernel = self._kernel or await trio.to_thread.run_sync(sandbox.detect)
        # The write end stays here, unwritten, for as long as the core lives.
        self._lifeline, kept = os.pipe()
        self._supervising = True
        try:
            await self._supervise(note, task_status)
        finally:
            self._supervising = False
            os.close(kept)
            os.close(self._lifeline)
            self._lifeline = -1

    async def _supervise(
        self, note: Callable[[str], Awaitable[object]], task_status: trio.TaskStatus[None]
    ) -> None:
        history = self._options.restart.history()
        first = True
        moved_from: int | None = None
        revived_from: int | None = None
        while True:
            taken = self._take_restarts()
            if taken:  # the owner's restart: a fresh start, failures forgotten
                history.reset()
            self.state = cpb.PROCESS_STATE_STARTING
            port = self.port
            said = ""
            if moved_from is not None:
                said = f"moved from port {moved_from} to {port} (gateway.port changed)"
            if revived_from is not None:
                said = (
                    f"revived on port {port} after it gave up on port {revived_from} "
                    "(gateway.port changed)"
                )
            if taken:
                said = f"restarted on port {port} ({'; '.join(r.said for r in taken)})"
            moved_from = revived_from = None
            try:
                proc, out, err = await self._launch(port)
            except (NagaError, TokenError, sandbox.SandboxError, OSError) as exc:
                cause = f"the gateway did not start on port {port}: {exc}"
            else:
                self.restarts += 0 if first else 1
                if first:
                    task_status.started()
                    first = False
                answer = functools.partial(self._answer, taken, port, "")
                ended, cause = await self._watch(
                    proc, out, port, note, said, err=err, serving=answer
                )
                if ended is _Ended.MOVED:  # not a failure: no backoff, no count
                    moved_from = port
                    continue
                if ended is _Ended.RESTART:
                    continue
            if first:
                task_status.started()
                first = False
            self.pid = 0
            self.detail = cause
            decision = history.failed(time.monotonic())
            outlook = decision.describe(self._options.restart)
            if decision.give_up:
                outlook = (
                    f"crash loop: {decision.failures} failures within "
                    f"{self._options.restart.loop_window_s:g} s; gave up: {self._revive_hint()}"
                )
                self.detail = f"{cause}; {outlook}"
            log.warning("%s (%s)", cause, outlook)
            await note(f"gateway: {cause}; {outlook}")
            self.state = (
                cpb.PROCESS_STATE_FAILED if decision.give_up else cpb.PROCESS_STATE_STARTING
            )
            self._answer(taken, port, f"{cause}; {outlook}")
            if decision.give_up:
                if await self._revived(port):
                    history.reset()
                    revived_from = port
                continue
            with trio.move_on_after(decision.delay_s):
                await self._wake.wait()  # a restart asked for cuts the backoff short

    def _follows_setting(self) -> bool:
        return self._settings_changed is not None and self._options.port is None

    def _revive_hint(self) -> str:
        again = f"`{RESTART_COMMAND}` tries port {self.port} again (once it is free)"
        if self._follows_setting():
            return f"{again}; `naga config set gateway.port PORT` starts it again on PORT"
        if self._options.port is not None:
            return f"--gateway-port {self._options.port} pins this run's port; {again}"
        return again

    async def _revived(self, port: int) -> bool:
        """Wait, given up, for the owner: True once ``gateway.port`` no
        longer says ``port``, False at a restart request."""
        async with trio.open_nursery() as nursery:
            moved = False

            async def port_moved() -> None:
                nonlocal moved
                await self._port_moved(port)
                moved = True
                nursery.cancel_scope.cancel()

            async def restart_asked() -> None:
                await self._wake.wait()
                nursery.cancel_scope.cancel()

            if self._follows_setting():
                nursery.start_soon(port_moved)
            nursery.start_soon(restart_asked)
        return moved

    async def _port_moved(self, port: int) -> None:
        """Return once ``gateway.port`` no longer says ``port`` (never when
        the port is pinned or not followed)."""
        changed = self._settings_changed
        if changed is None or self._options.port is not None:
            await trio.sleep_forever()
            return
        while self.port == port:
            await changed()

    @property
    def port(self) -> int:
        """Where the gateway is (or will be next) started."""
        pinned = self._options.port
        return pinned if pinned is not None else self._port_setting()

    async def _launch(
        self, port: int
    ) -> tuple[sandbox.Sandboxed, trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
        authority = self._authority()
        if authority is None:
            raise GatewayError("the core has no token authority")
        minted = authority.mint(
            # R4: the console's "undo to here" is a rollback (see _policy).
            "gateway",
            trust=TrustLevel.OWNER,
            risk=Risk.R4,
        )
        await self._minted(minted, "core: gateway")  # in the ledger before it leaves
        token = minted.to_bytes()
        profile = sandbox.Profile.gateway(self._socket, allow_degraded=self._options.allow_degraded)
        work = os.path.join(self._home, "work", "gateway")
        os.makedirs(work, mode=0o700, exist_ok=True)
        # Bound here, not by the gateway: it may make no TCP socket. A busy
        # port is an OSError, a failed attempt like any other.
        listener = console_listener(self._options.host, port)
        cgroup = _gateway_cgroup(self._kernel)
        r, w = os.pipe()
        # Its stderr is a pipe the core copies into its log under its name:
        # a descriptor of the log itself would let it seek, truncate or forge it.
        err_r, err_w = os.pipe()
        try:
            proc = await trio.to_thread.run_sync(
                lambda: sandbox.launch(
                    profile,
                    self._options.target,
                    [
                        "--host",
                        self._options.host,
                        "--port",
                        str(port),
                        "--listen-fd",
                        str(listener.fileno()),
                        "--lifeline-fd",
                        str(self._lifeline),
                    ],
                    forker=self._forker,
                    work_dir=work,
                    pass_fds=[self._lifeline, listener.fileno()],
                    kernel=self._kernel,
                    env={sandbox.TOKEN_ENV: base64.b64encode(token).decode("ascii")},
                    stdout=w,
                    stderr=err_w,
                    cgroup=cgroup,
                )
            )
        except BaseException:
            os.close(r)
            os.close(err_r)
            if cgroup is not None:  # no handle owns it: the launch failed
                with contextlib.suppress(OSError):
                    cgroup.remove()
            raise
        finally:
            os.close(w)
            os.close(err_w)
            # The gateway holds the only copy now: when it ends, the port is free.
            listener.close()
        out = trio.lowlevel.FdStream(r)
        err = trio.lowlevel.FdStream(err_r)
        try:
            with trio.fail_after(self._options.ready_timeout_s):
                line = await _first_line(out)
        except trio.TooSlowError:
            await self._given_up(proc, out, err)
            raise GatewayError(
                f"no readiness line within {self._options.ready_timeout_s:g} s"
            ) from None
        if not line.startswith(_READY_PREFIX):
            await self._given_up(proc, out, err)
            raise GatewayError(f"it did not come up (it said {line[:200]!r})")
        self.pid = proc.pid
        self.started_ns = time.time_ns()
        self.state = cpb.PROCESS_STATE_RUNNING
        where = line[len(_READY_PREFIX) :].decode("ascii", "replace").strip()
        self.url = f"http://{where}/"
        log.info("naga-gateway serving the WebChat console on %s (pid %d)", self.url, proc.pid)
        return proc, out, err

    async def _given_up(
        self,
        proc: sandbox.Sandboxed,
        out: trio.lowlevel.FdStream,
        err: trio.lowlevel.FdStream,
    ) -> None:
        """Stop a gateway that never came up; what it said on stderr (why)
        reaches the core's log, read briefly now that it is gone."""
        await self._stop(proc)
        with trio.move_on_after(self._options.stop_grace_s):
            await pump_output(err, "gateway", log)
        await err.aclose()
        await out.aclose()

    async def _watch(
        self,
        proc: sandbox.Sandboxed,
        out: trio.lowlevel.FdStream,
        port: int,
        note: Callable[[str], Awaitable[object]],
        said: str,
        *,
        err: trio.lowlevel.FdStream,
        serving: Callable[[], None],
    ) -> tuple[_Ended, str]:
        """Copy its output to run/gateway.log (its stderr to the core's log,
        each line under its name) until it exits (EXITED, why it
        ended), the port it should be on changes (MOVED) or the owner asks
        for a restart (RESTART); journal ``said`` (why it was started again,
        now that it serves), then call ``serving``."""
        log_path = os.path.join(self._home, "run", "gateway.log")
        ended = _Ended.EXITED
        over_quota = ""
        try:
            async with trio.open_nursery() as nursery:

                async def port_changed() -> None:
                    nonlocal ended
                    await self._port_moved(port)
                    ended = _Ended.MOVED
                    nursery.cancel_scope.cancel()

                async def restart_asked() -> None:
                    nonlocal ended
                    await self._wake.wait()
                    ended = _Ended.RESTART
                    nursery.cancel_scope.cancel()

                async def announce() -> None:
                    if said:
                        await note(f"gateway: {said}")
                    serving()
                    nursery.start_soon(restart_asked)

                async def disk_watched() -> None:
                    nonlocal over_quota
                    over_quota = await self._over_quota(proc)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(port_changed)
                nursery.start_soon(announce)
                nursery.start_soon(disk_watched)
                drained = trio.Event()

                async def stderr_to_log() -> None:
                    await pump_output(err, "gateway", log)
                    drained.set()

                nursery.start_soon(stderr_to_log)
                async with await trio.open_file(log_path, "ab") as sink:
                    while chunk := await out.receive_some(1 << 14):
                        await sink.write(chunk)
                        await sink.flush()
                await _exited(proc)
                # Its last words (a traceback) are read, briefly, before the rest stops.
                with trio.move_on_after(self._options.stop_grace_s):
                    await drained.wait()
                nursery.cancel_scope.cancel()
            if ended is not _Ended.EXITED:
                return ended, ""
            if over_quota:
                return ended, over_quota
            return ended, f"the gateway ended ({proc.wait(0)})"
        finally:
            with trio.CancelScope(shield=True):
                await self._stop(proc)
                await out.aclose()
                await err.aclose()

    async def _over_quota(self, proc: sandbox.Sandboxed) -> str:
        """Return, with the cause, once its work directory is past its quota."""
        work = os.path.join(self._home, "work", "gateway")
        o = self._options
        while True:
            use = await trio.to_thread.run_sync(
                lambda: disk_use(work, proc.pid, max_entries=o.disk_files)
            )
            if use.bytes > o.disk_bytes or use.files > o.disk_files:
                return (
                    f"disk quota exceeded: its work directory {work} holds "
                    f"{use.bytes / (1 << 20):.0f} MiB in {use.files} files, the quota is "
                    f"{o.disk_bytes / (1 << 20):.0f} MiB in {o.disk_files} files; "
                    "free space there, then restart it"
                )
            await trio.sleep(o.disk_check_s)

    async def _stop(self, proc: sandbox.Sandboxed) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with trio.move_on_after(self._options.stop_grace_s):
                await _exited(proc)
            if proc.poll() is None:
                proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(1.0)
        proc.close()
        self.state = cpb.PROCESS_STATE_STOPPED


#: The gateway's own cgroup, where the kernel offers one (docs/adr/0031):
#: at most one CPU, and a memory ceiling of its address-space limit.
GATEWAY_CPUS = 1.0
GATEWAY_MEMORY_BYTES = 1 << 30


def _gateway_cgroup(report: sandbox.KernelReport | None) -> sandbox.Cgroup | None:
    support = None if report is None else report.cgroups
    if support is None or not support.usable:
        return None
    limits = sandbox.CgroupLimits(cpus=GATEWAY_CPUS, memory_bytes=GATEWAY_MEMORY_BYTES)
    try:
        return sandbox.Cgroup.create(support, "gateway", limits)
    except OSError as exc:
        log.warning("the gateway runs without a cgroup of its own: %s", exc)
        return None


def console_listener(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host``:``port`` (0: a free port), for the
    gateway to serve; inheritable only through ``pass_fds``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICSERV)
    family = infos[0][0] if infos else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


async def _exited(proc: sandbox.Sandboxed) -> None:
    if proc.pidfd is not None:
        await trio.lowlevel.wait_readable(proc.pidfd)
    else:  # no pidfd (old kernel): a thread waits, abandoned if cancelled
        await trio.to_thread.run_sync(proc.wait, None, abandon_on_cancel=True)


async def _first_line(stream: trio.lowlevel.FdStream) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > 4096:
            break
    return buf.split(b"\n", 1)[0]


__all__ = [
    "GATEWAY_TARGET",
    "RESTART_COMMAND",
    "console_listener",
    "GatewayError",
    "GatewayOptions",
    "GatewayProcess",
]
