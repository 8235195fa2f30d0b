"""A real SIGKILL of the real core (``naga daemon start`` as a child) at a
job's fire: the fire is recorded and its turn is at the model when the core
dies. After the restart the fire's turn ends exactly once (re-run by the
core's turn recovery, under the fire's key), no second fire is made for
that instant, and ``naga ledger verify`` passes once the core stopped.
(A crash between the fire's record and its turn's message is
tests/scheduler/test_scheduler.py's, on the virtual clock.)"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga.v1 import job_pb2 as jpb
from naga_core.agent import TRACE_REPLY
from naga_core.scheduler import FIRE_KIND
from tests.agent.conftest import write_providers
from tests.crash._webchat import model_thread
from tests.crash._webchat import records as ledger_records
from tests.daemon.conftest import start_core_process
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home

#: A minute to the first fire, a restart and a re-run: far below this.
WAIT_S = 150.0


def _until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_sigkill_at_fire_time_runs_the_fire_exactly_once_after_restart() -> None:
    root = tempfile.mkdtemp(prefix="naga-jobkill-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    log = Path(root) / "core.log"
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        replies = [Reply.answer("the digest", hold="first")]
        replies += [Reply.answer(f"digest {i}") for i in range(8)]
        trio.from_thread.run_sync(server.script, *replies, trio_token=token)
        core = start_core_process(home, log)
        try:
            with Client.connect(home) as c:
                spec = jpb.JobSpec(cron="* * * * *", prompt="send the digest")
                made = c.call(
                    "/naga.v1.JobService/Add", jpb.AddJobRequest(spec=spec), jpb.AddJobResponse
                )
            job = made.job
            # The first fire's turn reaches the model, which holds its answer:
            # the fire and the turn's message are durable. Kill the core there.
            trio.from_thread.run(server.held, "first", trio_token=token)
            os.kill(core.pid, signal.SIGKILL)
            core.proc.wait(10)
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            core = start_core_process(home, log)
            first = made.next_ns[0]
            key = f"job:{job.id}:{first}"

            def replied() -> list[apb.TurnRecord]:
                bodies = [
                    apb.TurnRecord.FromString(r.payload)
                    for r in ledger_records(home)
                    if r.kind == TRACE_REPLY
                ]
                msgs = {
                    b.turn_id
                    for r in ledger_records(home)
                    if r.kind == "turn.message"
                    for b in [apb.TurnRecord.FromString(r.payload)]
                    if b.idempotency_key == key
                }
                return [b for b in bodies if b.turn_id in msgs]

            ended = _until("the fire's turn to end after the restart", replied)
            records = ledger_records(home)
            fired = [jpb.JobFire.FromString(r.payload) for r in records if r.kind == FIRE_KIND]
            at_first = [f for f in fired if f.scheduled_ns == first]
            assert len(at_first) == 1, at_first  # recorded once, never again
            assert len(ended) == 1  # one run, one reply
            messages = [
                apb.TurnRecord.FromString(r.payload)
                for r in records
                if r.kind == "turn.message"
                and apb.TurnRecord.FromString(r.payload).idempotency_key == key
            ]
            assert len(messages) == 1  # the restart did not start it a second time
            resumed = [
                r
                for r in records
                if r.kind == "turn.resumed"
                and apb.TurnRecord.FromString(r.payload).turn_id == messages[0].turn_id
            ]
            assert len(resumed) == 1  # the core's turn recovery re-ran it, once
            with Client.connect(home) as c:
                c.shutdown("test done")
            core.proc.wait(30)
            verify_home(home)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait(10)
            shutil.rmtree(root, ignore_errors=True)
