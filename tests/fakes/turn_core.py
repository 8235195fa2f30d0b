"""A fake naga-core for the gateway's tests and bench: a real gRPC server on
a Unix socket serving TurnService (plus the KernelService and PluginService
calls the gateway makes) with scripted turns.

It is the gateway's peer, not the thing tested. Its turns: the reply is
``echo: <text>`` streamed word by word; a message starting with ``slow``
streams 400 words at ``slow_delay`` each (long enough to abort); ``tool:NAME``
in a message makes one call of tool NAME. Messages are "durable" (listed in
``entries``) before ``accepted`` is sent, and an idempotency key seen before
replays the recorded turn, as the real core's contract says. A message with
a queue mode for a busy session waits in the session's lane, as in the real
core (docs/adr/0013-lanes-home.md): acknowledged at once (``queued``), run
after the turns before it; interrupt aborts the running turn and goes
first. (Collect messages are not merged here: each runs as its own turn.)
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, NoReturn

import attrs
import grpc

from naga.constants import REFUSAL_KEY
from naga.v1 import console_pb2 as cnpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import plugin_pb2 as ppb
from naga.v1 import plugin_service_pb2 as spb
from naga.v1 import turn_pb2 as tpb
from naga.values import to_value
from naga_core.daemon import ConsoleLogins


@attrs.define
class Entry:
    seq: int
    session: str
    role: tpb.HistoryRole.ValueType
    text: str
    peer: str
    turn_id: str


def _refuse(
    ctx: grpc.ServicerContext, code: grpc.StatusCode, refusal: str, message: str
) -> NoReturn:
    """Refuse as the real core does: the status and its naga-refusal trailer."""
    ctx.set_trailing_metadata(((REFUSAL_KEY, f"REFUSAL_{refusal}"),))
    ctx.abort(code, message)
    raise AssertionError("abort raises")


_QUEUED = (tpb.QUEUE_MODE_FOLLOWUP, tpb.QUEUE_MODE_COLLECT, tpb.QUEUE_MODE_INTERRUPT)


@attrs.define
class _Running:
    turn_id: str
    abort: threading.Event = attrs.field(factory=threading.Event)
    steers: list[str] = attrs.field(factory=list[str])


class FakeCore:
    """State and behaviour; ``serve(path)`` exposes it over gRPC."""

    def __init__(self, *, slow_delay: float = 0.02, workers: int = 64) -> None:
        self.lock = threading.Lock()
        #: Notified whenever a session's turn ends (its lane's next may go).
        self._free = threading.Condition(self.lock)
        self.queues: dict[str, deque[_Running]] = {}
        self.entries: list[Entry] = []
        self.next_seq = 0
        self.replies: dict[tuple[str, str], list[tpb.TurnEvent]] = {}
        self.running: dict[str, _Running] = {}
        #: Every Run request that started a new turn, in order.
        self.runs: list[tpb.RunTurnRequest] = []
        self.steered: list[tpb.SteerTurnRequest] = []
        self.trust: dict[str, int] = {}
        self.tools: dict[str, int] = {"clock.now": 0, "notes.write": 2, "fs.delete": 4}
        self.slow_delay = slow_delay
        #: Run calls to refuse with UNAVAILABLE before accepting (a core crash).
        self.fail_next_runs = 0
        #: The real core's console logins (a code is the owner's proof here
        #: as there): ``login_code()`` is what ``naga console`` asks for.
        self.console = ConsoleLogins(secrets.token_bytes(32))
        self._turns = 0
        self._server: grpc.Server | None = None
        self._workers = workers

    # --- gRPC ---------------------------------------------------------------------

    def serve(self, socket: str) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers))

        def unary(fn: Callable[[Any, grpc.ServicerContext], Any], req: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=_ser
            )

        turn = grpc.method_handlers_generic_handler(
            "naga.v1.TurnService",
            {
                "Run": grpc.unary_stream_rpc_method_handler(
                    self._run,
                    request_deserializer=tpb.RunTurnRequest.FromString,
                    response_serializer=_ser,
                ),
                "Steer": unary(self._steer, tpb.SteerTurnRequest),
                "Abort": unary(self._abort, tpb.AbortTurnRequest),
                "ListSessions": unary(self._list, tpb.ListSessionsRequest),
                "History": unary(self._history, tpb.SessionHistoryRequest),
            },
        )
        kernel = grpc.method_handlers_generic_handler(
            "naga.v1.KernelService",
            {
                "GetTrust": unary(self._get_trust, cpb.GetTrustRequest),
                "Rollback": unary(self._rollback, cpb.RollbackRequest),
                "History": unary(self._ledger_history, cpb.HistoryRequest),
            },
        )
        plugins = grpc.method_handlers_generic_handler(
            "naga.v1.PluginService", {"List": unary(self._plugins, spb.ListPluginsRequest)}
        )
        console = grpc.method_handlers_generic_handler(
            "naga.v1.ConsoleService",
            {
                "RedeemLogin": unary(self._redeem, cnpb.RedeemLoginRequest),
                "CheckSession": unary(self._check_session, cnpb.CheckSessionRequest),
            },
        )
        server.add_generic_rpc_handlers((turn, kernel, plugins, console))
        server.add_insecure_port(f"unix:{socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)

    def idle(self, timeout: float = 10.0) -> bool:
        """Whether every run has ended within ``timeout``: a run leaves
        :attr:`running` only when grpc resumes its stream after the last
        event, which can be after a client has read that event."""
        with self._free:
            return self._free.wait_for(lambda: not self.running, timeout)

    # --- the console's owner proof --------------------------------------------------

    def login_code(self) -> str:
        """A one-time login code, as the real core's IssueLogin gives one."""
        with self.lock:
            return self.console.issue()[0]

    def _redeem(
        self, req: cnpb.RedeemLoginRequest, _ctx: grpc.ServicerContext
    ) -> cnpb.RedeemLoginResponse:
        with self.lock:
            return self.console.redeem(req.code)

    def _check_session(
        self, req: cnpb.CheckSessionRequest, _ctx: grpc.ServicerContext
    ) -> cnpb.CheckSessionResponse:
        with self.lock:
            return cnpb.CheckSessionResponse(verdict=self.console.check(req.session))

    # --- turns --------------------------------------------------------------------

    def _record(
        self, session: str, role: tpb.HistoryRole.ValueType, text: str, peer: str, turn_id: str
    ) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.entries.append(Entry(seq, session, role, text, peer, turn_id))
        return seq

    def _run(self, req: tpb.RunTurnRequest, ctx: grpc.ServicerContext) -> Iterator[tpb.TurnEvent]:
        with self.lock:
            if self.fail_next_runs > 0:
                self.fail_next_runs -= 1
                _refuse(ctx, grpc.StatusCode.UNAVAILABLE, "CORE_STOPPING", "the core is restarting")
            busy, position = False, 0
            recorded = self.replies.get((req.session, req.idempotency_key))
            if recorded is not None:
                replay, run, seq = recorded, None, 0
            else:
                busy = req.session in self.running or bool(self.queues.get(req.session))
                if busy and req.mode not in _QUEUED:
                    _refuse(
                        ctx,
                        grpc.StatusCode.FAILED_PRECONDITION,
                        "TURN_CONFLICT",
                        f"session {req.session} runs a turn",
                    )
                replay = None
                self._turns += 1
                turn_id = f"t{self._turns}"
                seq = self._record(req.session, tpb.HISTORY_ROLE_USER, req.text, req.peer, turn_id)
                run = _Running(turn_id)
                recorded = []
                self.replies[(req.session, req.idempotency_key)] = recorded
                if busy:
                    lane = self.queues.setdefault(req.session, deque())
                    if req.mode == tpb.QUEUE_MODE_INTERRUPT:
                        lane.appendleft(run)
                        ahead = self.running.get(req.session)
                        if ahead is not None:
                            ahead.abort.set()
                    else:
                        lane.append(run)
                    position = lane.index(run) + 1
                else:
                    self.running[req.session] = run
                    self.runs.append(req)
        if replay is not None or run is None:
            yield from _replay(recorded)
            return
        try:
            if busy:
                accepted = tpb.TurnAccepted(
                    message_seq=seq, turn_id=run.turn_id, queued=True, position=position
                )
                event = tpb.TurnEvent(index=0, accepted=accepted)
                recorded.append(event)
                yield event
                with self._free:
                    lane = self.queues[req.session]
                    while req.session in self.running or lane[0] is not run:
                        self._free.wait()
                    lane.popleft()
                    if not lane:
                        del self.queues[req.session]
                    self.running[req.session] = run
                    self.runs.append(req)
            yield from self._turn(req, run, seq, recorded, accepted=not busy)
        finally:
            with self._free:
                if self.running.get(req.session) is run:
                    del self.running[req.session]
                self._free.notify_all()

    def _turn(
        self,
        req: tpb.RunTurnRequest,
        run: _Running,
        seq: int,
        out: list[tpb.TurnEvent],
        *,
        accepted: bool = True,
    ) -> Iterator[tpb.TurnEvent]:
        def emit(**kind: Any) -> tpb.TurnEvent:
            ev = tpb.TurnEvent(index=len(out), **kind)
            out.append(ev)
            return ev

        if accepted:
            yield emit(accepted=tpb.TurnAccepted(message_seq=seq, turn_id=run.turn_id))
        tools = 0
        for word in req.text.split():
            if word.startswith("tool:"):
                name, call = word[5:], f"c{len(out)}"
                tools += 1
                yield emit(
                    tool_started=tpb.ToolCallStarted(call_id=call, tool=name, arguments_json="{}")
                )
                yield emit(
                    tool_finished=tpb.ToolCallFinished(call_id=call, ok=True, result_json='"ok"')
                )
        slow = req.text.startswith("slow")
        words = [f"w{i}" for i in range(400)] if slow else ["echo:", *req.text.split()]
        sent: list[str] = []
        for word in words:
            if slow and run.abort.wait(self.slow_delay):
                break
            if run.abort.is_set():
                break
            sent.append(word)
            yield emit(delta=tpb.TextDelta(text=("" if len(sent) == 1 else " ") + word))
        if run.abort.is_set():
            yield emit(
                error=tpb.TurnError(
                    kind=tpb.TURN_ERROR_KIND_ABORTED, message="aborted", partial_text=" ".join(sent)
                )
            )
            return
        text = " ".join(sent) + "".join(f" [steered: {s}]" for s in run.steers)
        with self.lock:
            reply = self._record(req.session, tpb.HISTORY_ROLE_ASSISTANT, text, "", run.turn_id)
        yield emit(
            final=tpb.TurnFinal(
                text=text,
                model_calls=1,
                tool_calls=tools,
                prompt_tokens=len(req.text),
                completion_tokens=len(text),
                reply_seq=reply,
            )
        )

    def _steer(self, req: tpb.SteerTurnRequest, ctx: grpc.ServicerContext) -> tpb.SteerTurnResponse:
        with self.lock:
            run = self.running.get(req.session)
            if run is None:
                _refuse(ctx, grpc.StatusCode.FAILED_PRECONDITION, "NO_TURN_RUNNING", "no turn runs")
            run.steers.append(req.text)
            self.steered.append(req)
            seq = self._record(req.session, tpb.HISTORY_ROLE_USER, req.text, req.peer, run.turn_id)
        return tpb.SteerTurnResponse(message_seq=seq)

    def _abort(self, req: tpb.AbortTurnRequest, ctx: grpc.ServicerContext) -> tpb.AbortTurnResponse:
        with self.lock:
            run = self.running.get(req.session)
            if run is None:
                _refuse(ctx, grpc.StatusCode.FAILED_PRECONDITION, "NO_TURN_RUNNING", "no turn runs")
            run.abort.set()
        return tpb.AbortTurnResponse(turn_id=run.turn_id)

    def _list(
        self, req: tpb.ListSessionsRequest, _ctx: grpc.ServicerContext
    ) -> tpb.ListSessionsResponse:
        with self.lock:
            last: dict[str, Entry] = {}
            turns: dict[str, int] = {}
            for e in self.entries:
                last[e.session] = e
                if e.role == tpb.HISTORY_ROLE_ASSISTANT:
                    turns[e.session] = turns.get(e.session, 0) + 1
        ordered = sorted(last.values(), key=lambda e: -e.seq)[: req.limit or 100]
        return tpb.ListSessionsResponse(
            sessions=[
                tpb.SessionSummary(
                    session=e.session,
                    turns=turns.get(e.session, 0),
                    last_seq=e.seq,
                    last_time_ns=time.time_ns(),
                    preview=e.text[:60],
                )
                for e in ordered
            ]
        )

    def _history(
        self, req: tpb.SessionHistoryRequest, _ctx: grpc.ServicerContext
    ) -> tpb.SessionHistoryResponse:
        with self.lock:
            mine = [e for e in self.entries if e.session == req.session][-(req.limit or 100) :]
        return tpb.SessionHistoryResponse(
            entries=[
                tpb.SessionEntry(
                    seq=e.seq,
                    role=e.role,
                    text=e.text,
                    peer=e.peer,
                    time_ns=time.time_ns(),
                    turn_id=e.turn_id,
                )
                for e in mine
            ]
        )

    def _get_trust(self, req: cpb.GetTrustRequest, _ctx: grpc.ServicerContext) -> cpb.TrustEntry:
        level = self.trust.get(req.peer, cpb.TRUST_LEVEL_UNTRUSTED)
        return cpb.TrustEntry(peer=req.peer, level=level, explicit=req.peer in self.trust)  # type: ignore[arg-type]

    def _rollback(
        self, req: cpb.RollbackRequest, _ctx: grpc.ServicerContext
    ) -> cpb.RollbackResponse:
        with self.lock:
            undone = [e for e in self.entries if e.seq > req.to_seq]
            preview = cpb.RollbackPreview(
                to_seq=req.to_seq,
                through_seq=self.next_seq - 1,
                effects=len(undone),
                changes=[
                    cpb.StateChange(
                        family="session", key=f"{e.session}#{e.seq}", before=to_value(e.text)
                    )
                    for e in undone
                ],
            )
            if req.dry_run:
                return cpb.RollbackResponse(preview=preview)
            self.entries = [e for e in self.entries if e.seq <= req.to_seq]
            seq = self.next_seq
            self.next_seq += 1
        return cpb.RollbackResponse(preview=preview, seq=seq)

    def _ledger_history(
        self, req: cpb.HistoryRequest, _ctx: grpc.ServicerContext
    ) -> cpb.HistoryResponse:
        # The console's ledger and undo pages: the session entries, newest first.
        with self.lock:
            rows = [
                cpb.HistoryEntry(
                    seq=e.seq, kind="turn.message", description=f"{e.session}: {e.text}"
                )
                for e in reversed(self.entries)
            ]
        return cpb.HistoryResponse(entries=rows[: req.limit or 50])

    def _plugins(
        self, _req: spb.ListPluginsRequest, _ctx: grpc.ServicerContext
    ) -> spb.ListPluginsResponse:
        tools = [spb.PluginTool(name=n, risk=r + 1) for n, r in self.tools.items()]  # type: ignore[arg-type]
        return spb.ListPluginsResponse(
            plugins=[spb.PluginInfo(name="fake", kind=ppb.PLUGIN_KIND_TOOL, tools=tools)]
        )


def _replay(recorded: list[tpb.TurnEvent]) -> Iterator[tpb.TurnEvent]:
    """A recorded turn again, joining it if it still runs (polled: a fake)."""
    sent = 0
    while True:
        batch = recorded[sent:]
        for ev in batch:
            out = tpb.TurnEvent()
            out.CopyFrom(ev)
            if out.HasField("accepted"):
                out.accepted.replayed = True
            yield out
            if ev.WhichOneof("kind") in ("final", "error"):
                return
        sent += len(batch)
        time.sleep(0.005)


def _ser(message: Any) -> bytes:
    return message.SerializeToString()
