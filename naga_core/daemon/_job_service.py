"""``naga.v1.JobService``: the owner's scheduled jobs (proto/naga/v1/job.proto,
docs/design/scheduler.md). Every call is the owner's (_policy.POLICY)."""

from __future__ import annotations

import re

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import job_pb2 as jpb
from naga.v1 import model_pb2 as mpb
from naga_core.agent import AgentWorkers
from naga_core.daemon._auth import Principal
from naga_core.daemon._bridge import AsyncUnary, Method, Unary
from naga_core.daemon._errors import RequestRefused
from naga_core.scheduler import (
    InvalidSchedule,
    JobRefusal,
    JobRefused,
    ScheduleNotUnderstood,
    Scheduler,
    compile_sentence,
    zone,
)
from naga_core.wechat import WechatChannel

SERVICE = "naga.v1.JobService"
_ID = re.compile(r"j-[0-9a-f]{12}")
MAX_SENTENCE_CHARS = 1000
#: The one model call of a compilation.
COMPILE_TIMEOUT_S = 120.0


def check_id(req: jpb.JobIdRequest) -> None:
    if not _ID.fullmatch(req.id):
        raise RequestRefused.invalid(f"id: {req.id!r} is not a job id (like j-1f2e3d4c5b6a)")


def check_compile(req: jpb.CompileJobRequest) -> None:
    if not req.text.strip() or len(req.text) > MAX_SENTENCE_CHARS:
        raise RequestRefused.invalid(f"text: must be 1..{MAX_SENTENCE_CHARS} characters")
    if req.default_tz:
        try:
            zone(req.default_tz)
        except InvalidSchedule as exc:
            raise RequestRefused.invalid(f"default_tz: {exc}") from None


def _call(replies: list[apb.ProviderReply]) -> str:
    """The one model call, for the owner's history: who answered, its tokens."""
    if not replies or replies[0].HasField("error"):
        return ""
    r = replies[0].response
    tokens = r.usage.prompt_tokens + r.usage.completion_tokens
    return f" (one call to {r.provider or 'the model'}, {tokens} tokens)"


class JobServicer:
    def __init__(self, scheduler: Scheduler, workers: AgentWorkers, wechat: WechatChannel) -> None:
        self._scheduler = scheduler
        self._workers = workers
        self._wechat = wechat

    def methods(self) -> list[Method]:
        return [
            AsyncUnary("Compile", jpb.CompileJobRequest, self.compile, check_compile),
            AsyncUnary("Add", jpb.AddJobRequest, self.add),
            Unary("List", jpb.ListJobsRequest, self.list),
            Unary("Get", jpb.JobIdRequest, self.get, check_id),
            Unary("Pause", jpb.JobIdRequest, self.pause, check_id),
            Unary("Resume", jpb.JobIdRequest, self.resume, check_id),
            Unary("Remove", jpb.JobIdRequest, self.remove, check_id),
            AsyncUnary("Run", jpb.JobIdRequest, self.run, check_id),
        ]

    async def compile(self, _p: Principal, req: jpb.CompileJobRequest) -> jpb.CompileJobResponse:
        replies: list[apb.ProviderReply] = []

        async def complete(request: mpb.ChatRequest) -> apb.ProviderReply:
            reply = await self._workers.complete(request, COMPILE_TIMEOUT_S)
            replies.append(reply)
            return reply

        text = req.text.strip()
        try:
            spec = await compile_sentence(complete, text, req.default_tz or "UTC")
        except ScheduleNotUnderstood as exc:
            await self._scheduler.note(f"job compile of {text[:200]!r}{_call(replies)}: {exc}")
            raise
        await self._scheduler.note(
            f"job compile of {text[:200]!r}{_call(replies)}: '{spec.cron}' in {spec.tz} "
            "(not saved until the owner adds it)"
        )
        probe = jpb.Job(cron=spec.cron, tz=spec.tz)
        return jpb.CompileJobResponse(spec=spec, next_ns=self._scheduler.upcoming(probe))

    async def add(self, _p: Principal, req: jpb.AddJobRequest) -> jpb.AddJobResponse:
        spec = req.spec
        if spec.channel == jpb.JOB_CHANNEL_WECHAT:
            # Only a peer WeChat can reach: a bound bot, its owner or a user
            # who wrote to it (the shorthands name a binding's owner).
            spec = jpb.JobSpec()
            spec.CopyFrom(req.spec)
            spec.deliver_to = self._wechat.delivery_peer(req.spec.deliver_to)
        job, seq = self._scheduler.jobs.add(spec, creator="", trust=TrustLevel.OWNER, risk=Risk.R4)
        await self._scheduler.committed()
        return jpb.AddJobResponse(job=job, seq=seq, next_ns=self._scheduler.upcoming(job))

    def list(self, _p: Principal, _req: jpb.ListJobsRequest) -> jpb.ListJobsResponse:
        s = self._scheduler
        return jpb.ListJobsResponse(jobs=[s.view(j) for j in s.jobs.all()])

    def get(self, _p: Principal, req: jpb.JobIdRequest) -> jpb.GetJobResponse:
        s = self._scheduler
        return jpb.GetJobResponse(view=s.view(s.jobs.get(req.id)), recent=s.recent(req.id))

    def pause(self, _p: Principal, req: jpb.JobIdRequest) -> jpb.JobChangeResponse:
        job, seq = self._scheduler.set_paused(req.id, True, "paused by the owner")
        return jpb.JobChangeResponse(job=job, seq=seq)

    def resume(self, _p: Principal, req: jpb.JobIdRequest) -> jpb.JobChangeResponse:
        job, seq = self._scheduler.set_paused(req.id, False)
        return jpb.JobChangeResponse(job=job, seq=seq)

    def remove(self, _p: Principal, req: jpb.JobIdRequest) -> jpb.JobChangeResponse:
        job, seq = self._scheduler.remove(req.id)
        return jpb.JobChangeResponse(job=job, seq=seq)

    async def run(self, _p: Principal, req: jpb.JobIdRequest) -> jpb.RunJobResponse:
        fired = await self._scheduler.run_now(req.id)
        if fired is None:
            job = self._scheduler.jobs.get(req.id)
            raise JobRefused(f"job {req.id} was not run: {job.paused_reason}", JobRefusal.STATE)
        fire, seq = fired
        return jpb.RunJobResponse(fire=fire, fire_seq=seq)


__all__ = ["SERVICE", "JobServicer", "check_compile", "check_id"]
