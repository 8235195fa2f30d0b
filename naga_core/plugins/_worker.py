"""A supervised plugin worker: start, watch, rebuild with backoff, give up.

:meth:`Worker.run` is one task in the plugin host's nursery for as long as
the plugin is enabled. Each life launches a sandboxed process with its end
of a fresh socket pair and runs a :class:`~naga_core.plugins._session.Session`
until the process ends for some cause; the worker journals the cause and
the restart (an irreversible ledger entry: a restart cannot be undone), waits
out the backoff, and starts again. A crash loop (the restart policy's K
failures within T) ends the task with the plugin FAILED: the host journals
the deactivation and nothing restarts it until the owner enables it again.
A sandbox the kernel cannot give fails at once; retrying would not help.

Calls wait (within their deadline) for a worker that is starting or
backing off, so the call after a crash reaches the rebuilt worker.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

import trio

import sandbox
from naga.v1 import plugin_pb2 as pb
from naga_core.plugins._catalog import Installed
from naga_core.plugins._errors import (
    PluginNotFound,
    PluginUnavailable,
    ToolArgumentsInvalid,
    ToolFailed,
    WorkerUnavailable,
)
from naga_core.plugins._session import OnProgress, Pending, Session, TypedCall
from naga_core.supervisor import WorkerTuning, pump_output, sandboxed

log = logging.getLogger("naga.plugins")

#: Launch the plugin with the first descriptor as its end of the socket pair
#: and the second (a pipe the core reads) as its stdout and stderr (blocking).
Spawn = Callable[[Installed, int, int], sandbox.Sandboxed]
#: Journal one line (an irreversible ledger entry).
Note = Callable[[str], Awaitable[None]]
#: The worker gave up; the host records the plugin as failed, with the reason.
GiveUp = Callable[["Worker", str], Awaitable[None]]
#: A fresh capability token for the running worker (journaled before it is returned).
Renew = Callable[[], Awaitable[bytes]]
#: One life ended (its process is gone): revoke what it held.
LifeEnded = Callable[[], Awaitable[None]]


class WorkerState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    FAILED = "failed"
    STOPPED = "stopped"


class Worker:
    def __init__(
        self,
        plugin: Installed,
        *,
        spawn: Spawn,
        tuning: WorkerTuning,
        note: Note,
        give_up: GiveUp,
        renew: Renew | None = None,
        life_ended: LifeEnded | None = None,
        work_dir: str | None = None,
    ) -> None:
        self.plugin = plugin
        self.work_dir = work_dir
        self._renew = renew
        self._life_ended = life_ended
        self.name = plugin.manifest.name
        self._spawn = spawn
        self._tuning = tuning
        self._note = note
        self._give_up = give_up
        limits = plugin.manifest.limits
        self.memory_bytes = min(limits.memory_bytes or tuning.memory_bytes, tuning.memory_bytes)
        self.call_timeout_s = min(
            limits.call_timeout_s or tuning.call_timeout_s, tuning.call_timeout_s
        )
        self.state = WorkerState.STARTING
        self.pid = 0
        self.started_ns = 0
        self.restarts = 0
        self.last_failure = ""
        self.stopping = False
        self.stopped = trio.Event()
        self._session: Session | None = None
        self._changed = trio.Event()
        self._scope = trio.CancelScope()
        self._history = tuning.restart.history()

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Supervise until stopped or failed."""
        try:
            with self._scope:
                await self._supervise()
        finally:
            self._session = None
            self.pid = 0
            if self.state is not WorkerState.FAILED:
                self._set(WorkerState.STOPPED)
            self.stopped.set()

    def stop(self) -> None:
        """Stop for good: a running worker is asked to finish (briefly), one
        starting or backing off is dropped. Returns at once; ``stopped`` is
        set when the process is gone."""
        if self.stopping:
            return
        self.stopping = True
        self._set(self.state)  # wake callers waiting for readiness
        session = self._session
        if session is not None and session.ready:
            session.request_shutdown()
            # Whatever the worker does, it is gone soon after its grace.
            self._scope.deadline = trio.current_time() + 2 * self._tuning.shutdown_grace_s
        else:
            self._scope.cancel()

    async def _supervise(self) -> None:
        while not self.stopping:
            try:
                cause = await self._life()
            except (sandbox.LayerUnavailable, sandbox.ProfileInvalid) as exc:
                await self._fail(f"cannot be sandboxed: {exc}")
                return
            except Exception as exc:
                log.exception("plugin %s: cannot start its worker", self.name)
                await self._fail(f"cannot start its worker: {type(exc).__name__}: {exc}")
                return
            if self.stopping:
                return
            self.last_failure = cause
            decision = self._history.failed(trio.current_time())
            policy = self._tuning.restart
            if decision.give_up:
                await self._fail(f"{decision.describe(policy)}; last: {cause}")
                return
            self.restarts += 1
            self._set(WorkerState.BACKOFF)
            await self._note(
                f"supervisor: restart plugin {self.name} "
                f"({decision.describe(policy)}, restart {self.restarts}) after {cause}; "
                f"next start in {decision.delay_s:.2f} s"
            )
            await trio.sleep(decision.delay_s)

    async def _fail(self, reason: str) -> None:
        self.last_failure = reason
        # Journaled first, so that whoever sees FAILED (a call that waited
        # for the verdict on its worker's death, readiness waiters) finds
        # the plugin's component failed too.
        try:
            await self._give_up(self, reason)
        finally:
            self._set(WorkerState.FAILED)

    async def _life(self) -> str:
        """Launch one process and converse with it until it ends; why it ended."""
        self._set(WorkerState.STARTING)
        output_r, output_w = os.pipe()
        output = _WriteEnd(output_w)
        async with trio.open_nursery() as nursery:
            # Its output reaches the core's log through the core, under its
            # name; it never holds the log's descriptor.
            reading = trio.CancelScope()
            nursery.start_soon(self._pump, output_r, reading)
            try:
                return await self._converse(output)
            finally:
                output.close()
                if self._life_ended is not None:
                    # The process is gone: its tokens go with it, even when
                    # this worker is being stopped (cancelled).
                    with trio.CancelScope(shield=True):
                        await self._life_ended()
                # The child is gone and the pipe at its end; what is still
                # buffered is read, briefly.
                reading.deadline = trio.current_time() + self._tuning.eof_grace_s

    async def _pump(self, fd: int, scope: trio.CancelScope) -> None:
        with scope:
            await pump_output(trio.lowlevel.FdStream(fd), f"plugin {self.name}", log)

    async def _converse(self, output: _WriteEnd) -> str:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fd = theirs.fileno()
            try:
                async with sandboxed(lambda: self._spawn(self.plugin, fd, output.fd)) as child:
                    theirs.close()
                    output.close()  # the child holds its own copy
                    session = Session(
                        name=self.name,
                        child=child,
                        sock=ours,
                        manifest=self.plugin.manifest,
                        tuning=self._tuning,
                        memory_bytes=self.memory_bytes,
                        call_timeout_s=self.call_timeout_s,
                        renew=self._renew,
                        work_dir=self.work_dir,
                    )
                    self._session = session
                    self.pid = child.pid
                    try:
                        cause = await session.run(self._ready)
                    finally:
                        self._session = None
                        session.fail_pending(session.cause or "stopped")
                    return f"worker pid {child.pid}: {cause}"
            except sandbox.LaunchFailed as exc:
                return f"could not start: {exc}"
        finally:
            self.pid = 0
            ours.close()
            theirs.close()

    async def wait_settled(self) -> None:
        """Until the worker runs, has failed or is stopping."""
        while self.state in (WorkerState.STARTING, WorkerState.BACKOFF) and not self.stopping:
            changed = self._changed
            await changed.wait()

    def _ready(self) -> None:
        self.started_ns = time.time_ns()
        self._set(WorkerState.RUNNING)

    def _set(self, state: WorkerState) -> None:
        self.state = state
        self._changed.set()
        self._changed = trio.Event()

    # --- calls ------------------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments_json: str,
        timeout_s: float,
        *,
        on_progress: OnProgress | None = None,
    ) -> tuple[str, int]:
        """Run ``tool`` (arguments already checked); its result JSON and the
        answering worker's pid. Raises the plugin errors for each failure.
        ``on_progress`` gets the call's progress text as it arrives (bounded:
        see :class:`~naga_core.plugins._session.Pending`)."""
        pending, pid = await self._call(tool, arguments_json, timeout_s, on_progress, None)
        assert pending.result is not None
        return pending.result, pid

    async def call_typed(
        self,
        tool: str,
        typed: TypedCall,
        timeout_s: float,
        *,
        on_progress: OnProgress | None = None,
    ) -> pb.Result:
        """A call of one of the core's own workers with a typed payload; the
        Result (its payload is ``typed.answer``). A hang is only missed
        heartbeats; past ``timeout_s`` this call alone fails (CallTimedOut)."""
        pending, _pid = await self._call(tool, "", timeout_s, on_progress, typed)
        assert pending.reply is not None
        return pending.reply

    async def _call(
        self,
        tool: str,
        arguments_json: str,
        timeout_s: float,
        on_progress: OnProgress | None,
        typed: TypedCall | None,
    ) -> tuple[Pending, int]:
        deadline = trio.current_time() + timeout_s
        session = await self._ready_session(deadline, timeout_s)
        pending = await session.call(
            tool, arguments_json, deadline=deadline, on_progress=on_progress, typed=typed
        )
        if pending.failure is not None:
            if self.stopping:
                raise PluginUnavailable(f"plugin {self.name} was stopped during {tool}")
            ended = (
                f"plugin {self.name}: its worker (pid {session.pid}) ended during {tool}: "
                f"{pending.failure}"
            )
            # The caller hears what the supervisor made of the death (a
            # rebuild, or a crash loop that failed the plugin), not a guess
            # made before it decided.
            with trio.move_on_at(deadline):
                await self._verdict_on(session)
            if self.state is WorkerState.FAILED:
                raise WorkerUnavailable(
                    f"{ended}; the plugin failed: {self.last_failure}; "
                    f"enable it again to retry (naga plugin enable {self.name})"
                )
            raise WorkerUnavailable(
                f"{ended}; it is being rebuilt, and the next call goes to the new one"
            )
        if pending.error is not None:
            _raise_tool_error(self.name, tool, pending.error)
        return pending, session.pid

    async def _verdict_on(self, session: Session) -> None:
        """Until the supervisor has decided after ``session``'s worker ended:
        a backoff before the next start, a failure, or a stop."""
        while self._session is session or self.state is WorkerState.RUNNING:
            if self.stopping or self.state is WorkerState.FAILED:
                return
            changed = self._changed
            await changed.wait()

    async def _ready_session(self, deadline: float, timeout_s: float) -> Session:
        while True:
            if self.state is WorkerState.FAILED:
                raise PluginUnavailable(
                    f"plugin {self.name} failed: {self.last_failure}; "
                    f"enable it again to retry (naga plugin enable {self.name})"
                )
            if self.stopping or self.state is WorkerState.STOPPED:
                raise PluginUnavailable(f"plugin {self.name} is stopped")
            session = self._session
            # A child that already ended (killed a moment ago) has not been
            # seen by its session yet: wait for the rebuild rather than send
            # it a call that can only fail.
            if (
                session is not None
                and session.ready
                and session.cause is None
                and not session.child.has_exited()
            ):
                return session
            changed = self._changed
            with trio.move_on_at(deadline):
                await changed.wait()
                continue
            after = f" (last failure: {self.last_failure})" if self.last_failure else ""
            doing = (
                "waiting to restart its worker"
                if self.state is WorkerState.BACKOFF
                else ("starting its worker")
            )
            raise WorkerUnavailable(
                f"plugin {self.name} is {doing}{after}; it was not ready within {timeout_s:g} s"
            )


class _WriteEnd:
    """The core's copy of a child's output pipe, closed once (a second
    close could hit a descriptor the number was reused for)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            os.close(self.fd)


def _raise_tool_error(plugin: str, tool: str, error: pb.ToolError) -> None:
    message = f"{tool}: {error.message}"
    if error.kind == pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS:
        raise ToolArgumentsInvalid(message)
    if error.kind == pb.TOOL_ERROR_KIND_UNKNOWN_TOOL:
        raise PluginNotFound(f"plugin {plugin}: {error.message}")
    if error.kind == pb.TOOL_ERROR_KIND_INTERNAL:
        raise ToolFailed(f"{tool} (plugin {plugin}) could not answer: {error.message}")
    raise ToolFailed(message)


__all__ = ["GiveUp", "LifeEnded", "Note", "Renew", "Spawn", "Worker", "WorkerState"]
