"""A sentence to a job spec with one model call (docs/design/scheduler.md,
"Natural language").

The request declares one tool, ``schedule``, and forces the model to call
it (tool_choice NAMED), so the answer is structured output: JSON
arguments holding the cron expression, the zone, the prompt to run and
the channel. The arguments are validated here, at the boundary, with
pydantic, then as a schedule (cronsim, zoneinfo): a model answer that is
not a valid schedule is :class:`ScheduleNotUnderstood`, saying what was
wrong, and nothing is saved. Nothing else is asked: no retry, no second
call; the owner sees the result and says yes before it is a job.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Literal

import pydantic

from naga.v1 import agent_pb2 as apb
from naga.v1 import job_pb2 as jpb
from naga.v1 import model_pb2 as mpb
from naga_core.scheduler._errors import InvalidSchedule, ScheduleNotUnderstood
from naga_core.scheduler._jobs import MAX_PROMPT_CHARS, MAX_SOURCE_CHARS, checked_spec

TOOL = "schedule"
MAX_TOKENS = 200

#: The schema the model's arguments must follow (a grammar, where the
#: provider turns a forced tool's schema into one: llama.cpp does).
SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "cron": {
            "type": "string",
            "description": "five-field cron: minute hour day-of-month month day-of-week",
        },
        "timezone": {"type": "string", "description": "IANA time zone name"},
        "prompt": {"type": "string", "description": "the task to do at each run"},
        "channel": {"type": "string", "enum": ["webchat"]},
    },
    "required": ["cron", "timezone", "prompt", "channel"],
}

SYSTEM = """You turn a request for a recurring task into a schedule by calling the \
schedule tool once.
cron is five fields: minute hour day-of-month month day-of-week (24-hour clock).
Examples:
"every morning at seven" -> cron "0 7 * * *"
"every day at 18:30" -> cron "30 18 * * *"
"every Monday at 9am" -> cron "0 9 * * 1"
"on weekdays at 8:15" -> cron "15 8 * * 1-5"
"every hour" -> cron "0 * * * *"
"on the first of every month at noon" -> cron "0 12 1 * *"
timezone: the IANA name of a zone the request names, else {tz}.
prompt: what to do at each run, as an instruction ("Send me a digest of today's tech news").
channel: "webchat"."""


class _Answer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    cron: str = pydantic.Field(min_length=1, max_length=120)
    timezone: str = pydantic.Field(min_length=1, max_length=64)
    prompt: str = pydantic.Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    channel: Literal["webchat"] = "webchat"


def request_for(text: str, default_tz: str) -> mpb.ChatRequest:
    spec = mpb.ToolSpec(
        name=TOOL,
        description="Save the schedule of the requested recurring task",
        parameters_json_schema=json.dumps(SCHEMA, separators=(",", ":")),
    )
    return mpb.ChatRequest(
        messages=[
            mpb.ChatMessage(role=mpb.ROLE_SYSTEM, content=SYSTEM.replace("{tz}", default_tz)),
            mpb.ChatMessage(role=mpb.ROLE_USER, content=text),
        ],
        tools=[spec],
        tool_choice=mpb.ToolChoice(mode=mpb.TOOL_CHOICE_MODE_NAMED, name=TOOL),
        max_tokens=MAX_TOKENS,
        temperature=0.0,
    )


def spec_from_reply(reply: apb.ProviderReply, text: str) -> jpb.JobSpec:
    """The job spec of the model's answer; ScheduleNotUnderstood if it is none."""
    if reply.HasField("error"):
        raise ScheduleNotUnderstood(f"the model could not be asked: {reply.error.message}")
    calls = [c for c in reply.response.message.tool_calls if c.name == TOOL]
    if len(calls) != 1:
        said = reply.response.message.content.strip()[:200]
        raise ScheduleNotUnderstood(
            f"the model did not answer with one schedule (it said: {said!r}); "
            "say it another way, or use naga job add --cron '...' --prompt '...'"
        )
    try:
        answer = _Answer.model_validate_json(calls[0].arguments_json or "{}")
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()
        )
        raise ScheduleNotUnderstood(
            f"the model's answer is not a schedule ({problems}): {calls[0].arguments_json[:300]!r}"
        ) from None
    spec = jpb.JobSpec(
        cron=answer.cron,
        tz=answer.timezone,
        prompt=answer.prompt,
        channel=jpb.JOB_CHANNEL_WEBCHAT,
        misfire=jpb.MISFIRE_POLICY_ONCE,
        source=text[:MAX_SOURCE_CHARS],
    )
    try:
        checked, _ = checked_spec(spec)
    except InvalidSchedule as exc:
        raise ScheduleNotUnderstood(f"the model's answer is not a valid schedule: {exc}") from None
    return checked


Complete = Callable[[mpb.ChatRequest], Awaitable[apb.ProviderReply]]


async def compile_sentence(complete: Complete, text: str, default_tz: str) -> jpb.JobSpec:
    """One model call: the sentence's job spec, validated."""
    return spec_from_reply(await complete(request_for(text, default_tz)), text)


__all__ = ["SCHEMA", "TOOL", "compile_sentence", "request_for", "spec_from_reply"]
