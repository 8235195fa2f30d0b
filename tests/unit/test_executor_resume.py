"""The agent loop resumes a job that carries its turn's recorded steps
(docs/adr/0042-recover13b-resume.md): the calls of the last answer without
a result are answered first, the model is asked only for the next step, and
the steps taken count against the job's limit. The loop is a pure function
of the job and the core's answers, so the core here is the answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from naga.executor import run_turn
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb


@dataclass
class Answers:
    """The core's side: scripted model answers, every call answered ok."""

    replies: list[mpb.ChatMessage]
    asked: list[list[mpb.ChatMessage]] = field(default_factory=list[list[mpb.ChatMessage]])
    called: list[str] = field(default_factory=list[str])

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse:
        self.asked.append(list(request.request.messages))
        message = self.replies.pop(0)
        return apb.ModelCallResponse(response=mpb.ChatResponse(message=message), unlimited=True)

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse:
        self.called.append(request.call_id)
        return apb.ToolCallResponse(ok=True, result_json=f'{{"ran":"{request.call_id}"}}')

    def call_step(
        self, request: apb.ToolStepRequest, *, timeout: float | None = None
    ) -> apb.ToolStepResponse:
        return apb.ToolStepResponse(results=[self.call_tool(c) for c in request.calls])


def _call(call_id: str) -> mpb.ToolCall:
    return mpb.ToolCall(id=call_id, name="fs__read", arguments_json="{}")


def _job(*steps: mpb.ChatMessage, max_steps: int = 8) -> apb.ExecutorJob:
    return apb.ExecutorJob(
        session="s",
        turn_id="t",
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content="rules"),
            mpb.ChatMessage(role=mpb.ROLE_USER, content="earlier"),
            mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, content="earlier answer"),
            mpb.ChatMessage(role=mpb.ROLE_USER, content="do it"),
            *steps,
        ],
        max_steps=max_steps,
    )


ANSWER = mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, content="done")


def _result(call_id: str) -> mpb.ChatMessage:
    return mpb.ChatMessage(role=mpb.ROLE_TOOL, content="recorded", tool_call_id=call_id)


def test_a_fresh_job_asks_the_model_first() -> None:
    core = Answers([ANSWER])
    out = run_turn(_job(), core)
    assert (out.text, out.model_calls, out.tool_calls) == ("done", 1, 0)
    assert core.called == []
    assert [m.content for m in core.asked[0]][-1] == "do it"


def test_the_unanswered_calls_of_the_last_answer_run_first_in_order() -> None:
    step = mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, tool_calls=[_call("a"), _call("b"), _call("c")])
    core = Answers([ANSWER])
    out = run_turn(_job(step, _result("b")), core)
    assert core.called == ["a", "c"]  # b's result is recorded: not run again
    assert len(core.asked) == 1  # the model only for the step after
    tail = core.asked[0][4:]
    assert [(m.role, m.tool_call_id, m.content) for m in tail] == [
        (mpb.ROLE_ASSISTANT, "", ""),
        (mpb.ROLE_TOOL, "a", '{"ran":"a"}'),
        (mpb.ROLE_TOOL, "b", "recorded"),
        (mpb.ROLE_TOOL, "c", '{"ran":"c"}'),
    ]
    assert (out.text, out.model_calls, out.tool_calls) == ("done", 2, 3)


def test_a_step_whose_calls_are_all_answered_goes_on_at_the_model() -> None:
    first = mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, content="looking", tool_calls=[_call("a")])
    core = Answers([ANSWER])
    out = run_turn(_job(first, _result("a")), core)
    assert core.called == []
    assert len(core.asked) == 1
    assert (out.model_calls, out.tool_calls) == (2, 1)


def test_the_steps_taken_count_against_the_limit() -> None:
    first = mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, tool_calls=[_call("a")])
    core = Answers([])
    out = run_turn(_job(first, _result("a"), max_steps=1), core)
    assert core.asked == []  # its one step was taken before the stop
    assert out.error_kind == tpb.TURN_ERROR_KIND_STEPS
    assert "limit of 1 model calls" in out.error_message
