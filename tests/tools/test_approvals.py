"""Approvals through the real core and the real CLI (``naga approve``, a
subprocess): a call at or above tools.approve_from waits for the owner;
allow runs it once, deny and silence refuse it; each decision is a ledger
entry; a peer below the owner is never offered the tool."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from naga.sdk import Client
from tests.cli.conftest import naga_command
from tests.fakes.model_server import Reply
from tests.tools._turns import TurnInThread, model_name, results, tool_turn
from tests.tools.conftest import ToolsCore

pytestmark = pytest.mark.slow  # each naga command is a process of its own


@pytest.fixture(scope="module")
def asking(tools_core: ToolsCore) -> Iterator[Client]:
    with tools_core.client() as c:
        c.set_setting_text("tools.max_risk", "R3")  # fs.delete and shell.run offered
        yield c
        c.reset_setting("tools.max_risk")


def naga(tc: ToolsCore, *args: str) -> tuple[int, dict[str, object], str]:
    done = subprocess.run(
        [*naga_command(), *args, "--home", tc.home, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    data: dict[str, object] = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, data, done.stderr


def _pending(tc: ToolsCore) -> list[dict[str, object]]:
    code, data, err = naga(tc, "approve", "list")
    assert code == 0, err
    return list(data["pending"])  # type: ignore[arg-type]


def _entry_text(client: Client, seq: int) -> str:
    for entry in client.history(limit=50).entries:
        if entry.seq == seq:
            return entry.description
    raise AssertionError(f"no entry {seq} in the recent history")


def test_allow_runs_the_call_once(tools_core: ToolsCore, asking: Client) -> None:
    target = os.path.join(tools_core.workspace, "to-delete.txt")
    with open(target, "w") as f:
        f.write("bye")
    turn = TurnInThread(tools_core, asking, "ap-allow", [("fs.delete", {"path": "to-delete.txt"})])
    turn.until("tool_started")
    (card,) = _pending(tools_core)
    assert card["tool"] == "fs.delete"
    assert card["risk"] == "R3"
    assert card["arguments"] == {"path": "to-delete.txt"}
    assert os.path.exists(target)  # nothing ran before the answer
    code, data, err = naga(tools_core, "approve", "allow", str(card["id"]))
    assert code == 0, err
    (done,) = results(turn.finish())
    assert done.ok, done.error
    assert not os.path.exists(target)
    assert "allowed by the owner" in _entry_text(asking, int(str(data["seq"])))
    # Once: the id is spent.
    code, _, err = naga(tools_core, "approve", "allow", str(card["id"]))
    assert code == 1
    assert "no pending approval" in err


def test_deny_refuses_the_call(tools_core: ToolsCore, asking: Client) -> None:
    turn = TurnInThread(
        tools_core, asking, "ap-deny", [("shell.run", {"command": "echo x > denied.txt"})]
    )
    turn.until("tool_started")
    (card,) = _pending(tools_core)
    assert card["arguments"] == {"command": "echo x > denied.txt"}
    code, data, err = naga(tools_core, "approve", "deny", str(card["id"]))
    assert code == 0, err
    (done,) = results(turn.finish())
    assert not done.ok
    assert "the owner denied it" in done.error
    assert not os.path.exists(os.path.join(tools_core.workspace, "denied.txt"))
    assert "denied by the owner" in _entry_text(asking, int(str(data["seq"])))
    assert _pending(tools_core) == []


def test_no_answer_is_a_deny(tools_core: ToolsCore, asking: Client) -> None:
    asking.set_setting("tools.approval_timeout_s", 1.0)
    try:
        turn = TurnInThread(
            tools_core, asking, "ap-timeout", [("shell.run", {"command": "echo x > late.txt"})]
        )
        (done,) = results(turn.finish())
    finally:
        asking.reset_setting("tools.approval_timeout_s")
    assert not done.ok
    assert "did not answer in time" in done.error
    assert not os.path.exists(os.path.join(tools_core.workspace, "late.txt"))
    seq = int(done.error.rsplit("ledger entry ", 1)[1].rstrip(")"))
    assert "no answer within 1 s: denied" in _entry_text(asking, seq)


def test_bad_arguments_are_refused_before_the_owner_is_asked(
    tools_core: ToolsCore, asking: Client
) -> None:
    """Found by hand: shell.run with ``timeout_s: "1.0"`` (a string) was put
    to the owner as it was, and refused by the plugin only after the owner
    allowed it. The arguments are checked first: no approval is asked, and
    the model reads what is wrong."""
    (done,) = results(
        tool_turn(
            tools_core,
            asking,
            "ap-bad-args",
            [("shell.run", {"command": "echo x > bad.txt", "timeout_s": "1.0"})],
        )
    )
    assert not done.ok
    assert "shell.run: argument 'timeout_s' must be an integer, not a string" in done.error
    assert _pending(tools_core) == []
    assert not [
        e
        for e in asking.history(limit=20).entries
        if e.description.startswith("approval ap-") and "ap-bad-args" in e.description
    ]
    assert not os.path.exists(os.path.join(tools_core.workspace, "bad.txt"))


def test_naga_chat_says_a_call_failed_and_why(tools_core: ToolsCore, asking: Client) -> None:
    """Found by hand: ``[tool shell.run]`` alone, for a call that was refused,
    read as if it ran. Through the core (no gateway here)."""
    tools_core.model.script(
        Reply.answer(
            tool_calls=(("c0", model_name("shell.run"), '{"command": "true", "timeout_s": "1.0"}'),)
        ),
        Reply.answer("could not"),
    )
    done = subprocess.run(
        [*naga_command(), "chat", "--session", "ap-fail", "go", "--home", tools_core.home],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "[tool shell.run failed: shell.run: argument 'timeout_s' must be an integer, "
        "not a string]\n" in done.stderr
    ), done.stderr
    assert "could not" in done.stdout


def test_a_peer_below_the_owner_never_reaches_an_approval(
    tools_core: ToolsCore, asking: Client
) -> None:
    # R2 needs approval now: within a known peer's ceiling (R2), so only the
    # approval rule keeps fs.write from it.
    asking.set_trust("webchat:known-1", "known", by_owner=True)
    asking.set_setting_text("tools.approve_from", "R2")
    try:
        turn = TurnInThread(
            tools_core,
            asking,
            "ap-known",
            [("fs.write", {"path": "k.txt", "content": "k"}), ("fs.list", {})],
            peer="webchat:known-1",
        )
        refused, listed = results(turn.finish())
    finally:
        asking.reset_setting("tools.approve_from")
    assert not refused.ok
    assert "not available in this session" in refused.error, refused.error
    assert listed.ok, listed.error
    assert not os.path.exists(os.path.join(tools_core.workspace, "k.txt"))
    requests = tools_core.model.run(
        lambda: [r.json() for r in tools_core.model.server.requests[-2:]]
    )
    names = [t["function"]["name"] for t in requests[0].get("tools", [])]
    assert "fs__list" in names
    assert "fs__read" in names
    assert "fs__write" not in names
    assert "fs__delete" not in names
    assert "shell__run" not in names
    assert _pending(tools_core) == []


def test_bad_ids_are_refused_clearly(tools_core: ToolsCore, asking: Client) -> None:
    code, _, err = naga(tools_core, "approve", "allow", "nonsense")
    assert code == 1
    assert "not an approval id" in err
    code, _, err = naga(tools_core, "approve", "deny", "ap-0123456789ab")
    assert code == 1
    assert "no pending approval" in err


def test_naga_chat_says_how_to_answer_a_call_that_waits(
    tools_core: ToolsCore, asking: Client
) -> None:
    """Without that line a terminal chat looked hung until the approval
    timed out into a deny (found by hand: it printed only `[tool shell.run]`)."""
    tools_core.model.script(
        Reply.answer(tool_calls=(("c0", model_name("shell.run"), '{"command": "echo hi"}'),)),
        Reply.answer("not run"),
    )
    chat = subprocess.Popen(
        [*naga_command(), "chat", "--session", "ap-chat", "go", "--home", tools_core.home],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert chat.stderr is not None
        said: list[str] = []
        while not any("naga approve deny" in line for line in said):
            line = chat.stderr.readline()
            assert line, f"naga chat ended without saying how to answer: {said}"
            said.append(line)
        assert '[shell.run (R3) waits for your approval: {"command": "echo hi"}' in said[-2]
        (card,) = _pending(tools_core)
        assert f"naga approve allow {card['id']} | naga approve deny {card['id']}" in said[-1]
        assert "s is a deny)]" in said[-1]
        code, _, err = naga(tools_core, "approve", "deny", str(card["id"]))
        assert code == 0, err
        out, _ = chat.communicate(timeout=120)
        assert chat.returncode == 0
        assert "not run" in out
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
