"""naga-gateway as a supervised, sandboxed process of the core.

The core mints the gateway a capability token (role ``gateway``, fresh at
every launch), starts ``python -m naga_gateway``'s entry point under
``sandbox.Profile.gateway(port, core_socket)`` with the token and the socket
in the environment the sandbox passes, and takes its first stdout line
(``naga-gateway listening on HOST:PORT``) as readiness; later output goes
to ``run/gateway.log``. It also inherits the read end of a lifeline pipe
whose write end only the core holds, so a core killed outright does not
leave its gateway running (and holding the port the next core's gateway
needs). A gateway that exits is started again with the plugin workers'
backoff and crash-loop damping; every restart and its cause is a ledger
entry. The core serves whether or not the gateway runs: a busy port is a
failed gateway (in ``naga daemon status``), not a failed core.

Its port is ``naga daemon start --gateway-port`` for that run when given,
else the ``gateway.port`` setting, read at every launch; while it runs, a
change of the setting makes the core stop it and start it on the new port
at once (a ledger entry says so; it is not counted as a failure). WebSocket
connections drop; the console must be opened at the new port.

After a crash loop the core gives up (FAILED in ``naga daemon status``, with
the cause and what to do). A change of ``gateway.port`` revives it: its
failures are forgotten and it is started on the new port (a ledger entry
says so), as when the owner frees the port by moving the console. A port
pinned by ``--gateway-port`` is the run's: only a restart of the core tries
again.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
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
from naga_core.supervisor import RestartPolicy

log = logging.getLogger("naga.core")

GATEWAY_TARGET = "naga_gateway.__main__:main"
_READY_PREFIX = b"naga-gateway listening on "
#: Where the WebChat console is served unless configured otherwise (SPEC 1).
WEBCHAT_HOST = "127.0.0.1"
WEBCHAT_PORT = 18789


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


class GatewayError(NagaError):
    """The gateway could not be started."""


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
        port_setting: Callable[[], int] = lambda: WEBCHAT_PORT,
        settings_changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``port_setting`` reads ``gateway.port``; ``settings_changed``
        returns after the next durable change of the core's state (None:
        the port is not followed while the gateway runs)."""
        self._home = home
        self._socket = socket
        self._authority = authority
        self._minted = minted
        self._options = options
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
        self._kernel: sandbox.KernelReport | None = None

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
        self._kernel = await trio.to_thread.run_sync(sandbox.detect)
        # The write end stays here, unwritten, for as long as the core lives.
        self._lifeline, kept = os.pipe()
        try:
            await self._supervise(note, task_status)
        finally:
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
            self.state = cpb.PROCESS_STATE_STARTING
            port = self.port
            try:
                proc, out = await self._launch(port)
            except (NagaError, TokenError, sandbox.SandboxError, OSError) as exc:
                cause = f"the gateway did not start on port {port}: {exc}"
            else:
                self.restarts += 0 if first else 1
                if first:
                    task_status.started()
                    first = False
                said = "" if moved_from is None else f"moved from port {moved_from} to {port}"
                if revived_from is not None:
                    said = f"revived on port {port} after it gave up on port {revived_from}"
                moved_from = revived_from = None
                moved, cause = await self._watch(proc, out, port, note, said)
                if moved:  # not a failure: no backoff, no crash-loop count
                    moved_from = port
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
            if decision.give_up:
                self.state = cpb.PROCESS_STATE_FAILED
                if not await self._port_moved(port):
                    return
                history.reset()
                revived_from = port
                continue
            self.state = cpb.PROCESS_STATE_STARTING
            await trio.sleep(decision.delay_s)

    def _follows_setting(self) -> bool:
        return self._settings_changed is not None and self._options.port is None

    def _revive_hint(self) -> str:
        if self._follows_setting():
            return "`naga config set gateway.port PORT` starts it again on PORT"
        if self._options.port is not None:
            return f"--gateway-port {self._options.port} pins this run's port; restart the core"
        return "restart the core to try again"

    async def _port_moved(self, port: int) -> bool:
        """Return once ``gateway.port`` no longer says ``port`` (False at
        once when the port is pinned or not followed)."""
        changed = self._settings_changed
        if changed is None or self._options.port is not None:
            return False
        while self.port == port:
            await changed()
        return True

    @property
    def port(self) -> int:
        """Where the gateway is (or will be next) started."""
        pinned = self._options.port
        return pinned if pinned is not None else self._port_setting()

    async def _launch(self, port: int) -> tuple[sandbox.Sandboxed, trio.lowlevel.FdStream]:
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
        profile = sandbox.Profile.gateway(
            port, self._socket, allow_degraded=self._options.allow_degraded
        )
        work = os.path.join(self._home, "work", "gateway")
        os.makedirs(work, mode=0o700, exist_ok=True)
        r, w = os.pipe()
        try:
            proc = await trio.to_thread.run_sync(
                lambda: sandbox.launch(
                    profile,
                    GATEWAY_TARGET,
                    [
                        "--host",
                        self._options.host,
                        "--port",
                        str(port),
                        "--lifeline-fd",
                        str(self._lifeline),
                    ],
                    work_dir=work,
                    pass_fds=[self._lifeline],
                    kernel=self._kernel,
                    env={sandbox.TOKEN_ENV: base64.b64encode(token).decode("ascii")},
                    stdout=w,
                )
            )
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        out = trio.lowlevel.FdStream(r)
        try:
            with trio.fail_after(self._options.ready_timeout_s):
                line = await _first_line(out)
        except trio.TooSlowError:
            await self._stop(proc)
            await out.aclose()
            raise GatewayError(
                f"no readiness line within {self._options.ready_timeout_s:g} s"
            ) from None
        if not line.startswith(_READY_PREFIX):
            await self._stop(proc)
            await out.aclose()
            raise GatewayError(f"it did not come up (it said {line[:200]!r})")
        self.pid = proc.pid
        self.started_ns = time.time_ns()
        self.state = cpb.PROCESS_STATE_RUNNING
        where = line[len(_READY_PREFIX) :].decode("ascii", "replace").strip()
        self.url = f"http://{where}/"
        log.info("naga-gateway serving the WebChat console on %s (pid %d)", self.url, proc.pid)
        return proc, out

    async def _watch(
        self,
        proc: sandbox.Sandboxed,
        out: trio.lowlevel.FdStream,
        port: int,
        note: Callable[[str], Awaitable[object]],
        said: str,
    ) -> tuple[bool, str]:
        """Copy its output to run/gateway.log until it exits (False, why it
        ended) or the port it should be on changes (True, ""); journal
        ``said`` (a move, once the gateway serves on the new port)."""
        log_path = os.path.join(self._home, "run", "gateway.log")
        moved = False
        try:
            async with trio.open_nursery() as nursery:

                async def port_changed() -> None:
                    nonlocal moved
                    changed = self._settings_changed
                    if changed is None or self._options.port is not None:
                        return
                    while self.port == port:
                        await changed()
                    moved = True
                    nursery.cancel_scope.cancel()

                nursery.start_soon(port_changed)
                if said:
                    nursery.start_soon(note, f"gateway: {said} (gateway.port changed)")
                async with await trio.open_file(log_path, "ab") as sink:
                    while chunk := await out.receive_some(1 << 14):
                        await sink.write(chunk)
                        await sink.flush()
                await _exited(proc)
                nursery.cancel_scope.cancel()
            if moved:
                return True, ""
            return False, f"the gateway ended ({proc.wait(0)})"
        finally:
            with trio.CancelScope(shield=True):
                await self._stop(proc)
                await out.aclose()

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


__all__ = ["GATEWAY_TARGET", "GatewayError", "GatewayOptions", "GatewayProcess"]
