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
    port: int = WEBCHAT_PORT
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
    ) -> None:
        self._home = home
        self._socket = socket
        self._authority = authority
        self._minted = minted
        self._options = options
        self.pid = 0
        self.started_ns = 0
        self.restarts = 0
        self.detail = ""
        self.state = cpb.PROCESS_STATE_STOPPED
        self.url = ""
        #: The read end of the lifeline each gateway launch inherits.
        self._lifeline = -1

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
        while True:
            self.state = cpb.PROCESS_STATE_STARTING
            try:
                proc, out = await self._launch()
            except (NagaError, TokenError, sandbox.SandboxError, OSError) as exc:
                cause = f"the gateway did not start: {exc}"
            else:
                self.restarts += 0 if first else 1
                if first:
                    task_status.started()
                    first = False
                cause = await self._watch(proc, out)
            if first:
                task_status.started()
                first = False
            self.pid = 0
            self.detail = cause
            decision = history.failed(time.monotonic())
            log.warning("%s (%s)", cause, decision.describe(self._options.restart))
            await note(f"gateway: {cause}; {decision.describe(self._options.restart)}")
            if decision.give_up:
                self.state = cpb.PROCESS_STATE_FAILED
                return
            self.state = cpb.PROCESS_STATE_STARTING
            await trio.sleep(decision.delay_s)

    async def _launch(self) -> tuple[sandbox.Sandboxed, trio.lowlevel.FdStream]:
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
            self._options.port, self._socket, allow_degraded=self._options.allow_degraded
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
                        str(self._options.port),
                        "--lifeline-fd",
                        str(self._lifeline),
                    ],
                    work_dir=work,
                    pass_fds=[self._lifeline],
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

    async def _watch(self, proc: sandbox.Sandboxed, out: trio.lowlevel.FdStream) -> str:
        """Copy its output to run/gateway.log until it exits; why it ended."""
        log_path = os.path.join(self._home, "run", "gateway.log")
        try:
            async with await trio.open_file(log_path, "ab") as sink:
                while chunk := await out.receive_some(1 << 14):
                    await sink.write(chunk)
                    await sink.flush()
            await _exited(proc)
            return f"the gateway ended ({proc.wait(0)})"
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
