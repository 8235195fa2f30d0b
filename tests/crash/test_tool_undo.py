"""A core SIGKILLed during a turn's tool step finishes the turn at the next
start when the step can be undone (docs/adr/0033-recover13-tool-undo.md).

Real processes throughout: ``naga daemon start`` with its sandboxed
executors, the shipped sandboxed ``fs`` and ``web`` tool plugins and the
provider plugin, against the fake model over HTTP on loopback, which asks
for the tool calls. The core is SIGKILLed at a point reached by readiness,
never by a sleep:

* ``after``: the turn's tool calls answered and their workspace effects
  applied; the model's next request is held, and the kill comes while it
  is (the calls are replayed, nothing is undone);
* ``in_tool``: the fs plugin process is stopped (SIGSTOP) before the turn,
  so its call blocks; the kill comes once the call's ``turn.tool_call``
  record is in the ledger.

After the restart the sender resends its key, and: exactly one final
answer, recorded once; the workspace is byte for byte what one clean run of
the same turn leaves (a non-idempotent ``fs.edit`` among the calls: run
twice it would differ); the model is not asked again for the steps it
answered; ``naga history`` names the interrupted turn and that it was
re-run; ``naga ledger verify`` passes.

Since ADR 0042 the re-run resumes from the recorded steps: an answered
call is replayed, not undone and run again, and the model is asked only
for the step it was in. A call Naga can neither undo nor repeat, in flight
at the kill, ends the turn INTERRUPTED: tests/crash/test_resume.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import agent_pb2 as apb
from naga_core.workspace import tree_hash
from tests.agent.conftest import write_providers
from tests.crash._webchat import model_thread
from tests.crash._webchat import records as records_of
from tests.crash.test_turn_recovery import TURN_S, Sender
from tests.crash.test_turn_recovery import _until as until  # pyright: ignore[reportPrivateUsage]
from tests.daemon.conftest import REPO, CoreProcess, start_core_process
from tests.fakes.model_server import FakeModelServer, Reply, is_review
from tests.ledger_helpers import verify_home

EDIT = ("call_e", "fs__edit", json.dumps({"path": "f.txt", "old": "x", "new": "xy"}))
WRITE = ("call_w", "fs__write", json.dumps({"path": "made/new.txt", "content": "made"}))


def _turn_script(held: str) -> list[Reply]:
    """One turn's model answers: a write, a non-idempotent edit, then the
    final answer (``hold=held`` on the one after the tools)."""
    return [
        Reply.answer(tool_calls=(WRITE,)),
        Reply.answer(tool_calls=(EDIT,)),
        Reply.answer("done", hold=held),
    ]


def _seed(home: str) -> str:
    workspace = os.path.join(home, "workspace")
    os.makedirs(workspace, mode=0o700, exist_ok=True)
    with open(os.path.join(workspace, "f.txt"), "w") as f:
        f.write("x")
    return workspace


def _warm(home: str, server: FakeModelServer, token: trio.lowlevel.TrioToken) -> None:
    """A first turn: the shipped tools are enabled (and their plugins up)."""
    trio.from_thread.run_sync(server.script, Reply.answer("hello"), trio_token=token)
    warm = Sender("warm", "hi")
    warm.send(home)
    assert warm.kinds()[-1:] == ["final"], (warm.kinds(), warm.failure)


def _history(home: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "naga_core.cli", "history", "--limit", "200", "--home", home],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    return out.stdout.splitlines()


def _pids(home: str, role_part: str) -> list[int]:
    """The pids of the running workers of the role, once there is one: after
    the warm turn a shipped plugin's worker may still be starting (pid 0;
    seen as an empty list for the shell plugin under load)."""
    found: list[int] = []

    def running() -> bool:
        with Client.connect(home) as c:
            found[:] = [p.pid for p in c.status().processes if role_part in p.role and p.pid]
        return bool(found)

    until(f"a running {role_part} worker", running)
    return found


def _stop(home: str, core: CoreProcess) -> None:
    with Client.connect(home) as c:
        c.shutdown("test done")
    core.proc.wait(30)


def _clean_run(root: Path) -> str:
    """The workspace's tree hash after one uninterrupted run of the turn."""
    home = str(root / "clean")
    os.makedirs(home, mode=0o700)
    workspace = _seed(home)
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        core = start_core_process(home, root / "clean.log")
        try:
            _warm(home, server, token)
            trio.from_thread.run_sync(server.script, *_turn_script(""), trio_token=token)
            s = Sender("s", "edit the files")
            s.send(home)
            assert s.kinds()[-1:] == ["final"], (s.kinds(), s.failure, s.events[-1:])
            _stop(home, core)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
    with open(os.path.join(workspace, "f.txt")) as f:
        assert f.read() == "xy"
    return tree_hash(workspace)


def _ends(records: list[Any], turn_id: str) -> list[tuple[str, apb.TurnRecord]]:
    out: list[tuple[str, apb.TurnRecord]] = []
    for r in records:
        if r.kind in ("turn.reply", "turn.error"):
            body = apb.TurnRecord.FromString(r.payload)
            if body.turn_id == turn_id:
                out.append((str(r.kind), body))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after", "in_tool"])
def test_a_turn_killed_in_its_tool_step_is_undone_and_finished(
    tmp_path_factory: pytest.TempPathFactory, point: str
) -> None:
    root = tmp_path_factory.mktemp("undo")
    expected = _clean_run(root)
    home = str(root / "home")
    os.makedirs(home, mode=0o700)
    workspace = _seed(home)
    log = root / "core.log"
    frozen: list[int] = []
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        core = start_core_process(home, log)
        try:
            _warm(home, server, token)
            # The re-run resumes from the recorded steps: it asks the model
            # only for the step it was in (after: the final answer; in_tool:
            # the write in flight runs again, then the edit and the answer).
            script = (
                [*_turn_script("first"), Reply.answer("done")]
                if point == "after"
                else _turn_script("")
            )
            trio.from_thread.run_sync(server.script, *script, trio_token=token)
            if point == "in_tool":
                frozen = _pids(home, "fs")
                assert len(frozen) == 1, frozen
                os.kill(frozen[0], signal.SIGSTOP)
            sender = Sender("s", "edit the files")
            thread = threading.Thread(target=sender.send, args=(home,))
            thread.start()
            if point == "after":
                trio.from_thread.run(server.held, "first", trio_token=token)
                with open(os.path.join(workspace, "f.txt")) as f:
                    assert f.read() == "xy"  # the first run's edit is applied
            else:

                def call_started() -> bool:
                    return any(r.kind == "turn.tool_call" for r in records_of(home))

                until("the fs call's intent record", call_started)
            asked = len(server.requests)
            core.proc.send_signal(signal.SIGKILL)
            core.proc.wait(10)
            for pid in frozen:  # it dies with its core; never left stopped
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            thread.join(TURN_S)
            first = sender.accepted
            assert first is not None
            core = start_core_process(home, log)
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            sender.send(home)  # the resend, as a client does after a reconnect
            assert not sender.failure, sender.failure
            last = sender.events[-1]
            assert last.WhichOneof("kind") == "final", sender.events
            assert last.final.text == "done"
            acc = sender.accepted
            assert acc is not None
            assert acc.turn_id == first.turn_id
            records = records_of(home)
            ends = _ends(records, acc.turn_id)
            assert [k for k, _ in ends] == ["turn.reply"], ends
            resumed = [
                r
                for r in records
                if r.kind == "turn.resumed"
                and apb.TurnRecord.FromString(r.payload).turn_id == acc.turn_id
            ]
            assert len(resumed) == 1
            lines = _history(home)
            text = "\n".join(lines)
            assert "without a clean stop" in text, text
            assert f"turn {acc.turn_id}" in text, text
            # Answered calls are replayed, not undone and run again; the
            # write in flight had changed nothing.
            assert "undo of effect" not in text, text
            # The turn's own calls: its review (on by default, ADR 0060)
            # follows the reply.
            after = [r.json()["messages"] for r in server.requests[asked:] if not is_review(r)]
            results = [
                {m.get("tool_call_id") for m in ms if m.get("role") == "tool"} for ms in after
            ]
            if point == "after":
                assert results == [{"call_w", "call_e"}], results  # one request: the answer
            else:
                assert results == [{"call_w"}, {"call_w", "call_e"}], results
            assert f"recovered turn {acc.turn_id}" in text, text
            _stop(home, core)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
    assert tree_hash(workspace) == expected
    verify_home(home)
