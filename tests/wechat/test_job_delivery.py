"""Proactive delivery of scheduled jobs (issue 16): a job the agent makes
in a WeChat conversation delivers each run's reply to that user, through
the real core (``naga job run ID``), the sandboxed plugin and the fake
iLink server over HTTP, which records the send. When WeChat would refuse
it (the user's context token is past the reply window: -2), the job's
session and the ledger have a note saying so, and the reply stays in the
job's session: never a silent loss."""

from __future__ import annotations

import json
from typing import Any

import pytest

from naga.sdk import errors as sdk_errors
from naga.v1 import ledger_pb2 as lpb
from naga_core.cli import main as cli_main
from naga_gateway._pages import turn_detail
from tests.fakes.model_server import Reply
from tests.wechat.conftest import World, say

USER = "job-user@im.wechat"


def _naga_json(world: World, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli_main([*args, "--home", world.home, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _make_job(world: World, capsys: pytest.CaptureFixture[str], bot_id: str) -> tuple[str, str]:
    create = json.dumps({"cron": "0 7 * * *", "prompt": "the morning digest"})
    world.model.script(
        Reply.answer(tool_calls=(("j1", "job__create", create),)), Reply.answer("every 7 am")
    )
    before = len(world.ilink.server.texts_to(USER))
    message = say(world, bot_id, USER, "send me a digest every morning at 7")
    world.ilink.until(lambda s: len(s.texts_to(USER)) > before)
    jobs: list[dict[str, Any]] = _naga_json(world, capsys, "job", "list")["jobs"]
    (job,) = [j for j in jobs if j["prompt"] == "the morning digest"]
    assert job["channel"] == "wechat"
    assert job["deliver_to"] == f"wechat:{bot_id}/{USER}"
    return str(job["id"]), str(message["context_token"])


def test_a_wechat_job_delivers_its_reply_then_notes_what_the_window_refuses(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = world.active(USER)
    job_id, token = _make_job(world, capsys, binding.bot_id)

    world.model.script(Reply.answer("Good morning: three meetings today."))
    before = len(world.ilink.server.texts_to(USER))
    fired = _naga_json(world, capsys, "job", "run", job_id)
    got = world.ilink.until(lambda s: s.texts_to(USER)[before:])
    assert got == ["Good morning: three meetings today."]
    head = f"wechat: sent part 1/1 of the reply of job {job_id}"
    # The effect is journaled just after the server took the part.
    sent = world.until(lambda: [h for h in world.history() if h.startswith(head)])
    assert len(sent) == 1, sent
    entries = world.client.history(limit=200).entries
    assert any(e.irreversible and e.description == sent[0] for e in entries)
    # The run's reply is in the job's own session too.
    session = str(fired["session"])
    assert "Good morning: three meetings today." in [
        e.text for e in world.client.session_history(session)
    ]

    # A day later the token is past the reply window: WeChat says -2.
    world.ilink.run(world.ilink.server.expire_context, token)
    world.model.script(Reply.answer("Good morning again."))
    refused = len(world.ilink.server.refused_sends)
    _naga_json(world, capsys, "job", "run", job_id)
    note = f"wechat: the reply of job {job_id} (session {session}) to wechat:"
    found = world.until(
        lambda: [h for h in world.history() if h.startswith(note) and "not delivered" in h]
    )
    assert "outside the reply window" in found[0], found
    assert "it stays in the session" in found[0]
    assert world.ilink.server.texts_to(USER)[before + 1 :] == []
    assert len(world.ilink.server.refused_sends) > refused
    assert "Good morning again." in [e.text for e in world.client.session_history(session)]
    # The owner reads it where the job's output is: the session (naga log,
    # the console's session view), after the reply it is about.
    expect = f"not delivered to wechat:{binding.bot_id}/{USER}: WeChat refused it (-2)"

    def notes() -> list[dict[str, Any]]:
        rows = _naga_json(world, capsys, "log", session)["entries"]
        return [r for r in rows if r["role"] == "note"]

    (row,) = world.until(notes)
    assert row["text"].startswith(expect), row
    assert "outside the reply window" in row["text"]
    assert row["text"].endswith("; it stays in the session")
    rows = _naga_json(world, capsys, "log", session)["entries"]
    replies = [r["seq"] for r in rows if r["text"] == "Good morning again."]
    assert replies == [r["seq"] for r in rows if r["role"] == "assistant"][-1:]
    assert replies[0] < row["seq"]
    records: list[lpb.Record] = []
    while not records or records[-1].seq < row["seq"]:
        records += world.client.records(records[-1].seq + 1 if records else replies[0], 512)
    shown = turn_detail(session, records)
    assert shown[row["seq"]]["role"] == "note"
    assert shown[row["seq"]]["text"] == row["text"]
    _naga_json(world, capsys, "job", "remove", job_id)


def _texts(world: World, session: str) -> list[str]:
    try:
        return [e.text for e in world.client.session_history(session)]
    except sdk_errors.NotFound:
        # `job run` answers once the fire is recorded, before its turn's message.
        return []


def test_a_webchat_job_is_not_sent_anywhere(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = ["job", "add", "--cron", "0 9 * * *", "--prompt", "console only"]
    capsys.readouterr()
    assert cli_main([*spec, "--home", world.home, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    job = made.get("job", made)
    assert job["channel"] == "webchat"
    assert job["deliver_to"] == ""
    sends = len(world.ilink.server.sent)
    world.model.script(Reply.answer("console reply"))
    fired = _naga_json(world, capsys, "job", "run", job["id"])
    world.until(lambda: "console reply" in _texts(world, str(fired["session"])))
    assert len(world.ilink.server.sent) == sends
    _naga_json(world, capsys, "job", "remove", job["id"])


def test_a_wechat_job_whose_run_fails_tells_its_user(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = world.active(USER)
    # A fresh message from the user: a fresh context token for the send.
    job_id, _ = _make_job(world, capsys, binding.bot_id)
    world.model.script(Reply.error(400, "the model refused the request"))
    before = len(world.ilink.server.texts_to(USER))
    _naga_json(world, capsys, "job", "run", job_id)
    (got,) = world.ilink.until(lambda s: s.texts_to(USER)[before:])
    assert got.startswith(f"(scheduled job {job_id} could not run: ")
    _naga_json(world, capsys, "job", "remove", job_id)


FRIEND = "job-friend@im.wechat"


def test_the_owner_makes_a_wechat_job_from_the_cli_to_a_bound_peer_only(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    bot = world.active(USER).bot_id
    # The friend writes once: WeChat carries a message only in reply to one.
    world.model.script(Reply.answer("hello friend"))
    before = len(world.ilink.server.texts_to(FRIEND))
    say(world, bot, FRIEND, "hi")
    world.ilink.until(lambda s: len(s.texts_to(FRIEND)) > before)
    owner, friend = f"wechat:{bot}/{USER}", f"wechat:{bot}/{FRIEND}"
    add = ["job", "add", "--cron", "0 8 * * *", "--prompt", "the friend's reminder"]

    # A peer WeChat cannot reach is refused, and the error names those it can.
    for target in (f"wechat:{bot}/nobody@im.wechat", "wechat:nosuch@im.bot", "someone"):
        capsys.readouterr()
        assert cli_main([*add, "--deliver-to", target, "--home", world.home]) != 0
        err = capsys.readouterr().err
        assert f"no WeChat peer {target!r}" in err, err
        assert owner in err, err
        assert friend in err, err
    jobs: list[dict[str, Any]] = _naga_json(world, capsys, "job", "list")["jobs"]
    assert not [j for j in jobs if j["prompt"] == "the friend's reminder"]

    made = _naga_json(world, capsys, *add, "--deliver-to", friend)
    assert (made["channel"], made["deliver_to"]) == ("wechat", friend)
    shown = _naga_json(world, capsys, "job", "show", made["id"])
    assert shown["deliver_to"] == friend
    world.model.script(Reply.answer("Reminder: water the plants."))
    before = len(world.ilink.server.texts_to(FRIEND))
    _naga_json(world, capsys, "job", "run", made["id"])
    assert world.ilink.until(lambda s: s.texts_to(FRIEND)[before:]) == [
        "Reminder: water the plants."
    ]
    head = f"wechat: sent part 1/1 of the reply of job {made['id']}"
    world.until(lambda: [h for h in world.history() if h.startswith(head)])

    # The shorthands name a binding's owner (this module binds one bot only).
    assert len(world.client.wechat_bindings()) == 1
    for target in (f"wechat:{bot}", "wechat"):
        short = _naga_json(world, capsys, *add, "--deliver-to", target)
        assert short["deliver_to"] == owner, target
        _naga_json(world, capsys, "job", "remove", short["id"])
    _naga_json(world, capsys, "job", "remove", made["id"])


def test_with_two_bindings_the_bare_shorthand_is_refused_naming_the_peers(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    first = world.active(USER).bot_id
    second = world.active("job-other-owner@im.wechat").bot_id
    add = ["job", "add", "--cron", "0 8 * * *", "--prompt", "whose?", "--deliver-to", "wechat"]
    capsys.readouterr()
    assert cli_main([*add, "--home", world.home]) != 0
    err = capsys.readouterr().err
    assert "'wechat' names the owner of the only binding, and there are 2" in err, err
    assert f"wechat:{first}/{USER}" in err, err
    assert f"wechat:{second}/job-other-owner@im.wechat" in err, err
    # Each binding's own shorthand still names its owner.
    made = _naga_json(world, capsys, *add[:-1], f"wechat:{second}")
    assert made["deliver_to"] == f"wechat:{second}/job-other-owner@im.wechat"
    _naga_json(world, capsys, "job", "remove", made["id"])
