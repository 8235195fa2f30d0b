"""Re-running a bundle's turns: the executor's own loop (``run_turn``),
in-process, with the core's two calls answered from the recording after
checking that each request is the recorded one (docs/design/replay.md)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from naga.executor import run_turn
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import TRACE_ERROR as ERROR
from naga_core.agent import TRACE_MESSAGE as MESSAGE
from naga_core.agent import TRACE_MODEL as MODEL
from naga_core.agent import TRACE_REPLY as REPLY
from naga_core.agent import TRACE_STEER as STEER
from naga_core.agent import TRACE_TOOL as TOOL
from naga_core.replay._bundle import Bundle, TraceRecord
from naga_core.replay._errors import BundleInvalid

#: The core's own tool for reading a stored result (naga_core.agent._results).
READ_RESULT_NAME = "turn__read_result"

#: Turns that ended for reasons outside the loop (the core cut them short):
#: their recording stops early and the loop cannot be asked to agree.
_CUT_KINDS = frozenset(
    {
        tpb.TURN_ERROR_KIND_ABORTED,
        tpb.TURN_ERROR_KIND_EXECUTOR,
        tpb.TURN_ERROR_KIND_INTERNAL,
    }
)
_DIFF_LINES = 24


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place the replayed loop did not do what was recorded."""

    turn: int  # 1-based, in the session's order
    turn_id: str
    step: int  # 1-based: model and tool calls of the turn, then its end
    what: str
    expected: str
    got: str
    diff: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        lines = [
            f"DIVERGED at turn {self.turn} ({self.turn_id}), step {self.step}: {self.what}",
            f"  expected: {self.expected}",
            f"  got:      {self.got}",
        ]
        return lines + [f"  {d}" for d in self.diff]


@dataclass(frozen=True, slots=True)
class TurnResult:
    turn_id: str
    #: "reproduced", "cut short" (the recording ends where the core cut the
    #: turn; everything up to there matched), "skipped" (no model call).
    status: str
    model_calls: int
    tool_calls: int


@dataclass(frozen=True, slots=True)
class ReplayReport:
    session: str
    turns: tuple[TurnResult, ...]
    divergence: Divergence | None

    @property
    def reproduced(self) -> int:
        return sum(t.status == "reproduced" for t in self.turns)


@dataclass(slots=True)
class _Turn:
    turn_id: str
    message: apb.TurnRecord | None = None
    steers: list[str] = field(default_factory=list[str])
    steps: list[TraceRecord] = field(default_factory=list[TraceRecord])
    end: TraceRecord | None = None


class _Diverged(Exception):
    """Raised through run_turn from the recorded core; carries the finding."""

    def __init__(self, step: int, what: str, expected: str, got: str, diff: Sequence[str] = ()):
        super().__init__(what)
        self.step, self.what, self.expected, self.got = step, what, expected, got
        self.diff = tuple(diff)


class _CutShort(Exception):
    """The loop asked past the end of a turn the core cut short."""


def replay(bundle: Bundle) -> ReplayReport:
    """Re-run every turn of ``bundle`` in order; stop at the first divergence."""
    results: list[TurnResult] = []
    for number, t in enumerate(_turns(bundle), 1):
        try:
            results.append(_replay_turn(t, bundle))
        except _Diverged as d:
            found = Divergence(number, t.turn_id, d.step, d.what, d.expected, d.got, d.diff)
            return ReplayReport(bundle.session, tuple(results), found)
    return ReplayReport(bundle.session, tuple(results), None)


def _turns(bundle: Bundle) -> list[_Turn]:
    by_id: dict[str, _Turn] = {}
    for r in bundle.records:
        t = by_id.setdefault(r.body.turn_id, _Turn(r.body.turn_id))
        if r.kind == MESSAGE:
            t.message = r.body
        elif r.kind == STEER:
            t.steers.append(r.body.text)
        elif r.kind in (MODEL, TOOL):
            t.steps.append(r)
        elif r.kind in (REPLY, ERROR):
            t.end = r
    return list(by_id.values())


def _replay_turn(t: _Turn, bundle: Bundle) -> TurnResult:
    models = [s for s in t.steps if s.kind == MODEL]
    if not models:
        return TurnResult(t.turn_id, "skipped", 0, 0)
    first = _strip_steers(_request(models[0], bundle), t.steers)
    said = t.message.text if t.message is not None else None
    if said is not None and (not first.messages or first.messages[-1].content != said):
        # The job is rebuilt from this request: it must end with the message.
        raise _Diverged(
            1,
            "the first model request does not end with the turn's message",
            repr(said[:80]),
            repr(first.messages[-1].content[:80]) if first.messages else "no messages",
        )
    end = t.end.body if t.end is not None else None
    cut = end is None or (
        t.end is not None and t.end.kind == ERROR and end.error_kind in _CUT_KINDS
    )
    steps_limit = len(models) + 1
    if end is not None and end.error_kind == tpb.TURN_ERROR_KIND_STEPS:
        steps_limit = end.model_calls
    job = apb.ExecutorJob(
        session=bundle.session,
        turn_id=t.turn_id,
        messages=first.messages,
        tools=first.tools,
        max_steps=steps_limit,
        max_tokens=first.max_tokens,
    )
    core = _RecordedCore(t, bundle, end)
    try:
        outcome = run_turn(job, core)
    except _CutShort:
        return TurnResult(t.turn_id, "cut short", core.models, core.tools)
    core.check_done()
    if cut or end is None:
        return TurnResult(t.turn_id, "cut short", core.models, core.tools)
    _check_outcome(outcome, end, core.position + 1)
    return TurnResult(t.turn_id, "reproduced", core.models, core.tools)


class _RecordedCore:
    """ModelService and ToolService as the recording answered them."""

    def __init__(self, t: _Turn, bundle: Bundle, end: apb.TurnRecord | None) -> None:
        self._turn = t
        self._bundle = bundle
        self._end = end
        self.position = 0  # steps consumed
        self.models = 0
        self.tools = 0

    def _next(self) -> TraceRecord | None:
        steps = self._turn.steps
        return steps[self.position] if self.position < len(steps) else None

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse:
        step = self.position + 1
        got = request.request
        nxt = self._next()
        if nxt is None:
            end = self._end
            if end is not None and end.error_kind == tpb.TURN_ERROR_KIND_BUDGET:
                self.position += 1
                return apb.ModelCallResponse(budget_exhausted=True, message=end.error_message)
            if end is None or end.error_kind in _CUT_KINDS:
                raise _CutShort
            raise _Diverged(
                step,
                f"an extra model call (model call {self.models + 1})",
                f"the turn ends after {self.models} model call(s)",
                f"a model call with {len(got.messages)} messages",
            )
        if nxt.kind != MODEL:
            raise _Diverged(
                step,
                "a model call where a tool call was recorded",
                f"tool call {nxt.body.tool}({nxt.body.arguments_json}) id {nxt.body.call_id}",
                f"a model call with {len(got.messages)} messages",
            )
        expected = _strip_steers(_request(nxt, self._bundle), self._turn.steers)
        if expected != got:
            raise _Diverged(
                step,
                f"model call {self.models + 1}: the request differs from the recorded one",
                _summary(expected),
                _summary(got),
                _diff(expected, got),
            )
        self.position += 1
        self.models += 1
        answer = self._bundle.blobs.get(nxt.body.response_blob)
        if answer is None:
            raise BundleInvalid(
                f"record {nxt.seq} names answer blob {nxt.body.response_blob.hex()[:16]}…, "
                "which it does not list among its blobs"
            )
        try:
            if nxt.body.failed:
                return apb.ModelCallResponse(error=mpb.ModelError.FromString(answer))
            response = mpb.ChatResponse.FromString(answer)
        except DecodeError as exc:
            raise BundleInvalid(
                f"record {nxt.seq}: the recorded answer is not a model answer: {exc}"
            ) from None
        # An answer with no tool call that another model call followed: the
        # core had steering for it (docs/adr/0059), as the recording shows.
        after = self._next()
        pending = not response.message.tool_calls and after is not None and after.kind == MODEL
        return apb.ModelCallResponse(response=response, unlimited=True, steering_pending=pending)

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse:
        step = self.position + 1
        got = f"tool call {request.tool}({request.arguments_json}) id {request.call_id}"
        nxt = self._next()
        if nxt is None or nxt.kind != TOOL:
            if nxt is None and (self._end is None or self._end.error_kind in _CUT_KINDS):
                raise _CutShort
            expected = "the turn's end" if nxt is None else "a model call"
            raise _Diverged(step, "a tool call that was not recorded here", expected, got)
        rec = nxt.body
        expected = f"tool call {rec.tool}({rec.arguments_json}) id {rec.call_id}"
        if (rec.tool, rec.arguments_json, rec.call_id) != (
            request.tool,
            request.arguments_json,
            request.call_id,
        ):
            raise _Diverged(
                step, f"tool call {self.tools + 1}: name, arguments or id differ", expected, got
            )
        self.position += 1
        self.tools += 1
        return apb.ToolCallResponse(ok=rec.ok, result_json=rec.result_json, error=rec.error)

    def call_step(
        self, request: apb.ToolStepRequest, *, timeout: float | None = None
    ) -> apb.ToolStepResponse:
        # A step's results are recorded in its order, however it ran.
        return apb.ToolStepResponse(
            results=[self.call_tool(call, timeout=timeout) for call in request.calls]
        )

    def check_done(self) -> None:
        nxt = self._next()
        if nxt is None:
            return
        if nxt.kind == MODEL:
            expected = f"model call {self.models + 1}"
        else:
            expected = f"tool call {nxt.body.tool}({nxt.body.arguments_json})"
        raise _Diverged(
            self.position + 1, "the turn ended early", expected, "the loop returned its outcome"
        )


def _request(r: TraceRecord, bundle: Bundle) -> mpb.ChatRequest:
    try:
        return mpb.ChatRequest.FromString(bundle.blobs[r.body.request_blob])
    except KeyError:
        raise BundleInvalid(
            f"record {r.seq} names request blob {r.body.request_blob.hex()[:16]}…, which it "
            "does not list among its blobs"
        ) from None
    except DecodeError as exc:
        raise BundleInvalid(
            f"record {r.seq}: the recorded request is not a ChatRequest: {exc}"
        ) from None


def _strip_steers(request: mpb.ChatRequest, steers: Sequence[str]) -> mpb.ChatRequest:
    """The request as the executor sent it: the core appends the turn's
    steering messages (all received so far) before it forwards a call, and
    its own ``turn__read_result`` tool once a result was too long to show
    (docs/adr/0010-prompt-budget.md)."""
    if request.tools and request.tools[-1].name == READ_RESULT_NAME:
        trimmed = mpb.ChatRequest()
        trimmed.CopyFrom(request)
        del trimmed.tools[-1]
        request = trimmed
    msgs = list(request.messages)
    for k in range(min(len(steers), len(msgs) - 1), 0, -1):
        tail = msgs[-k:]
        if all(
            m.role == mpb.ROLE_USER and m.content == s
            for m, s in zip(tail, steers[:k], strict=True)
        ):
            out = mpb.ChatRequest()
            out.CopyFrom(request)
            del out.messages[-k:]
            return out
    return request


def _check_outcome(out: apb.ExecutorOutcome, end: apb.TurnRecord, step: int) -> None:
    fields = (
        ("text", out.text, end.text),
        ("model_calls", out.model_calls, end.model_calls),
        ("tool_calls", out.tool_calls, end.tool_calls),
        ("prompt_tokens", out.prompt_tokens, end.prompt_tokens),
        ("completion_tokens", out.completion_tokens, end.completion_tokens),
        ("error_kind", out.error_kind, end.error_kind),
        ("error_message", out.error_message, end.error_message),
    )
    for name, got, expected in fields:
        if got != expected:
            raise _Diverged(
                step, f"the turn's outcome differs in {name}", repr(expected), repr(got)
            )


def _summary(req: mpb.ChatRequest) -> str:
    last = req.messages[-1] if req.messages else None
    tail = f", last {mpb.Role.Name(last.role)}: {last.content[:60]!r}" if last else ""
    return f"{len(req.messages)} messages, {len(req.tools)} tools{tail}"


def _diff(expected: Message, got: Message) -> tuple[str, ...]:
    a = text_format.MessageToString(expected, as_utf8=True).splitlines()
    b = text_format.MessageToString(got, as_utf8=True).splitlines()
    lines = list(difflib.unified_diff(a, b, "recorded", "replayed", n=1, lineterm=""))
    if len(lines) > _DIFF_LINES:
        lines = [*lines[:_DIFF_LINES], f"... ({len(lines) - _DIFF_LINES} more diff lines)"]
    return tuple(lines)


__all__ = ["Divergence", "ReplayReport", "TurnResult", "replay"]
