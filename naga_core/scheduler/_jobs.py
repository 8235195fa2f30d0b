"""Jobs as kernel state: family ``job``, one registration per change
(docs/design/scheduler.md, "Jobs are effects").

Creating, pausing, resuming and removing a job each register the job's
whole new value (a serialized ``naga.v1.Job``; None to remove), so the
kernel derives the inverse and ``naga rollback`` removes a job made after
its point, restores one removed after it, and brings back its paused or
running state; rolling the rollback back brings them forward again.
"""

from __future__ import annotations

import secrets
import unicodedata
from collections.abc import Callable
from typing import Protocol, TypeVar

from google.protobuf.message import DecodeError

from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import job_pb2 as jpb
from naga_core.kernel import Kernel
from naga_core.scheduler._cron import Schedule
from naga_core.scheduler._errors import InvalidSchedule, JobNotFound, JobRefusal, JobRefused

T = TypeVar("T")

JOB_FAMILY = "job"
MAX_PROMPT_CHARS = 4000
MAX_SOURCE_CHARS = 1000
#: A job's turns run in this session (the console lists it).
SESSION_PREFIX = "job."


class Core(Protocol):
    @property
    def kernel(self) -> Kernel: ...
    def write(self, fn: Callable[[], T]) -> T: ...


def session_of(job_id: str) -> str:
    return SESSION_PREFIX + job_id


def is_job_session(session: str) -> bool:
    """Whether a turn of ``session`` is a job's own run (which makes no jobs)."""
    return session.startswith(SESSION_PREFIX)


def _printable(text: str, what: str, limit: int, *, lines: bool) -> str:
    text = text.strip()
    if not text or len(text) > limit:
        raise InvalidSchedule(f"{what} must be 1..{limit} characters")
    for ch in text:
        if ch in "\n\t" and lines:
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise InvalidSchedule(f"{what} holds a control character ({ch!r})")
    return text


def is_wechat_peer(peer: str) -> bool:
    """``wechat:<bot id>/<user id>``: one user of one binding."""
    bot, sep, user = peer.removeprefix("wechat:").partition("/")
    return peer.startswith("wechat:") and bool(sep and bot and user) and len(peer) <= 600


def checked_spec(spec: jpb.JobSpec) -> tuple[jpb.JobSpec, Schedule]:
    """``spec`` with defaults filled in, and its schedule; InvalidSchedule
    naming the field that is wrong."""
    out = jpb.JobSpec()
    out.CopyFrom(spec)
    out.tz = out.tz or "UTC"
    schedule = Schedule.parse(out.cron, out.tz)
    out.cron = schedule.cron
    out.prompt = _printable(out.prompt, "the prompt", MAX_PROMPT_CHARS, lines=True)
    if out.source:
        out.source = _printable(out.source, "the source sentence", MAX_SOURCE_CHARS, lines=False)
    if out.misfire not in (jpb.MISFIRE_POLICY_ONCE, jpb.MISFIRE_POLICY_SKIP):
        if out.misfire != jpb.MISFIRE_POLICY_UNSPECIFIED:
            raise InvalidSchedule(f"misfire policy {out.misfire} is not once or skip")
        out.misfire = jpb.MISFIRE_POLICY_ONCE
    if out.channel == jpb.JOB_CHANNEL_WECHAT:
        if not is_wechat_peer(out.deliver_to):
            raise InvalidSchedule(
                f"a WeChat job delivers to wechat:<bot id>/<user id>, not {out.deliver_to!r}"
            )
    elif out.channel not in (jpb.JOB_CHANNEL_UNSPECIFIED, jpb.JOB_CHANNEL_WEBCHAT):
        raise InvalidSchedule(
            f"channel {out.channel} is not one a job can deliver to (webchat, wechat)"
        )
    else:
        if out.deliver_to:
            raise InvalidSchedule("deliver_to is for a WeChat job only")
        out.channel = jpb.JOB_CHANNEL_WEBCHAT
    if out.HasField("risk_ceiling") and out.risk_ceiling > int(Risk.R4):
        raise InvalidSchedule(f"risk ceiling {out.risk_ceiling} is not R0..R4")
    return out, schedule


def anchor_of(job: jpb.Job, last_fire_ns: int) -> int:
    """What the next fire is computed from: the newest recorded fire, the
    creation, or the last resume, whichever is latest."""
    return max(last_fire_ns, job.created_ns, job.resumed_ns)


def parse_job(job_id: str, raw: object) -> jpb.Job | None:
    if not isinstance(raw, bytes):
        return None
    try:
        job = jpb.Job.FromString(raw)
    except DecodeError:
        return None
    return job if job.id == job_id else None


class Jobs:
    """Read and change the jobs through the kernel. Writes are staged
    (``core.write``): the caller settles them before it answers."""

    def __init__(self, core: Core, clock: Callable[[], int]) -> None:
        self._core = core
        self._clock = clock
        self._read: tuple[int, list[jpb.Job]] = (-1, [])

    def all(self) -> list[jpb.Job]:
        """Every job, oldest first (read again only when the family moved:
        a write, a rollback, an abort). Callers must not change them."""
        version = self._core.kernel.version(JOB_FAMILY)
        if self._read[0] != version:
            found = self._core.kernel.state.family(JOB_FAMILY)
            parsed = [parse_job(k, v) for k, v in found.items()]
            jobs = sorted((j for j in parsed if j is not None), key=lambda j: (j.created_ns, j.id))
            self._read = (version, jobs)
        return list(self._read[1])

    def get(self, job_id: str) -> jpb.Job:
        raw = self._core.kernel.state.get((JOB_FAMILY, job_id))
        job = parse_job(job_id, raw) if raw is not None else None
        if job is None:
            raise JobNotFound(f"no job {job_id!r} (see naga job list)")
        return job

    def add(
        self, spec: jpb.JobSpec, *, creator: str, trust: TrustLevel, risk: Risk
    ) -> tuple[jpb.Job, int]:
        """A new job from ``spec`` made by ``creator`` ("" for the owner) at
        ``trust`` whose turns may use tools up to ``risk``."""
        spec, _ = checked_spec(spec)
        ceiling = risk
        if spec.HasField("risk_ceiling"):
            if spec.risk_ceiling > int(risk):
                raise JobRefused(
                    f"a risk ceiling of R{spec.risk_ceiling} is above the creator's "
                    f"({risk.name}): a job never has more than who made it",
                    JobRefusal.ABOVE_CREATOR,
                )
            ceiling = Risk(spec.risk_ceiling)
        job_id = "j-" + secrets.token_hex(6)
        job = jpb.Job(
            id=job_id,
            cron=spec.cron,
            tz=spec.tz,
            prompt=spec.prompt,
            channel=spec.channel,
            session=session_of(job_id),
            misfire=spec.misfire,
            creator=creator,
            creator_trust=trust.label,
            risk_ceiling=int(ceiling),
            created_ns=self._clock(),
            source=spec.source,
            deliver_to=spec.deliver_to,
        )
        who = creator or "the owner"
        seq = self._put(job, f"job {job_id} created by {who}: '{job.cron}' ({job.tz})")
        return job, seq

    def set_paused(self, job_id: str, paused: bool, reason: str = "") -> tuple[jpb.Job, int]:
        job = self.get(job_id)
        if job.paused == paused:
            return job, 0
        job.paused = paused
        job.paused_reason = reason if paused else ""
        if not paused:
            job.resumed_ns = self._clock()
        what = f"job {job_id} paused: {reason}" if paused else f"job {job_id} resumed"
        return job, self._put(job, what)

    def remove(self, job_id: str) -> tuple[jpb.Job, int]:
        job = self.get(job_id)
        seq = self._core.write(
            lambda: self._core.kernel.register(
                JOB_FAMILY, job_id, None, description=f"job {job_id} removed"
            )
        )
        return job, seq

    def _put(self, job: jpb.Job, description: str) -> int:
        value = job.SerializeToString(deterministic=True)
        return self._core.write(
            lambda: self._core.kernel.register(JOB_FAMILY, job.id, value, description=description)
        )


__all__ = [
    "JOB_FAMILY",
    "SESSION_PREFIX",
    "Jobs",
    "anchor_of",
    "checked_spec",
    "is_job_session",
    "parse_job",
    "session_of",
]
