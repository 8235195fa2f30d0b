"""The agent loop of one turn. Each step is one RPC to the core and at most
a few more: everything heavy (the prompt's history, the tool list) arrives
in the job, so the per-turn work here is building requests and reading
answers.

It is a pure function of the job and the core's answers, and it lives here
(not with the executor process, ``naga_plugins.executor``) because two
processes run it: the sandboxed executor, and the core's replay
(``naga_core.replay``), which re-runs recorded turns against their
recording and needs the very same loop."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from naga.constants import TOOL_REPEATED_FAILURES_MAX, TOOL_STEP_MAX_CALLS
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb

#: Kept from the turn's deadline for the executor's own answer to reach the
#: core before the core gives up on it.
_ANSWER_MARGIN_S = 0.5
#: A turn run without a deadline (a replay against recorded answers).
_UNBOUNDED_MS = 600_000


class Deadline:
    """The turn's deadline as the core's Invoke gave it (its share of the
    turn, docs/adr/0009-turn-deadline-scheme.md): each call to the core
    waits at most what is left of it."""

    def __init__(self, at: float) -> None:
        self._at = at

    @classmethod
    def after_ms(cls, ms: int) -> Deadline:
        return cls(time.monotonic() + ms / 1000 - _ANSWER_MARGIN_S)

    def left_s(self) -> float:
        return max(0.001, self._at - time.monotonic())


class CoreCalls(Protocol):
    """The calls a turn makes of the core: a connected naga.sdk Client,
    or a recording's answers (naga_core.replay)."""

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse: ...

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse: ...

    def call_step(
        self, request: apb.ToolStepRequest, *, timeout: float | None = None
    ) -> apb.ToolStepResponse: ...


def tool_name(model_name: str) -> str:
    """The tool a model's call names: ToolSpec names write '.' as '__'
    (providers allow letters, digits, '_' and '-' only)."""
    return model_name.replace("__", ".")


def run_turn(
    job: apb.ExecutorJob, client: CoreCalls, deadline: Deadline | None = None
) -> apb.ExecutorOutcome:
    """Loop until a final answer, the step limit, the budget or a failure.
    An answer with no tool call is final unless the core says steering
    arrived while it was made (``steering_pending``): the model is then
    asked again, with that answer and the steering in view.

    A job whose messages go on after the user's message is a turn resumed
    after a stop of the core: they are its recorded steps (each model
    answer, each tool result), counted as taken, and the calls of the last
    answer that have no result yet are answered first."""
    out = apb.ExecutorOutcome()
    deadline = deadline or Deadline.after_ms(_UNBOUNDED_MS)
    messages = list(job.messages)
    taken = _resumed(messages, out)
    unanswered = _unanswered(messages)
    if unanswered:
        results = _step(job, client, unanswered, deadline)
        for call, result in zip(unanswered, results, strict=True):
            out.tool_calls += 1
            messages.append(_result_message(call, result))
        _in_call_order(messages)
    # (model's tool name, arguments) -> failures this turn: a model that
    # repeats a failing call unchanged will not do better the next time.
    failed: dict[tuple[str, str], int] = {}
    steps, limit = 0, max(0, job.max_steps - taken)
    while steps < limit:
        steps += 1
        request = mpb.ChatRequest(messages=messages, tools=job.tools, max_tokens=job.max_tokens)
        answer = client.complete(
            apb.ModelCallRequest(session=job.session, turn_id=job.turn_id, request=request),
            timeout=deadline.left_s(),
        )
        out.model_calls += 1
        if answer.budget_exhausted:
            return _failed(out, tpb.TURN_ERROR_KIND_BUDGET, answer.message)
        if answer.HasField("error"):
            return _failed(out, tpb.TURN_ERROR_KIND_MODEL, answer.error.message)
        response = answer.response
        out.prompt_tokens += response.usage.prompt_tokens
        out.completion_tokens += response.usage.completion_tokens
        message = response.message
        out.text = message.content
        messages.append(message)
        if not message.tool_calls:
            if not answer.steering_pending:
                return out
            # Steering came while the model wrote this answer: one more call
            # sees it (after this answer), even past the step limit (each
            # one is a message of the user's, not a loop of the model's).
            limit = max(limit, steps + 1)
            continue
        for call, result in zip(
            message.tool_calls, _step(job, client, message.tool_calls, deadline), strict=True
        ):
            out.tool_calls += 1
            messages.append(_result_message(call, result))
            if not result.ok:
                key = (call.name, call.arguments_json)
                failed[key] = failed.get(key, 0) + 1
                if failed[key] >= TOOL_REPEATED_FAILURES_MAX:
                    return _failed(
                        out,
                        tpb.TURN_ERROR_KIND_MODEL,
                        f"the model made the same failing call {failed[key]} times "
                        f"({tool_name(call.name)} {call.arguments_json}): {result.error}",
                    )
    return _failed(
        out,
        tpb.TURN_ERROR_KIND_STEPS,
        f"the turn reached its limit of {job.max_steps} model calls (agent.max_steps) "
        "without a final answer",
    )


def _result_message(call: mpb.ToolCall, result: apb.ToolCallResponse) -> mpb.ChatMessage:
    return mpb.ChatMessage(
        role=mpb.ROLE_TOOL,
        content=result.result_json if result.ok else result.error,
        tool_call_id=call.id,
        tool_error=not result.ok,
    )


def _own_start(messages: Sequence[mpb.ChatMessage]) -> int:
    """The index after the user's message (the last user message: steering
    is not in the job), where the turn's own steps begin."""
    users = [i for i, m in enumerate(messages) if m.role == mpb.ROLE_USER]
    return users[-1] + 1 if users else len(messages)


def _resumed(messages: Sequence[mpb.ChatMessage], out: apb.ExecutorOutcome) -> int:
    """The model steps a resumed job had taken (counted in ``out``)."""
    own = messages[_own_start(messages) :]
    taken = sum(m.role == mpb.ROLE_ASSISTANT for m in own)
    out.model_calls += taken
    out.tool_calls += sum(m.role == mpb.ROLE_TOOL for m in own)
    for m in own:
        if m.role == mpb.ROLE_ASSISTANT:
            out.text = m.content
    return taken


def _last_answer(messages: Sequence[mpb.ChatMessage]) -> int:
    """The index of the turn's last model answer; -1 if it has none yet."""
    start = _own_start(messages)
    return max(
        (i for i in range(start, len(messages)) if messages[i].role == mpb.ROLE_ASSISTANT),
        default=-1,
    )


def _unanswered(messages: Sequence[mpb.ChatMessage]) -> list[mpb.ToolCall]:
    """The calls of the turn's last model answer that have no result."""
    last = _last_answer(messages)
    if last < 0:
        return []
    answered = {m.tool_call_id for m in messages[last + 1 :] if m.role == mpb.ROLE_TOOL}
    return [c for c in messages[last].tool_calls if c.id not in answered]


def _in_call_order(messages: list[mpb.ChatMessage]) -> None:
    """The results after the last answer in the order of its calls (as a
    step run whole gives them)."""
    last = _last_answer(messages)
    order = {c.id: i for i, c in enumerate(messages[last].tool_calls)}
    tail = sorted(messages[last + 1 :], key=lambda m: order.get(m.tool_call_id, len(order)))
    messages[last + 1 :] = tail


def _step(
    job: apb.ExecutorJob,
    client: CoreCalls,
    calls: Sequence[mpb.ToolCall],
    deadline: Deadline,
) -> list[apb.ToolCallResponse]:
    """The answers to one model step's tool calls, in its order. A step of
    several goes to the core as one CallStep (at most TOOL_STEP_MAX_CALLS a
    request), so the core may run independent reads together."""
    requests = [
        apb.ToolCallRequest(
            session=job.session,
            turn_id=job.turn_id,
            call_id=call.id,
            tool=tool_name(call.name),
            arguments_json=call.arguments_json,
        )
        for call in calls
    ]
    if len(requests) == 1:
        return [client.call_tool(requests[0], timeout=deadline.left_s())]
    out: list[apb.ToolCallResponse] = []
    for at in range(0, len(requests), TOOL_STEP_MAX_CALLS):
        step = apb.ToolStepRequest(
            session=job.session,
            turn_id=job.turn_id,
            calls=requests[at : at + TOOL_STEP_MAX_CALLS],
        )
        out.extend(client.call_step(step, timeout=deadline.left_s()).results)
    return out


def _failed(
    out: apb.ExecutorOutcome, kind: tpb.TurnErrorKind.ValueType, message: str
) -> apb.ExecutorOutcome:
    out.error_kind = kind
    out.error_message = message
    return out


__all__ = ["CoreCalls", "Deadline", "run_turn", "tool_name"]
