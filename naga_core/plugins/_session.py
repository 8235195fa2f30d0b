"""One life of a plugin worker: the conversation on its socket, the calls in
flight, and the first reason it ended.

A session watches its process from five tasks, and the first that sees
trouble names the cause and ends the session (:meth:`Session.down`); the
worker then kills and reaps the process and decides about a restart:

* the exit, on the pidfd: a crash, a seccomp kill, an rlimit ("crashed
  (SIGSEGV)");
* health, polled: the process found stopped (SIGSTOP), its resident memory
  above the ceiling (a leak), more threads than allowed, more CPU over the
  window than its share (a spinning thread), its work directory over its
  quota (bytes or files, unlinked open files counted);
* the Hello, within its deadline, and the manifest in it;
* the reader: frames are read at most at the tuning's rate (a flood is
  slowed, never served at the cost of the core's loop), and every frame
  must be a well-formed PluginToCore in its place (a Pong nobody asked for,
  a second Hello, an answer to a call never made, progress for a call
  never made or already answered, a result that is not JSON are protocol
  violations: the plugin is broken or hostile, and it never gets to hurt
  the core by them);
* the heartbeat: a Ping unanswered within its timeout is a hung worker.

Calls add a sixth: a tool call running past the plugin's call timeout is a
hang too (not a typed call of the core's own workers: see ``Session.call``).
Nothing here raises into the host's nursery; an unexpected error in a
watcher ends the session with that error as its cause.
"""

from __future__ import annotations

import itertools
import logging
import math
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
from google.protobuf.message import Message

import sandbox
from naga.constants import (
    PLUGIN_MAX_PROGRESS_BYTES,
    PLUGIN_MAX_PROGRESS_FRAMES,
    PLUGIN_PROTOCOL_VERSION,
)
from naga.constants import PLUGIN_SETUP_EXIT_CODE as SETUP_EXIT_CODE
from naga.plugin import FrameReader, Manifest, decode_from_plugin, encode_frame, parse_json
from naga.plugin.errors import FrameError, InvalidArguments, ManifestInvalid
from naga.v1 import plugin_pb2 as pb
from naga_core.plugins._errors import CallTimedOut, WorkerHung
from naga_core.supervisor import (
    CpuWindow,
    WorkerTuning,
    cpu_seconds,
    disk_use,
    resident_bytes,
    thread_count,
    wait_exit,
)

log = logging.getLogger("naga.plugins")

_RECV_BYTES = 1 << 16
_ERROR_KINDS = frozenset(
    {
        pb.TOOL_ERROR_KIND_INVALID_ARGUMENTS,
        pb.TOOL_ERROR_KIND_FAILED,
        pb.TOOL_ERROR_KIND_UNKNOWN_TOOL,
        pb.TOOL_ERROR_KIND_INTERNAL,
    }
)
_MIB = 1 << 20

#: Takes a call's Progress text as it arrives, on the core's loop; it must
#: not block (it is called from the session's reader).
OnProgress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TypedCall:
    """A call of one of the core's own workers: ``message`` goes in the
    Invoke's payload ``field``; the Result must carry payload ``answer``."""

    field: str
    message: Message
    answer: str


@dataclass(slots=True)
class Pending:
    """One call in flight, and how it ended."""

    tool: str
    on_progress: OnProgress | None = None
    #: The payload field a typed call's Result must carry (None: JSON).
    typed: str | None = None
    done: trio.Event = field(default_factory=trio.Event)
    result: str | None = None
    #: The whole Result (a typed one's payload is read from it).
    reply: pb.Result | None = None
    error: pb.ToolError | None = None
    #: Why the worker ended before answering.
    failure: str | None = None
    #: Progress delivered, and frames dropped past the bounds.
    progress_frames: int = 0
    progress_bytes: int = 0
    progress_dropped: int = 0

    def progress(self, text: str) -> None:
        """Deliver ``text``, or drop it past the call's bounds: progress is
        presentation (the Result has the whole answer), so dropping loses
        nothing that is recorded, and nothing is held for later."""
        size = len(text.encode())
        if (
            self.on_progress is None
            or self.progress_frames >= PLUGIN_MAX_PROGRESS_FRAMES
            or self.progress_bytes + size > PLUGIN_MAX_PROGRESS_BYTES
        ):
            self.progress_dropped += 1
            return
        self.progress_frames += 1
        self.progress_bytes += size
        self.on_progress(text)


class _Bucket:
    """Frames a second, on average, with a burst (the session's reader)."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at: float | None = None

    async def take(self) -> None:
        now = trio.current_time()
        if self._at is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        self._tokens -= 1
        if self._tokens < 0:
            await trio.sleep(-self._tokens / self._rate)
        else:
            await trio.lowlevel.checkpoint()


class Session:
    def __init__(
        self,
        *,
        name: str,
        child: sandbox.Sandboxed,
        sock: socket.socket,
        manifest: Manifest,
        tuning: WorkerTuning,
        memory_bytes: int,
        call_timeout_s: float,
        renew: Callable[[], Awaitable[bytes]] | None = None,
        work_dir: str | None = None,
    ) -> None:
        self.name = name
        self._renew = renew
        self._work_dir = work_dir
        self._frames = _Bucket(tuning.frames_per_s, tuning.frame_burst)
        self._answered_ping = 0
        self.child = child
        self.pid = child.pid
        self.manifest = manifest
        self.memory_bytes = memory_bytes
        self.call_timeout_s = call_timeout_s
        self._tuning = tuning
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        self._reader = FrameReader()
        self._send_lock = trio.Lock()
        self._pending: dict[int, Pending] = {}
        # Calls whose caller gave up before the answer came: the plugin
        # cannot know, so their late progress and answers are not violations.
        self._abandoned: set[int] = set()
        self._ids = itertools.count(1)
        self._last_id = 0
        self._ping = 0
        self._pong = trio.Event()
        self._exited = trio.Event()
        self._shutdown = trio.Event()
        self._scope = trio.CancelScope()
        #: True once the Hello was accepted.
        self.ready = False
        #: The first reason the session ended (None while it lives).
        self.cause: str | None = None

    # --- the end ------------------------------------------------------------------------

    def down(self, cause: str) -> None:
        """End the session for ``cause`` (the first one given is kept)."""
        if self.cause is None:
            self.cause = cause
        self._scope.cancel()

    def fail_pending(self, failure: str) -> None:
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.failure = failure
                pending.done.set()
        self._pending.clear()

    def request_shutdown(self) -> None:
        """Ask the worker to finish and exit (the session then ends)."""
        self._shutdown.set()

    # --- running --------------------------------------------------------------------------

    async def run(self, on_ready: Callable[[], None]) -> str:
        """Converse until the worker ends; return why it ended."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._watch_exit)
                nursery.start_soon(self._guard, self._watch_health)
                if self._work_dir is not None:
                    nursery.start_soon(self._guard, self._watch_disk)
                nursery.start_soon(self._guard, self._watch_shutdown)
                if await self._hello():
                    self.ready = True
                    on_ready()
                    nursery.start_soon(self._guard, self._read)
                    nursery.start_soon(self._guard, self._heartbeat)
                    if self._renew is not None:
                        nursery.start_soon(self._guard, self._renewals)
        return self.cause or "ended"

    async def _guard(self, watcher: Callable[[], Awaitable[None]]) -> None:
        try:
            await watcher()
        except Exception as exc:
            log.exception("plugin %s: supervisor error", self.name)
            self.down(f"supervisor error: {type(exc).__name__}: {exc}")

    async def _watch_exit(self) -> None:
        end = await wait_exit(self.child)
        self._exited.set()
        if not self.ready and end.kind is sandbox.ExitKind.EXITED and end.code == SETUP_EXIT_CODE:
            self.down(
                f"exited with code {SETUP_EXIT_CODE} before its Hello: its code does not "
                "match its manifest (the plugin's message is in the core's log)"
            )
        elif self.ready or end.kind is not sandbox.ExitKind.EXITED:
            self.down(end.cause)
        else:
            self.down(f"{end.cause} before its Hello")

    async def _watch_health(self) -> None:
        tuning = self._tuning
        cpu = CpuWindow(tuning.cpu_window_s)
        while True:
            await trio.sleep(tuning.health_s)
            if self.child.stopped():
                self.down("found stopped (SIGSTOP or SIGTSTP), making no progress")
                return
            rss = resident_bytes(self.pid)
            if rss is not None and rss > self.memory_bytes:
                self.down(
                    f"memory ceiling exceeded: {rss / _MIB:.0f} MiB resident, "
                    f"the ceiling is {self.memory_bytes / _MIB:.0f} MiB (a leak)"
                )
                return
            threads = thread_count(self.pid)
            if threads is not None and threads > tuning.max_threads:
                self.down(
                    f"thread limit exceeded: {threads} threads, the limit is {tuning.max_threads}"
                )
                return
            used = cpu_seconds(self.pid)
            share = None if used is None else cpu.add(trio.current_time(), used)
            if share is not None and share > tuning.cpu_share:
                self.down(
                    f"CPU limit exceeded: {share:.2f} CPUs over the last "
                    f"{tuning.cpu_window_s:g} s, the limit is {tuning.cpu_share:g}"
                )
                return

    async def _watch_disk(self) -> None:
        tuning = self._tuning
        assert self._work_dir is not None
        work = self._work_dir
        while True:
            use = await trio.to_thread.run_sync(
                lambda: disk_use(work, self.pid, max_entries=tuning.disk_files)
            )
            if use.bytes > tuning.disk_bytes or use.files > tuning.disk_files:
                self.down(
                    f"disk quota exceeded: its work directory {work} holds "
                    f"{use.bytes / _MIB:.0f} MiB in {use.files} files, the quota is "
                    f"{tuning.disk_bytes / _MIB:.0f} MiB in {tuning.disk_files} files; "
                    "free space there before enabling it again"
                )
                return
            await trio.sleep(tuning.disk_check_s)

    async def _watch_shutdown(self) -> None:
        await self._shutdown.wait()
        if self.ready:  # let calls in flight finish, briefly
            with trio.move_on_after(self._tuning.shutdown_grace_s):
                if await self._send(pb.CoreToPlugin(shutdown=pb.Shutdown(reason="stopped"))):
                    await self._exited.wait()
        self.down("stopped on request")

    async def _hello(self) -> bool:
        timeout = self._tuning.hello_timeout_s
        with trio.move_on_after(timeout):
            frame = await self._next_frame()
            if frame is None:
                return False
            which = frame.WhichOneof("frame")
            if which != "hello":
                self._violation(f"its first frame is a {which}, not a Hello")
                return False
            return self._accept(frame.hello)
        self.down(f"no Hello within {timeout:g} s of its start")
        return False

    def _accept(self, hello: pb.Hello) -> bool:
        if hello.protocol_version != PLUGIN_PROTOCOL_VERSION:
            self._violation(
                f"it speaks plugin protocol {hello.protocol_version}, "
                f"the core speaks {PLUGIN_PROTOCOL_VERSION}"
            )
            return False
        try:
            # Equal to the installed one or refused: its egress was judged at install.
            said = Manifest.from_proto(hello.manifest, source="its Hello", local_egress=True)
        except ManifestInvalid as exc:
            self._violation(f"the manifest in its Hello is invalid: {exc}")
            return False
        if said != self.manifest:
            self._violation(
                f"its manifest ({said.name} {said.version}) is not the one installed "
                f"({self.manifest.name} {self.manifest.version}"
                + (")" if said.version != self.manifest.version else ", other tools or limits)")
            )
            return False
        return True

    async def _next_frame(self) -> pb.PluginToCore | None:
        """The next frame, or None once the session is ending (the cause is set)."""
        while True:
            try:
                body = self._reader.next_body()
            except FrameError as exc:
                self._violation(str(exc))
                return None
            if body is not None:
                try:
                    return decode_from_plugin(body)
                except FrameError as exc:
                    self._violation(str(exc))
                    return None
            try:
                data = await self._stream.receive_some(_RECV_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                await self._broke(exc)
                return None
            if not data:
                await self._after_eof()
                return None
            try:
                self._reader.feed(data)
            except FrameError as exc:
                self._violation(str(exc))
                return None

    async def _broke(self, exc: Exception) -> None:
        # A reset or a broken pipe is most often a worker that died (one
        # killed with a frame of ours unread resets the socket): as after
        # an EOF, the exit watcher names how (the first cause is kept).
        if self.cause is None:  # not ended already (our own close)
            with trio.move_on_after(self._tuning.eof_grace_s):
                await self._exited.wait()
        self.down(f"its connection broke: {exc}")

    async def _after_eof(self) -> None:
        # A worker that closes its socket is usually exiting: give the exit
        # watcher the chance to name how.
        with trio.move_on_after(self._tuning.eof_grace_s):
            await self._exited.wait()
        if self._reader.pending:
            self._violation("its last frame was cut short when it closed the connection")
        else:
            self.down("closed its connection but keeps running")

    def _violation(self, detail: str) -> None:
        self.down(f"protocol violation: {detail}")

    async def _read(self) -> None:
        while self.cause is None:
            frame = await self._next_frame()
            if frame is None:
                return
            self._dispatch(frame)
            # Every frame waits its turn in the bucket (a flood is read at
            # the bucket's rate; the worker's sends block meanwhile), and
            # others' work runs between frames.
            await self._frames.take()

    def _dispatch(self, frame: pb.PluginToCore) -> None:
        which = frame.WhichOneof("frame")
        if which == "hello":
            self._violation("a second Hello")
        elif which == "pong":
            # Only the heartbeat outstanding is answered, once: a Ping goes
            # out only after the last was answered, so anything else is a
            # Pong nobody asked for (a flood of them once cost the core 50x).
            nonce = frame.pong.nonce
            if nonce == self._ping and self._answered_ping < nonce:
                self._answered_ping = nonce
                self._pong.set()
            elif nonce > self._ping:
                self._violation(f"a Pong for heartbeat {nonce}, which was never sent")
            else:
                self._violation(f"a Pong for heartbeat {nonce}, which is not outstanding")
        elif which == "result":
            self._answer(frame.result.call_id, result=frame.result)
        elif which == "error":
            self._answer(frame.error.call_id, error=frame.error)
        elif which == "progress":
            self._progress(frame.progress)

    def _progress(self, progress: pb.Progress) -> None:
        call_id = progress.call_id
        if not 0 < call_id <= self._last_id:
            self._violation(f"progress for call {call_id}, which was never made")
            return
        pending = self._pending.get(call_id)
        if pending is not None:
            if progress.text:
                pending.progress(progress.text)
        elif call_id not in self._abandoned:
            self._violation(f"progress for call {call_id}, which it already answered")

    def _answer(
        self, call_id: int, *, result: pb.Result | None = None, error: pb.ToolError | None = None
    ) -> None:
        if not 0 < call_id <= self._last_id:
            self._violation(f"an answer to call {call_id}, which was never made")
            return
        pending = self._pending.get(call_id)
        if pending is None:
            self._abandoned.discard(call_id)
            return  # a late answer to a call its caller gave up on (or a second answer)
        # A violation below leaves the call pending: the session's end fails it.
        if result is not None:
            if pending.typed != result.WhichOneof("payload"):
                self._violation(
                    f"the result of call {call_id} carries {result.WhichOneof('payload')}, "
                    f"not {pending.typed or 'JSON'}"
                )
                return
            if pending.typed is None:
                try:
                    parse_json(result.result_json, what=f"the result of call {call_id}")
                except InvalidArguments as exc:
                    self._violation(str(exc).replace("are not", "is not"))
                    return
            pending.result = result.result_json
            pending.reply = result
        else:
            assert error is not None
            if error.kind not in _ERROR_KINDS:
                self._violation(f"a ToolError for call {call_id} of unknown kind {error.kind}")
                return
            pending.error = error
        del self._pending[call_id]
        pending.done.set()

    async def _heartbeat(self) -> None:
        timeout = self._tuning.heartbeat_timeout_s
        while True:
            await trio.sleep(self._tuning.heartbeat_s)
            self._ping += 1
            self._pong = trio.Event()
            with trio.move_on_after(timeout):
                if not await self._send(pb.CoreToPlugin(ping=pb.Ping(nonce=self._ping))):
                    return
                await self._pong.wait()
                continue
            self.down(f"hung: no answer to a heartbeat within {timeout:g} s")
            return

    async def _renewals(self) -> None:
        """A fresh token each half of a token's lifetime, so the one it holds
        never expires while it lives."""
        assert self._renew is not None
        while True:
            await trio.sleep(self._tuning.token_ttl_s / 2)
            token = await self._renew()
            if not await self._send(pb.CoreToPlugin(renewal=pb.TokenRenewal(token=token))):
                return

    async def _send(self, frame: pb.CoreToPlugin) -> bool:
        data = encode_frame(frame)
        broken: Exception | None = None
        async with self._send_lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                broken = exc
        if broken is not None:
            await self._broke(broken)
            return False
        return True

    # --- calls ------------------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments_json: str,
        *,
        deadline: float,
        on_progress: OnProgress | None = None,
        typed: TypedCall | None = None,
    ) -> Pending:
        """Send one call and wait for its end, at most until ``deadline``
        (trio time) or the call timeout, whichever is first. Past the call
        timeout the worker is hung: the session ends and :class:`WorkerHung`
        is raised; past only the caller's deadline, :class:`CallTimedOut`.
        ``on_progress`` gets the call's Progress text as it arrives, never
        after the call returns."""
        call_id = next(self._ids)
        self._last_id = call_id
        pending = Pending(tool, on_progress, typed.answer if typed else None)
        if self.cause is not None:
            pending.failure = self.cause
            return pending
        self._pending[call_id] = pending
        now = trio.current_time()
        # A tool's manifest promises an answer within its call timeout, so
        # running past it is a hang. The core's own workers (typed calls)
        # answer pings while a call runs however long it is: for them only
        # missed heartbeats are a hang, and a call past its caller's
        # deadline fails alone (docs/adr/0009-turn-deadline-scheme.md).
        hang_at = math.inf if typed is not None else now + self.call_timeout_s
        ends_at = min(deadline, hang_at)
        invoke = pb.Invoke(
            call_id=call_id,
            tool=tool,
            arguments_json=arguments_json,
            deadline_ms=max(1, round((ends_at - now) * 1000)),
        )
        if typed is not None:
            getattr(invoke, typed.field).CopyFrom(typed.message)
        try:
            with trio.move_on_at(ends_at):
                if await self._send(pb.CoreToPlugin(invoke=invoke)):
                    await pending.done.wait()
        finally:
            if not pending.done.is_set():
                if self._pending.pop(call_id, None) is not None and self.cause is None:
                    self._abandoned.add(call_id)
                pending.on_progress = None
        if pending.done.is_set():
            return pending
        if pending.failure is None and self.cause is not None:
            pending.failure = self.cause  # the send found the session ended
            return pending
        if trio.current_time() >= hang_at:
            overrun = f"{tool} ran past its call timeout of {self.call_timeout_s:g} s"
            self.down(f"hung: {overrun}")
            raise WorkerHung(
                f"plugin {self.name}: {overrun}: the worker (pid {self.pid}) is hung; it was "
                "killed and is being rebuilt, and the next call goes to the new one"
            )
        raise CallTimedOut(
            f"plugin {self.name}: no answer from {tool} within the caller's timeout "
            f"of {max(0.0, deadline - now):.3g} s"
        )


__all__ = ["OnProgress", "Pending", "Session", "TypedCall"]
