"""``job.create``, the agent's tool for making a scheduled job (R2): the
core answers it itself (naga_core.agent's core tools). The job's creator
is the turn's peer (the owner's turns: the owner), its trust snapshot the
turn's trust, its risk ceiling at most the turn's. A job's own run is
never offered it and is refused it: a job cannot make jobs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Literal

import pydantic

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import job_pb2 as jpb
from naga.v1 import model_pb2 as mpb
from naga_core.agent import CoreToolAnswer, TurnView
from naga_core.scheduler._errors import SchedulerError
from naga_core.scheduler._jobs import MAX_PROMPT_CHARS, Jobs, is_job_session, is_wechat_peer

NAME = "job.create"
RISK = Risk.R2
SPEC = mpb.ToolSpec(
    name=NAME.replace(".", "__"),
    description=(
        "Create a scheduled job: at each time of a cron schedule, the prompt is run as a "
        "message in the job's own session"
    ),
    parameters_json_schema=json.dumps(
        {
            "type": "object",
            "properties": {
                "cron": {"type": "string", "description": "five fields, e.g. '0 7 * * *'"},
                "timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris"},
                "prompt": {"type": "string", "description": "what to do at each run"},
                "misfire": {"type": "string", "enum": ["once", "skip"]},
            },
            "required": ["cron", "prompt"],
        },
        separators=(",", ":"),
    ),
)


class _Args(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    cron: str = pydantic.Field(min_length=1, max_length=120)
    timezone: str = pydantic.Field(default="UTC", min_length=1, max_length=64)
    prompt: str = pydantic.Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    misfire: Literal["once", "skip"] = "once"


class JobCreateTool:
    def __init__(
        self,
        jobs: Jobs,
        committed: Callable[[], Awaitable[None]],
        upcoming: Callable[[jpb.Job], list[int]],
    ) -> None:
        self._jobs = jobs
        self._committed = committed
        self._upcoming = upcoming

    @property
    def name(self) -> str:
        return NAME

    @property
    def risk(self) -> Risk:
        return RISK

    @property
    def spec(self) -> mpb.ToolSpec:
        return SPEC

    def refusal(self, turn: TurnView) -> str | None:
        if is_job_session(turn.session):
            return f"{NAME}: a scheduled job's own run cannot create jobs"
        return None

    async def call(self, turn: TurnView, arguments_json: str) -> CoreToolAnswer:
        refused = self.refusal(turn)
        if refused is not None:
            return CoreToolAnswer(ok=False, error=refused)
        try:
            args = _Args.model_validate_json(arguments_json or "{}")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return CoreToolAnswer(ok=False, error=f"{NAME}: {problems}")
        spec = jpb.JobSpec(
            cron=args.cron,
            tz=args.timezone,
            prompt=args.prompt,
            channel=jpb.JOB_CHANNEL_WEBCHAT,
            misfire=jpb.MISFIRE_POLICY_SKIP if args.misfire == "skip" else jpb.MISFIRE_POLICY_ONCE,
        )
        if is_wechat_peer(turn.peer):
            # Made in a WeChat conversation: its runs' replies go back there.
            spec.channel, spec.deliver_to = jpb.JOB_CHANNEL_WECHAT, turn.peer
        owner = turn.trust is TrustLevel.OWNER
        try:
            job, seq = self._jobs.add(
                spec, creator="" if owner else turn.peer, trust=turn.trust, risk=turn.risk
            )
        except SchedulerError as exc:
            return CoreToolAnswer(ok=False, error=f"{NAME}: {exc}")
        await self._committed()
        result = {
            "id": job.id,
            "cron": job.cron,
            "timezone": job.tz,
            "session": job.session,
            "risk_ceiling": f"R{job.risk_ceiling}",
            "delivered_to": job.deliver_to or "its own session (the console)",
            "next_fires_unix": [n // 1_000_000_000 for n in self._upcoming(job)],
            "seq": seq,
        }
        return CoreToolAnswer(ok=True, result_json=json.dumps(result))


__all__ = ["NAME", "RISK", "SPEC", "JobCreateTool"]
