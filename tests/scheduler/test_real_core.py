"""Jobs through the real core (in a thread, on the fake model server over
real HTTP) and the real ``naga`` CLI (a child process): a sentence compiled
with one model call whose structured answer is validated, a clear error
on an answer that is no schedule, the refusal off a terminal without
--yes, the job commands with --json, a rollback of a job's creation (and
of that rollback), and the agent's job.create tool, which a job's own run
is neither offered nor allowed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from naga.v1 import agent_pb2 as apb
from naga_core.agent import TRACE_REPLY
from naga_core.scheduler import COMPILE_SCHEMA
from tests.agent.conftest import (
    AGENT,
    ServerThread,
    model_server,
    running_core,
    turn,
)
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply

__all__ = ["model_server"]  # the fixture, used by name

REPO = Path(__file__).resolve().parents[2]
SENTENCE = "every morning at seven send me a tech news digest"


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, AGENT, plugins=()) as c:
        yield c


def naga(core: InProcessCore, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TZ": "Europe/Paris"}
    return subprocess.run(
        [sys.executable, "-m", "naga_core.cli", *args, "--home", core.info.home],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def naga_json(core: InProcessCore, *args: str) -> dict[str, Any]:
    done = naga(core, *args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _schedule_call(**args: str) -> Reply:
    return Reply.answer(tool_calls=(("call_1", "schedule", json.dumps(args)),))


def _records(core: InProcessCore, prefix: str) -> list[Any]:
    out: list[Any] = []
    with core.client() as c:
        while True:
            page = c.records(out[-1].seq + 1 if out else 0, 1000)
            if not page:
                return [r for r in out if r.kind.startswith(prefix)]
            out += page


def _job_ids(core: InProcessCore) -> list[str]:
    return [j["id"] for j in naga_json(core, "job", "list")["jobs"]]


def test_a_sentence_compiles_with_one_model_call(
    core: InProcessCore,
    model_server: ServerThread,
) -> None:
    model_server.script(
        _schedule_call(
            cron="0 7 * * *",
            timezone="Europe/Paris",
            prompt="Send me a digest of today's tech news",
            channel="webchat",
        )
    )
    asked = len(model_server.server.requests)
    made = naga_json(core, "job", "add", SENTENCE, "--yes")
    assert (made["cron"], made["tz"]) == ("0 7 * * *", "Europe/Paris")
    assert made["source"] == SENTENCE
    assert made["prompt"] == "Send me a digest of today's tech news"
    assert len(made["next_ns"]) == 3
    # Exactly one model call, forcing the one tool whose schema is the answer's.
    assert len(model_server.server.requests) == asked + 1
    body = json.loads(model_server.server.requests[-1].body)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "schedule"}}
    (tool,) = body["tools"]
    assert tool["function"]["parameters"] == COMPILE_SCHEMA
    assert body["messages"][-1]["content"] == SENTENCE
    assert "Europe/Paris" in body["messages"][0]["content"]  # the CLI's zone is the default
    assert made["id"] in _job_ids(core)
    # The call is in the owner's history.
    said = json.dumps(naga_json(core, "history", "--limit", "10"))
    assert "job compile of 'every morning at seven send me a tech news digest' (one call" in said
    shown = naga_json(core, "job", "show", made["id"])
    assert shown["next_ns"] == made["next_ns"][0]
    assert naga_json(core, "job", "remove", made["id"])["seq"] > 0


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (
            _schedule_call(cron="7 every day", timezone="UTC", prompt="x", channel="webchat"),
            "not a valid schedule",
        ),
        (
            _schedule_call(
                cron="0 7 * * *", timezone="Mars/Olympus", prompt="x", channel="webchat"
            ),
            "time zone 'Mars/Olympus' is not known",
        ),
        (_schedule_call(cron="0 7 * * *", prompt="no zone", channel="webchat"), "timezone"),
        (Reply.answer("Sure! I will send you news every morning."), "did not answer with one"),
    ],
)
def test_a_model_answer_that_is_not_a_schedule_is_a_clear_error(
    core: InProcessCore,
    model_server: ServerThread,
    reply: Reply,
    says: str,
) -> None:
    before = _job_ids(core)
    asked = len(model_server.server.requests)
    model_server.script(reply)
    done = naga(core, "job", "add", SENTENCE, "--yes")
    assert done.returncode == 1, done.stdout + done.stderr
    assert says in done.stderr
    assert len(model_server.server.requests) == asked + 1  # one call, no retry
    assert _job_ids(core) == before


def test_off_a_terminal_without_yes_nothing_is_made(
    core: InProcessCore,
    model_server: ServerThread,
) -> None:
    before = _job_ids(core)
    model_server.script(
        _schedule_call(cron="0 7 * * *", timezone="UTC", prompt="digest", channel="webchat")
    )
    done = naga(core, "job", "add", SENTENCE)
    assert done.returncode == 1
    assert "add --yes to make the job" in done.stderr
    assert "'0 7 * * *'" in done.stderr  # it says what it would have made
    assert _job_ids(core) == before


def test_job_commands_and_a_rollback_of_the_creation(core: InProcessCore) -> None:
    made = naga_json(
        core, "job", "add", "--cron", "30 6 * * 1-5", "--prompt", "weekday brief", "--tz",
        "America/New_York", "--misfire", "skip", "--risk", "R1",
    )  # fmt: skip
    job = made["id"]
    assert (made["misfire"], made["risk_ceiling"], made["creator"]) == ("skip", "R1", "owner")
    assert naga_json(core, "job", "pause", job)["paused"] is True
    assert naga_json(core, "job", "show", job)["next_ns"] == 0
    assert naga_json(core, "job", "resume", job)["paused"] is False
    bad = naga(core, "job", "add", "--cron", "0 7 * *", "--prompt", "x")
    assert bad.returncode == 1
    assert "must have 5 fields" in bad.stderr
    high = naga(core, "job", "show", "j-000000000000")
    assert high.returncode == 1
    assert "no job 'j-000000000000'" in high.stderr
    # Its creation rolled back: gone; that rollback rolled back: here again.
    undone = naga_json(core, "rollback", "--to", str(made["seq"] - 1), "--yes")
    assert job not in _job_ids(core)
    naga_json(core, "rollback", "--to", str(undone["seq"] - 1), "--yes")
    assert job in _job_ids(core)
    assert naga_json(core, "job", "show", job)["paused"] is False  # as it was
    naga_json(core, "job", "remove", job)
    assert job not in _job_ids(core)


def test_the_agent_makes_a_job_and_a_jobs_own_run_cannot(
    core: InProcessCore,
    model_server: ServerThread,
) -> None:
    create = json.dumps({"cron": "0 8 * * *", "timezone": "Asia/Tokyo", "prompt": "weather"})
    model_server.script(
        Reply.answer(tool_calls=(("c1", "job__create", create),)),
        Reply.answer("made it"),
    )
    with core.client() as c:
        turn(c, "sched-main", "remind me of the weather every morning at 8 in Tokyo")
    offered = json.loads(model_server.server.requests[-2].body)
    assert "job__create" in [t["function"]["name"] for t in offered["tools"]]
    jobs = naga_json(core, "job", "list")["jobs"]
    (made,) = [j for j in jobs if j["prompt"] == "weather"]
    assert (made["cron"], made["tz"], made["creator"]) == ("0 8 * * *", "Asia/Tokyo", "owner")
    assert made["risk_ceiling"] == "R4"
    # Its own run: job.create is not offered, and refused when called anyway.
    asked = len(model_server.server.requests)
    model_server.script(
        Reply.answer(tool_calls=(("c2", "job__create", create),)),
        Reply.answer("could not"),
    )
    fired = naga_json(core, "job", "run", made["id"])
    with core.client() as c:
        events = list(c.run_turn(fired["session"], "x", fired["key"], timeout=60))
    assert events[-1].HasField("final"), events[-1]
    first = json.loads(model_server.server.requests[asked].body)
    assert "job__create" not in [t["function"]["name"] for t in first.get("tools", [])]
    assert "[scheduled job" in first["messages"][-1]["content"]
    session = fired["session"]
    bodies = [(r.kind, apb.TurnRecord.FromString(r.payload)) for r in _records(core, "turn.")]
    tool = [b for kind, b in bodies if kind == "turn.tool" and b.session == session]
    assert [(t.tool, t.ok) for t in tool] == [("job.create", False)]
    assert "cannot create jobs" in tool[0].error
    replies = [b for kind, b in bodies if kind == TRACE_REPLY and b.session == session]
    assert len(replies) == 1
    assert [j["prompt"] for j in naga_json(core, "job", "list")["jobs"]].count("weather") == 1
    naga_json(core, "job", "remove", made["id"])


def test_a_known_peers_job_pauses_when_the_peer_is_lowered(
    core: InProcessCore,
    model_server: ServerThread,
) -> None:
    peer = "wechat:bob-sched"
    create = json.dumps({"cron": "0 9 * * *", "prompt": "bob's reminder"})
    model_server.script(
        Reply.answer(tool_calls=(("c1", "job__create", create),)),
        Reply.answer("made it"),
    )
    with core.client() as c:
        c.set_trust(peer, "known", by_owner=True)
        turn(c, "sched-bob", "remind me at nine", peer=peer)
    (made,) = [j for j in naga_json(core, "job", "list")["jobs"] if j["creator"] == peer]
    # Its snapshot and ceiling are bob's: known, R2 (the known row's).
    assert (made["creator_trust"], made["risk_ceiling"]) == ("known", "R2")
    with core.client() as c:
        c.set_trust(peer, "guest", reason="test: lowered")
    ran = naga(core, "job", "run", made["id"])
    assert ran.returncode == 1
    assert "trust fell from known to guest" in ran.stderr
    shown = naga_json(core, "job", "show", made["id"])
    assert shown["paused"] is True
    assert "trust fell from known to guest" in shown["paused_reason"]
    history = naga_json(core, "history", "--limit", "100")
    said = json.dumps(history)
    assert f"note to the owner: job {made['id']} paused" in said
    assert shown["fires"] == 0  # nothing ran
    naga_json(core, "job", "remove", made["id"])
