"""A turn the core was SIGKILLed in goes on from its recorded steps at the
next start (docs/adr/0042-recover13b-resume.md).

Real processes throughout: ``naga daemon start`` with its sandboxed
executors, the shipped sandboxed ``web`` and ``shell`` plugins and the
provider plugin, against the fake model over HTTP on loopback; a loopback
HTTP server stands in for a public web host (``egress.loopback_hosts``).
The kill comes at a point reached by readiness: the model's next request
held by the fake model, the web page's GET held by the site, or the shell
plugin stopped (SIGSTOP) with its call's intent in the ledger.

After the restart the sender resends its key, and:

* the model is not asked again for a step it had answered: the first
  request after the restart already carries the recorded tool results;
* a call whose result was recorded (``memory.write``, ``web.fetch``) is not
  run again: one memory item, one GET;
* a ``web.fetch`` in flight at the kill is made again (the web plugin's
  manifest declares it ``repeatable``) and the turn finishes;
* a ``shell.run`` in flight (not repeatable, not undoable) ends the turn
  INTERRUPTED naming it, and the model is not asked again;
* a skill version the turn viewed before the kill is written out again (the
  start cleared the folders) and its scripts run in the re-run's shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import skills_pb2 as skpb
from naga.v1 import turn_pb2 as tpb
from naga_core.skills import render
from tests.agent.conftest import write_providers
from tests.crash._webchat import model_thread
from tests.crash._webchat import records as records_of
from tests.crash.test_tool_undo import _ends as ends_of  # pyright: ignore[reportPrivateUsage]
from tests.crash.test_tool_undo import _history as history  # pyright: ignore[reportPrivateUsage]
from tests.crash.test_tool_undo import _pids as pids  # pyright: ignore[reportPrivateUsage]
from tests.crash.test_tool_undo import _stop as stop  # pyright: ignore[reportPrivateUsage]
from tests.crash.test_tool_undo import _warm as warm  # pyright: ignore[reportPrivateUsage]
from tests.crash.test_turn_recovery import TURN_S, Sender
from tests.crash.test_turn_recovery import _until as until  # pyright: ignore[reportPrivateUsage]
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.fakes.model_server import FakeModelServer, Reply, is_review
from tests.ledger_helpers import verify_home

PAGE = b"<html><head><title>Tea</title></head><body><p>Green tea is good.</p></body></html>"
MEMORY = ("call_m", "memory__write", json.dumps({"text": "The user likes green tea."}))


@dataclass
class Site:
    """A web host on loopback whose GETs may be held until released."""

    port: int = 0
    gets: list[str] = field(default_factory=list[str])
    arrived: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event | None = None


@contextlib.contextmanager
def site() -> Generator[Site]:
    box = Site()

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            box.gets.append(self.path)
            box.arrived.set()
            hold = box.hold
            if hold is not None:
                hold.wait(TURN_S)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the core that asked may be gone
                self.wfile.write(PAGE)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    box.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box
    finally:
        if box.hold is not None:
            box.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _held(server: FakeModelServer, token: trio.lowlevel.TrioToken, name: str) -> None:
    """Wait for the model request held at ``name``, with a deadline (a turn
    that never gets there fails here, saying so, instead of hanging)."""

    async def wait() -> None:
        with trio.fail_after(TURN_S):
            await server.held(name)

    try:
        trio.from_thread.run(wait, trio_token=token)
    except trio.TooSlowError:
        raise AssertionError(f"no model request was held at {name!r}") from None


def _fetch(port: int) -> tuple[str, str, str]:
    return ("call_f", "web__fetch", json.dumps({"url": f"http://localhost:{port}/tea"}))


def _tool_results(request: Any) -> dict[str, str]:
    """The tool results a model request carries, by call id."""
    return {
        str(m.get("tool_call_id")): str(m.get("content"))
        for m in request.json()["messages"]
        if m.get("role") == "tool"
    }


def _kill(core: CoreProcess, frozen: list[int] = []) -> None:  # noqa: B006 (read only)
    core.proc.send_signal(signal.SIGKILL)
    core.proc.wait(10)
    for pid in frozen:  # it dies with its core; never left stopped
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _finished(sender: Sender, first: tpb.TurnAccepted | None, home: str, text: str) -> str:
    """Assert the resend got the turn's one reply; its turn id."""
    assert not sender.failure, sender.failure
    last = sender.events[-1]
    assert last.WhichOneof("kind") == "final", sender.events
    assert last.final.text == text
    acc = sender.accepted
    assert acc is not None
    assert first is not None
    assert acc.turn_id == first.turn_id
    ends = ends_of(records_of(home), acc.turn_id)
    assert [k for k, _ in ends] == ["turn.reply"], ends
    return acc.turn_id


class _Run:
    """One home with a core and the fake model, for one kill."""

    def __init__(self, root: str, server: FakeModelServer, token: trio.lowlevel.TrioToken) -> None:
        self.home = os.path.join(root, "home")
        os.makedirs(self.home, mode=0o700)
        self.log = Path(root) / "core.log"
        self.server, self.token = server, token
        write_providers(self.home, server.openai_url)
        self.core = start_core_process(self.home, self.log)

    def script(self, *replies: Reply) -> None:
        trio.from_thread.run_sync(self.server.script, *replies, trio_token=self.token)

    def send(self, text: str) -> tuple[Sender, threading.Thread]:
        sender = Sender("s", text)
        thread = threading.Thread(target=sender.send, args=(self.home,))
        thread.start()
        return sender, thread

    def restart(self, sender: Sender, thread: threading.Thread) -> tpb.TurnAccepted | None:
        thread.join(TURN_S)
        first = sender.accepted
        self.core = start_core_process(self.home, self.log)
        return first

    def close(self) -> None:
        if self.core.proc.poll() is None:
            self.core.proc.kill()
            self.core.proc.wait()
        trio.from_thread.run_sync(self.server.release, "first", trio_token=self.token)


@pytest.mark.slow
def test_a_turn_killed_after_a_memory_write_resumes_without_writing_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = str(tmp_path_factory.mktemp("resume-mem"))
    with model_thread() as (server, token):
        run = _Run(root, server, token)
        try:
            warm(run.home, server, token)
            # The re-run asks the model once, for the step it was held in.
            run.script(
                Reply.answer(tool_calls=(MEMORY,)),
                Reply.answer("noted", hold="first"),
                Reply.answer("noted"),
            )
            sender, thread = run.send("remember that I like green tea")
            _held(server, token, "first")
            asked = len(server.requests)
            _kill(run.core)
            first = run.restart(sender, thread)
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            sender.send(run.home)
            turn_id = _finished(sender, first, run.home, "noted")
            after = server.requests[asked:]
            assert len(after) == 1, [r.json()["messages"][-1] for r in after]
            assert "call_m" in _tool_results(after[0])  # resumed: the write's result is there
            records = records_of(run.home)
            items = [
                mmpb.MemoryItemRecord.FromString(r.payload)
                for r in records
                if r.kind == "memory.item"
            ]
            assert len(items) == 1, items
            text = "\n".join(history(run.home))
            assert f"turn {turn_id}" in text, text
            assert f"recovered turn {turn_id}" in text, text
            stop(run.home, run.core)
        finally:
            run.close()
    verify_home(run.home)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["answered", "in_flight"])
def test_a_turn_killed_around_a_web_fetch_resumes_and_finishes(
    tmp_path_factory: pytest.TempPathFactory, point: str
) -> None:
    root = str(tmp_path_factory.mktemp("resume-web"))
    with site() as web, model_thread() as (server, token):
        run = _Run(root, server, token)
        try:
            warm(run.home, server, token)
            with Client.connect(run.home) as c:
                c.set_setting_text("egress.loopback_hosts", "localhost")
            fetch = _fetch(web.port)
            if point == "answered":
                run.script(
                    Reply.answer(tool_calls=(fetch,)),
                    Reply.answer("fetched", hold="first"),
                    Reply.answer("fetched"),
                )
            else:
                web.hold = threading.Event()
                run.script(Reply.answer(tool_calls=(fetch,)), Reply.answer("fetched"))
            sender, thread = run.send("fetch the tea page")
            if point == "answered":
                _held(server, token, "first")
            else:
                assert web.arrived.wait(TURN_S), "the fetch never reached the site"

                def intent() -> bool:
                    return any(r.kind == "turn.tool_call" for r in records_of(run.home))

                until("the fetch's intent record", intent)
            asked = len(server.requests)
            _kill(run.core)
            if web.hold is not None:
                web.hold.set()  # the old GET answers into a closed connection
            first = run.restart(sender, thread)
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            sender.send(run.home)
            turn_id = _finished(sender, first, run.home, "fetched")
            after = server.requests[asked:]
            assert len(after) == 1, [r.json()["messages"][-1] for r in after]
            results = _tool_results(after[0])
            assert "Green tea is good." in results.get("call_f", ""), results
            # Answered: replayed, not fetched again; in flight: fetched again.
            assert len(web.gets) == (1 if point == "answered" else 2), web.gets
            text = "\n".join(history(run.home))
            assert f"recovered turn {turn_id}" in text, text
            stop(run.home, run.core)
        finally:
            run.close()
    verify_home(run.home)


@pytest.mark.slow
def test_a_turn_killed_in_a_shell_run_ends_interrupted_and_is_not_run_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = str(tmp_path_factory.mktemp("resume-shell"))
    shell = ("call_s", "shell__run", json.dumps({"command": "echo hi > out.txt"}))
    with model_thread() as (server, token):
        run = _Run(root, server, token)
        frozen: list[int] = []
        try:
            warm(run.home, server, token)
            with Client.connect(run.home) as c:
                c.set_setting_text("tools.max_risk", "R3")  # shell.run offered, no approval
                c.set_setting_text("tools.approve_from", "R4")
            run.script(Reply.answer(tool_calls=(shell,)), Reply.answer("ran"))
            frozen = pids(run.home, "shell")
            assert len(frozen) == 1, frozen
            os.kill(frozen[0], signal.SIGSTOP)
            sender, thread = run.send("run it")

            def intent() -> bool:
                return any(r.kind == "turn.tool_call" for r in records_of(run.home))

            until("the shell call's intent record", intent)
            asked = len(server.requests)
            _kill(run.core, frozen)
            first = run.restart(sender, thread)
            sender.send(run.home)
            last = sender.events[-1]
            assert last.WhichOneof("kind") == "error", sender.events
            assert last.error.kind == tpb.TURN_ERROR_KIND_INTERRUPTED
            why = last.error.message
            assert "tool call call_s (shell.run)" in why, why
            assert "cannot undo" in why, why
            acc = sender.accepted
            assert acc is not None
            assert first is not None
            assert acc.turn_id == first.turn_id
            ends = ends_of(records_of(run.home), acc.turn_id)
            assert [(k, b.error_message) for k, b in ends] == [("turn.error", why)]
            assert len(server.requests) == asked  # not re-run: the model was not asked again
            assert not os.path.exists(os.path.join(run.home, "workspace", "out.txt"))
            stop(run.home, run.core)
        finally:
            run.close()
    verify_home(run.home)


_SCRIPT = b"#!/bin/sh\necho script-ran\n"


@pytest.mark.slow
def test_a_turn_resumed_after_a_kill_gets_back_the_skill_folders_it_viewed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = str(tmp_path_factory.mktemp("resume-skill"))
    with model_thread() as (server, token):
        run = _Run(root, server, token)
        try:
            warm(run.home, server, token)
            with Client.connect(run.home) as c:
                c.set_setting_text("tools.max_risk", "R3")  # shell.run offered, no approval
                c.set_setting_text("tools.approve_from", "R4")
                files = [
                    skpb.SkillFile(path="SKILL.md", data=render("say-it", "Say it.", "Run it.\n")),
                    skpb.SkillFile(path="scripts/say.sh", data=_SCRIPT, executable=True),
                ]
                done = c.call(
                    "/naga.v1.SkillService/Import",
                    skpb.ImportSkillRequest(files=files, reason="test"),
                    skpb.SkillChangeResponse,
                )
            folder = os.path.join(run.home, "work", "skills", done.skill.version)
            view = ("call_v", "skill__view", json.dumps({"name": "say-it"}))
            command = json.dumps({"command": f"sh {folder}/scripts/say.sh", "timeout_s": 20})
            shell = ("call_s", "shell__run", command)
            # Killed while the model answers the step after the view; the
            # re-run asks for that step again, then runs the script.
            run.script(
                Reply.answer(tool_calls=(view,)),
                Reply.answer(tool_calls=(shell,), hold="first"),
                Reply.answer(tool_calls=(shell,)),
                Reply.answer("said"),
            )
            sender, thread = run.send("say it")
            _held(server, token, "first")
            assert os.path.isdir(folder)  # the view wrote it out
            asked = len(server.requests)
            _kill(run.core)
            first = run.restart(sender, thread)
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            sender.send(run.home)
            _finished(sender, first, run.home, "said")
            # The turn's own calls: its review (skills.review is on by
            # default, ADR 0060) follows the reply, whenever it comes.
            after = [r for r in server.requests[asked:] if not is_review(r)]
            assert len(after) == 2, [r.json()["messages"][-1] for r in after]
            assert "call_v" in _tool_results(after[0])  # resumed after the recorded view
            ran = json.loads(_tool_results(after[1])["call_s"])
            assert "script-ran" in str(ran["output"]), ran
            assert os.path.isdir(folder)  # written again after the start cleared it
            stop(run.home, run.core)
        finally:
            run.close()
    verify_home(run.home)
