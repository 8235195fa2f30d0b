"""Scheduled jobs (SPEC section 4, "Scheduled jobs"; docs/design/scheduler.md):
jobs as kernel state (a rollback removes or restores them), a cron
schedule in an IANA zone (cronsim), the scheduler task that fires them on
trio's clock with misfire policies and a trust check at every fire, the
one-call compilation of a sentence into a job, and the agent's
``job.create`` tool."""

from naga_core.scheduler._compile import SCHEMA as COMPILE_SCHEMA
from naga_core.scheduler._compile import compile_sentence, request_for, spec_from_reply
from naga_core.scheduler._cron import Schedule, zone
from naga_core.scheduler._errors import (
    InvalidSchedule,
    JobNotFound,
    JobRefusal,
    JobRefused,
    ScheduleNotUnderstood,
    SchedulerError,
)
from naga_core.scheduler._fires import FIRE_KIND, FireLog, fire_key, read_fires
from naga_core.scheduler._jobs import (
    JOB_FAMILY,
    SESSION_PREFIX,
    Jobs,
    checked_spec,
    is_job_session,
    session_of,
)
from naga_core.scheduler._runner import AgentRunner, turn_text
from naga_core.scheduler._scheduler import (
    Runner,
    Scheduler,
    SchedulerConfig,
    creator_trust,
    snapshot_of,
)
from naga_core.scheduler._tool import JobCreateTool

__all__ = [
    "COMPILE_SCHEMA",
    "FIRE_KIND",
    "JOB_FAMILY",
    "SESSION_PREFIX",
    "AgentRunner",
    "FireLog",
    "InvalidSchedule",
    "JobCreateTool",
    "JobNotFound",
    "JobRefusal",
    "JobRefused",
    "Jobs",
    "Runner",
    "Schedule",
    "ScheduleNotUnderstood",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerError",
    "checked_spec",
    "compile_sentence",
    "creator_trust",
    "fire_key",
    "is_job_session",
    "read_fires",
    "request_for",
    "session_of",
    "snapshot_of",
    "spec_from_reply",
    "turn_text",
    "zone",
]
