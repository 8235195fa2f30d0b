"""A fire's turn through the core's agent: a turn in the job's own session
(``job.<id>``, a WebChat session the console lists), under the fire's key,
as the job's creator at the job's trust snapshot and risk ceiling."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import job_pb2 as jpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import Agent
from naga_core.errors import NagaError

log = logging.getLogger("naga.scheduler")

_TO_PB = {
    TrustLevel.UNTRUSTED: cpb.TRUST_LEVEL_UNTRUSTED,
    TrustLevel.GUEST: cpb.TRUST_LEVEL_GUEST,
    TrustLevel.KNOWN: cpb.TRUST_LEVEL_KNOWN,
    TrustLevel.OWNER: cpb.TRUST_LEVEL_OWNER,
}


@dataclass(frozen=True, slots=True)
class _JobCaller:
    """The scheduler starts turns with the core's authority; the turn's
    trust is the job's (never above its creator's now: checked at fire)."""

    owner: bool = True
    grant: None = None


def turn_text(job: jpb.Job, fire: jpb.JobFire) -> str:
    """The turn's message: the job's prompt, said to be a scheduled run."""
    at = datetime.fromtimestamp(fire.scheduled_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    if fire.manual:
        head = f"[scheduled job {job.id}, run now by the owner]"
    elif fire.catch_up:
        head = (
            f"[scheduled job {job.id}, a catch-up run for {fire.missed} fire(s) missed while "
            f"Naga was down; the latest was due {at}]"
        )
    else:
        head = f"[scheduled job {job.id}, due {at}]"
    return f"{head}\n{job.prompt}"


#: Sends a run's reply to the job's channel (a WeChat job: its user).
Deliver = Callable[[jpb.Job, jpb.JobFire, str], Awaitable[None]]


class AgentRunner:
    def __init__(self, agent: Agent, *, deliver: Deliver | None = None) -> None:
        self._agent = agent
        self._deliver = deliver

    async def run(self, job: jpb.Job, fire: jpb.JobFire, trust: TrustLevel) -> None:
        req = tpb.RunTurnRequest(
            session=job.session,
            text=turn_text(job, fire),
            idempotency_key=fire.key,
            peer=job.creator,
            trust=_TO_PB[trust],
            # A run still going when the next fires: the next waits its turn.
            mode=tpb.QUEUE_MODE_FOLLOWUP,
            risk_ceiling=job.risk_ceiling,
        )
        reply = ""
        try:
            cursor = self._agent.start(_JobCaller(), req)
            while True:
                batch = await cursor.next()
                if batch is None:
                    break
                for event in batch:
                    if event.HasField("error"):
                        log.warning("job %s run %s: %s", job.id, fire.key, event.error.message)
                        reply = f"(scheduled job {job.id} could not run: {event.error.message})"
                    elif event.HasField("final"):
                        reply = event.final.text
        except NagaError as exc:
            log.warning("job %s run %s could not start: %s", job.id, fire.key, exc)
            reply = f"(scheduled job {job.id} could not start: {exc})"
        if reply and job.channel == jpb.JOB_CHANNEL_WECHAT and self._deliver is not None:
            # Its user is told what ran, and what failed (never silence).
            await self._deliver(job, fire, reply)


__all__ = ["AgentRunner", "turn_text"]
