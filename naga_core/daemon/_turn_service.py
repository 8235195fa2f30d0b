"""``naga.v1.TurnService``, ``ModelService`` and ``ToolService`` on the
core's bridge (proto/naga/v1/turn.proto, agent.proto). Checks of the
request's fields run on the server thread; the rest on the loop (_agent)."""

from __future__ import annotations

from naga.constants import MAX_IDEMPOTENCY_KEY_CHARS as MAX_KEY_CHARS
from naga.constants import (
    MAX_MESSAGE_BYTES,
    MAX_RUN_STREAMS,
    RECORDS_PAGE_MAX_BYTES,
    SESSION_PATTERN,
)
from naga.constants import PLUGIN_MAX_ARGUMENTS_CHARS as _MAX_ARGUMENTS_CHARS
from naga.constants import TOOL_STEP_MAX_CALLS as _MAX_STEP_CALLS
from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import SESSION, Agent, Reloading, Session, TurnCursor
from naga_core.daemon import _checks
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Stream, Unary
from naga_core.daemon._errors import RequestRefused
from naga_core.daemon._session_meta import SessionMeta
from naga_core.kernel import KernelError, check_peer

TURN_SERVICE = "naga.v1.TurnService"
MODEL_SERVICE = "naga.v1.ModelService"
TOOL_SERVICE = "naga.v1.ToolService"
_DEFAULT_LIMIT = 100
_MAX_LIMIT = 1000


def _session(value: str) -> None:
    if not SESSION.fullmatch(value):
        raise RequestRefused.invalid(
            f"session {value[:40]!r} is not a session name ({SESSION_PATTERN})"
        )


def _text(field: str, value: str) -> None:
    if not value:
        raise RequestRefused.invalid(f"{field} is required")
    size = len(value.encode())
    if size > MAX_MESSAGE_BYTES:
        raise RequestRefused.invalid(
            f"{field} has {size} bytes (UTF-8); at most {MAX_MESSAGE_BYTES} are accepted"
        )


def _peer(value: str) -> None:
    if value:
        try:
            check_peer(value)
        except KernelError as exc:
            raise RequestRefused.invalid(str(exc)) from None


def _limit(value: int) -> int:
    if value > _MAX_LIMIT:
        raise RequestRefused.invalid(f"limit {value} is above the maximum of {_MAX_LIMIT}")
    return value or _DEFAULT_LIMIT


def check_run(req: tpb.RunTurnRequest) -> None:
    _session(req.session)
    _text("text", req.text)
    _checks.text("idempotency_key", req.idempotency_key, max_chars=MAX_KEY_CHARS)
    _peer(req.peer)
    if req.HasField("risk_ceiling") and req.risk_ceiling > 4:
        raise RequestRefused.invalid(f"risk_ceiling: {req.risk_ceiling} is not 0..4")


def check_steer(req: tpb.SteerTurnRequest) -> None:
    _session(req.session)
    _text("text", req.text)
    _checks.text("idempotency_key", req.idempotency_key, max_chars=MAX_KEY_CHARS)
    _peer(req.peer)


def check_abort(req: tpb.AbortTurnRequest) -> None:
    _session(req.session)


def check_list(req: tpb.ListSessionsRequest) -> None:
    _limit(req.limit)


def check_history(req: tpb.SessionHistoryRequest) -> None:
    _session(req.session)
    _limit(req.limit)


def check_complete(req: apb.ModelCallRequest) -> None:
    _session(req.session)
    _checks.text("turn_id", req.turn_id, max_chars=64)
    if not any(m.role != 1 for m in req.request.messages):  # 1: ROLE_SYSTEM
        raise RequestRefused.invalid("request.messages needs a message that is not ROLE_SYSTEM")


def check_call(req: apb.ToolCallRequest) -> None:
    _session(req.session)
    _checks.text("turn_id", req.turn_id, max_chars=64)
    _checks.text("tool", req.tool, max_chars=128)
    _checks.text("call_id", req.call_id, max_chars=256, required=False)
    if len(req.arguments_json) > _MAX_ARGUMENTS_CHARS:
        raise RequestRefused.invalid(
            f"arguments_json has {len(req.arguments_json)} characters; "
            f"at most {_MAX_ARGUMENTS_CHARS} are accepted"
        )


def check_step(req: apb.ToolStepRequest) -> None:
    _session(req.session)
    _checks.text("turn_id", req.turn_id, max_chars=64)
    if not 1 <= len(req.calls) <= _MAX_STEP_CALLS:
        raise RequestRefused.invalid(
            f"calls has {len(req.calls)} entries; 1 to {_MAX_STEP_CALLS} are accepted"
        )
    for i, call in enumerate(req.calls):
        check_call(call)
        if call.session != req.session or call.turn_id != req.turn_id:
            raise RequestRefused.invalid(
                f"calls[{i}] names session {call.session!r} turn {call.turn_id!r}, "
                "not the step's own"
            )


class TurnServicer:
    def __init__(self, agent: Agent, meta: SessionMeta) -> None:
        self._agent = agent
        self._meta = meta

    def methods(self) -> list[Method]:
        return [
            Stream("Run", tpb.RunTurnRequest, self.run, MAX_RUN_STREAMS, check_run),
            AsyncUnary("Steer", tpb.SteerTurnRequest, self.steer, check_steer),
            Unary("Abort", tpb.AbortTurnRequest, self.abort, check_abort),
            AsyncUnary("ListSessions", tpb.ListSessionsRequest, self.list, check_list),
            AsyncUnary("History", tpb.SessionHistoryRequest, self.history, check_history),
        ]

    def run(self, p: Principal, req: tpb.RunTurnRequest) -> TurnCursor | Reloading:
        return self._agent.start(p, req)

    async def steer(self, _p: Principal, req: tpb.SteerTurnRequest) -> tpb.SteerTurnResponse:
        return tpb.SteerTurnResponse(message_seq=await self._agent.steer(req))

    def abort(self, _p: Principal, req: tpb.AbortTurnRequest) -> tpb.AbortTurnResponse:
        return tpb.AbortTurnResponse(turn_id=self._agent.abort(req.session))

    async def list(self, _p: Principal, req: tpb.ListSessionsRequest) -> tpb.ListSessionsResponse:
        limit = _limit(req.limit)
        meta = self._meta
        shown: list[Session] = []
        # Archived ones are skipped, not counted: the page still fills.
        for s in self._agent.sessions.recent(len(self._agent.sessions)):
            if len(shown) >= limit:
                break
            if req.include_archived or not meta.archived(s.name):
                shown.append(s)
        shown = await self._agent.previewed(shown)
        return tpb.ListSessionsResponse(sessions=[meta.decorate(s.summary()) for s in shown])

    async def history(
        self, _p: Principal, req: tpb.SessionHistoryRequest
    ) -> tpb.SessionHistoryResponse:
        session = await self._agent.session(req.session)
        return tpb.SessionHistoryResponse(entries=_newest_within(session.entries, req.limit))


def _newest_within(entries: list[tpb.SessionEntry], limit: int) -> list[tpb.SessionEntry]:
    """The newest ``limit`` entries, fewer if their text passes
    RECORDS_PAGE_MAX_BYTES (messages may be 1 MB each: a page of them must
    still fit a response); always the newest one."""
    out: list[tpb.SessionEntry] = []
    size = 0
    for entry in reversed(entries[-_limit(limit) :]):
        size += len(entry.text.encode()) + 64
        if out and size > RECORDS_PAGE_MAX_BYTES:
            break
        out.append(entry)
    out.reverse()
    return out


class ModelServicer:
    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def methods(self) -> list[Method]:
        # A call's trace and debit ride the turn's next commit (its next tool
        # call's intent, or its end before the final event): one group
        # commit less per model call (docs/adr/0043).
        return [
            AsyncUnary(
                "Complete",
                apb.ModelCallRequest,
                self._agent.complete,
                check_complete,
                settled_later=True,
            )
        ]


class ToolServicer:
    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def methods(self) -> list[Method]:
        return [
            AsyncUnary("Call", apb.ToolCallRequest, self._agent.call_tool, check_call),
            AsyncUnary("CallStep", apb.ToolStepRequest, self._agent.call_step, check_step),
        ]


__all__ = [
    "MODEL_SERVICE",
    "TOOL_SERVICE",
    "TURN_SERVICE",
    "ModelServicer",
    "ToolServicer",
    "TurnServicer",
]
