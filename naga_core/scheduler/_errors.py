"""The scheduler's errors: one root, each refusal with its reason."""

from __future__ import annotations

import enum

from naga_core.errors import NagaError, NotFound


class JobRefusal(enum.Enum):
    """Why a job operation was refused (what a caller may branch on)."""

    INVALID_SCHEDULE = "invalid_schedule"
    NOT_UNDERSTOOD = "not_understood"
    NOT_FOUND = "not_found"
    IN_A_JOB = "in_a_job"
    ABOVE_CREATOR = "above_creator"
    STATE = "state"


class SchedulerError(NagaError):
    """Root of the scheduler's errors."""

    reason = JobRefusal.STATE


class InvalidSchedule(SchedulerError):
    """A cron expression, time zone, prompt or policy that is not valid."""

    reason = JobRefusal.INVALID_SCHEDULE


class ScheduleNotUnderstood(SchedulerError):
    """The model's one answer to a sentence is not a valid schedule."""

    reason = JobRefusal.NOT_UNDERSTOOD


class JobNotFound(NotFound, SchedulerError):
    """No job by that id (never made, removed, or rolled back)."""

    reason = JobRefusal.NOT_FOUND


class JobRefused(SchedulerError):
    """A job may not be made so: inside a job's own turn, or above its
    creator's trust or tool-risk ceiling."""

    def __init__(self, message: str, reason: JobRefusal) -> None:
        super().__init__(message)
        self.reason = reason


__all__ = [
    "InvalidSchedule",
    "JobNotFound",
    "JobRefusal",
    "JobRefused",
    "ScheduleNotUnderstood",
    "SchedulerError",
]
