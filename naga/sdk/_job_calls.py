"""The client's calls of the JobService: the owner's scheduled jobs
(docs/design/scheduler.md)."""

from __future__ import annotations

from naga.sdk._rpc import Rpc
from naga.v1 import job_pb2 as jpb

_JOB = "/naga.v1.JobService/"


class JobCalls(Rpc):
    def compile_job(
        self, text: str, *, default_tz: str = "", timeout: float | None = None
    ) -> jpb.CompileJobResponse:
        """The schedule one model call makes of ``text`` (not saved)."""
        req = jpb.CompileJobRequest(text=text, default_tz=default_tz)
        return self._read(_JOB + "Compile", req, jpb.CompileJobResponse, timeout)

    def add_job(self, spec: jpb.JobSpec, *, timeout: float | None = None) -> jpb.AddJobResponse:
        return self._write(_JOB + "Add", jpb.AddJobRequest(spec=spec), jpb.AddJobResponse, timeout)

    def jobs(self, *, timeout: float | None = None) -> list[jpb.JobView]:
        req = jpb.ListJobsRequest()
        return list(self._read(_JOB + "List", req, jpb.ListJobsResponse, timeout).jobs)

    def job(self, job_id: str, *, timeout: float | None = None) -> jpb.GetJobResponse:
        return self._read(_JOB + "Get", jpb.JobIdRequest(id=job_id), jpb.GetJobResponse, timeout)

    def pause_job(self, job_id: str, *, timeout: float | None = None) -> jpb.JobChangeResponse:
        return self._change("Pause", job_id, timeout)

    def resume_job(self, job_id: str, *, timeout: float | None = None) -> jpb.JobChangeResponse:
        return self._change("Resume", job_id, timeout)

    def remove_job(self, job_id: str, *, timeout: float | None = None) -> jpb.JobChangeResponse:
        return self._change("Remove", job_id, timeout)

    def run_job(self, job_id: str, *, timeout: float | None = None) -> jpb.RunJobResponse:
        """Fire it now, outside its schedule (its trust check too)."""
        req = jpb.JobIdRequest(id=job_id)
        return self._write(_JOB + "Run", req, jpb.RunJobResponse, timeout)

    def _change(self, method: str, job_id: str, timeout: float | None) -> jpb.JobChangeResponse:
        req = jpb.JobIdRequest(id=job_id)
        return self._write(_JOB + method, req, jpb.JobChangeResponse, timeout)


__all__ = ["JobCalls"]
