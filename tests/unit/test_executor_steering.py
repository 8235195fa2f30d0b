"""The agent loop and the core's ``steering_pending``: an answer with no
tool call is the turn's last unless steering came while it was made; then
the model is asked once more, even at the step limit (docs/adr/0059). The
loop is a pure function of the job and the core's answers, so the core
here is the answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from naga.executor import run_turn
from naga.v1 import agent_pb2 as apb
from naga.v1 import model_pb2 as mpb
from naga.v1 import turn_pb2 as tpb


@dataclass
class Answers:
    """Scripted answers: (text, whether steering came while it was made)."""

    replies: list[tuple[str, bool]]
    asked: list[list[str]] = field(default_factory=list[list[str]])

    def complete(
        self, request: apb.ModelCallRequest, *, timeout: float | None = None
    ) -> apb.ModelCallResponse:
        self.asked.append([m.content for m in request.request.messages])
        text, pending = self.replies.pop(0)
        message = mpb.ChatMessage(role=mpb.ROLE_ASSISTANT, content=text)
        return apb.ModelCallResponse(
            response=mpb.ChatResponse(message=message), unlimited=True, steering_pending=pending
        )

    def call_tool(
        self, request: apb.ToolCallRequest, *, timeout: float | None = None
    ) -> apb.ToolCallResponse:
        raise AssertionError("no tool is called")

    def call_step(
        self, request: apb.ToolStepRequest, *, timeout: float | None = None
    ) -> apb.ToolStepResponse:
        raise AssertionError("no tool is called")


def _job(max_steps: int) -> apb.ExecutorJob:
    return apb.ExecutorJob(
        session="s",
        turn_id="t",
        messages=[mpb.ChatMessage(role=mpb.ROLE_USER, content="do it")],
        max_steps=max_steps,
    )


def test_an_answer_made_while_steering_came_is_followed_by_one_more_call() -> None:
    core = Answers([("first", True), ("second", False)])
    out = run_turn(_job(8), core)
    assert (out.text, out.model_calls, out.error_kind) == ("second", 2, 0)
    # The earlier answer is in the next request (the core appends the steering).
    assert core.asked[1] == ["do it", "first"]


def test_steering_at_the_step_limit_still_gets_its_call() -> None:
    core = Answers([("first", True), ("second", True), ("third", False)])
    out = run_turn(_job(1), core)
    assert (out.text, out.model_calls) == ("third", 3)
    assert out.error_kind == tpb.TURN_ERROR_KIND_UNSPECIFIED
