"""Crash recovery of turns, with real processes and a real SIGKILL.

A real ``naga daemon start`` process, its sandboxed executors and its
provider plugin answer through real HTTP on loopback to the fake model
server. Turns run in a few sessions; at a point of a turn's life drawn by
hypothesis (accepted, at the model, just after the model answered (its
trace and answer blob are made durable with the turn's end: docs/adr/0043),
in a tool, writing the reply, during the recovery of an earlier kill) one
process is SIGKILLed: the core, an executor or the provider. Then, after
a restart where the core was killed, every sender sends its message again
with its idempotency key, as a client does after a reconnect, and:

* every acknowledged message has exactly one ``turn.reply`` or one
  ``turn.error`` in the ledger, and its sender gets that end (a final with
  text, never an empty one, or the recorded error);
* a turn is re-run at most once, and one whose started tool call Naga
  cannot undo is not re-run (that tool never runs twice; a read-only one,
  as ``danger.echo`` here, may run again: tests/crash/test_tool_undo.py);
* the start after a core kill is an entry of ``naga history``;
* ``naga ledger verify`` passes once the core stopped (after the start's
  cleanup).

Examples are few: the five explicit ones (each point with a core kill) and
``NAGA_CRASH_EXAMPLES`` drawn ones (default 6; 0: the explicit ones only);
each starts two or three cores.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from naga.sdk import Client
from naga.sdk.errors import SdkError
from naga.v1 import agent_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import TRACE_KINDS
from naga_core.plugins import code_hash
from tests.agent.conftest import PLUGINS, write_providers
from tests.crash._webchat import model_thread
from tests.crash._webchat import records as ledger_records
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.fakes.model_server import FakeModelServer, Reply
from tests.ledger_helpers import verify_home

EXAMPLES = int(os.environ.get("NAGA_CRASH_EXAMPLES", "6"))
#: A whole turn, restarts included, never takes this long on a sane machine.
TURN_S = 60.0
POINTS = ("accepted", "model", "answered", "tool", "reply", "recovery")
VICTIMS = ("core", "executor", "provider")


@dataclass
class Sender:
    """One client sending one message and reading its stream."""

    session: str
    text: str
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: list[tpb.TurnEvent] = field(default_factory=list[tpb.TurnEvent])
    seen: threading.Event = field(default_factory=threading.Event)
    failure: str = ""
    #: the acknowledgement of the first send, if it got one
    first: tpb.TurnAccepted | None = None

    @property
    def accepted(self) -> tpb.TurnAccepted | None:
        for e in self.events:
            if e.HasField("accepted"):
                return e.accepted
        return None

    def kinds(self) -> list[str]:
        return [str(e.WhichOneof("kind")) for e in self.events]

    def send(self, home: str) -> None:
        if self.accepted is not None:
            self.first = self.accepted
        self.events, self.failure = [], ""
        try:
            with Client.connect(home) as c:
                for event in c.run_turn(self.session, self.text, self.key, timeout=TURN_S):
                    self.events.append(event)
                    self.seen.set()
        except SdkError as exc:  # the core was killed under the stream: what a client sees
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.seen.set()


def _until(what: str, check: Any, timeout: float = TURN_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _pid_of(home: str, role_prefix: str) -> int:
    """The pid of a running process of the role, once the supervisor lists
    one: an executor killed or started just before may still be starting
    (pid 0), as under CI load at the ``accepted`` point."""
    found: list[int] = []

    def running() -> bool:
        with Client.connect(home) as c:
            found[:] = [
                p.pid for p in c.status().processes if p.role.startswith(role_prefix) and p.pid
            ]
        return bool(found)

    _until(f"a running {role_prefix} process", running)
    return found[0]


def _script(server: FakeModelServer, token: trio.lowlevel.TrioToken, point: str, n: int) -> None:
    replies: list[Reply] = []
    if point in ("model", "recovery"):
        replies.append(Reply.answer("held answer", hold="first"))
    if point == "recovery":
        replies.append(Reply.answer("held again", hold="second"))
    if point == "tool":
        replies += [
            Reply.answer(tool_calls=((f"call_{i}", "danger__echo", '{"text": "x"}'),))
            for i in range(n)
        ]
    replies += [Reply.answer(f"answer {i}") for i in range(4 * n + 4)]
    trio.from_thread.run_sync(server.script, *replies, trio_token=token)


def _wait_for_point(
    point: str,
    senders: list[Sender],
    server: FakeModelServer,
    token: trio.lowlevel.TrioToken,
) -> None:
    if point == "accepted":
        _until("acceptance", lambda: all(s.accepted or s.failure for s in senders))
    elif point in ("model", "recovery"):
        trio.from_thread.run(server.held, "first", trio_token=token)
    elif point == "answered":
        # The executor has (or is about to have) the answer; the call's
        # record and answer blob are not durable yet.
        _until(
            "a model answer",
            lambda: trio.from_thread.run_sync(lambda: bool(server.answer_s), trio_token=token),
        )
    elif point == "tool":
        _until("a tool call", lambda: any("tool_started" in s.kinds() for s in senders))
    else:  # "reply": the first answer is being written, the others may still run
        _until("a reply", lambda: any(s.kinds()[-1:] == ["final"] for s in senders))


def _kill(victim: str, home: str, core: CoreProcess) -> None:
    if victim == "core":
        core.proc.send_signal(signal.SIGKILL)
        core.proc.wait(10)
        return
    os.kill(_pid_of(home, victim + ":"), signal.SIGKILL)


@pytest.mark.slow
@settings(
    max_examples=max(EXAMPLES, 1),
    phases=tuple(Phase) if EXAMPLES else (Phase.explicit,),
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    point=st.sampled_from(POINTS),
    victim=st.sampled_from(VICTIMS),
    sessions=st.integers(1, 3),
    delay_ms=st.integers(0, 30),
)
# Every point once with a core kill, whatever the draw.
@example(point="accepted", victim="core", sessions=2, delay_ms=0)
@example(point="model", victim="core", sessions=2, delay_ms=0)
@example(point="answered", victim="core", sessions=2, delay_ms=0)
@example(point="answered", victim="core", sessions=3, delay_ms=2)
@example(point="tool", victim="core", sessions=1, delay_ms=0)
@example(point="reply", victim="core", sessions=3, delay_ms=0)
@example(point="recovery", victim="core", sessions=2, delay_ms=0)
# And each other victim once (issue 13: "separately of ... an executor, the provider").
@example(point="model", victim="executor", sessions=2, delay_ms=0)
@example(point="model", victim="provider", sessions=1, delay_ms=0)
def test_every_acknowledged_turn_ends_once_after_a_sigkill(
    tmp_path_factory: pytest.TempPathFactory,
    point: str,
    victim: str,
    sessions: int,
    delay_ms: int,
) -> None:
    if point == "recovery":
        victim = "core"  # a kill during the start that recovers needs a core kill first
    root = tmp_path_factory.mktemp("crash")
    home = str(root / "home")
    os.makedirs(home, mode=0o700)
    folder = str(Path(home) / "plugins" / "danger")
    shutil.copytree(PLUGINS / "danger", folder)
    log = root / "core.log"
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        core = start_core_process(home, log)
        try:
            with Client.connect(home) as c:
                c.install_plugin(folder, code_hash(folder))  # as the owner does
                c.enable_plugin("danger", wait=30)
            _script(server, token, point, sessions)
            senders = [Sender(f"s-{i}", f"message {i}") for i in range(sessions)]
            threads = [threading.Thread(target=s.send, args=(home,)) for s in senders]
            for t in threads:
                t.start()
            _wait_for_point(point, senders, server, token)
            time.sleep(delay_ms / 1000)  # the drawn moment after the point
            _kill(victim, home, core)
            if victim == "core":
                for t in threads:
                    t.join(TURN_S)
                core = start_core_process(home, log)
                if point == "recovery":
                    # The re-run asks the model again: kill the core there too.
                    trio.from_thread.run(server.held, "second", trio_token=token)
                    core.proc.send_signal(signal.SIGKILL)
                    core.proc.wait(10)
                    core = start_core_process(home, log)
                trio.from_thread.run_sync(server.release, "first", trio_token=token)
                trio.from_thread.run_sync(server.release, "second", trio_token=token)
                # Every sender resends with its key, as a client does after a
                # reconnect (the acknowledged ones join or replay their turn).
                threads = [threading.Thread(target=s.send, args=(home,)) for s in senders]
                for t in threads:
                    t.start()
            else:
                trio.from_thread.run_sync(server.release, "first", trio_token=token)
            for t in threads:
                t.join(TURN_S)
            _check(home, senders, point, victim)
            with Client.connect(home) as c:
                c.shutdown("crash test done")
            core.proc.wait(30)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
            trio.from_thread.run_sync(server.release, "second", trio_token=token)
    verify_home(home)
    shutil.rmtree(root, ignore_errors=True)


def _check(home: str, senders: list[Sender], point: str, victim: str) -> None:
    records = ledger_records(home)
    ends: dict[str, list[tuple[str, apb.TurnRecord]]] = {}
    resumed: dict[str, int] = {}
    for r in records:
        if r.kind not in TRACE_KINDS and r.kind != "turn.resumed":
            continue
        body = apb.TurnRecord.FromString(r.payload)
        if r.kind in ("turn.reply", "turn.error"):
            ends.setdefault(body.turn_id, []).append((r.kind, body))
        elif r.kind == "turn.resumed":
            resumed[body.turn_id] = resumed.get(body.turn_id, 0) + 1
    for s in senders:
        assert not s.failure, f"{s.session}: {s.failure}"
        acc = s.accepted
        assert acc is not None, f"{s.session} never got its message accepted: {s.kinds()}"
        if s.first is not None:  # the resend reached the turn first acknowledged
            assert (acc.turn_id, acc.message_seq) == (s.first.turn_id, s.first.message_seq)
        last = s.events[-1]
        kind = last.WhichOneof("kind")
        recorded = ends.get(acc.turn_id, [])
        mine = [
            (r.seq, r.kind)
            for r in records
            if r.kind.startswith("turn.")
            and apb.TurnRecord.FromString(r.payload).turn_id == acc.turn_id
        ]
        assert len(recorded) == 1, (
            f"turn {acc.turn_id}: {len(recorded)} ends recorded; its records {mine}; "
            f"its sender saw {s.kinds()} {s.events[-1]}"
        )
        end_kind, body = recorded[0]
        assert resumed.get(acc.turn_id, 0) <= 1, "a turn was re-run twice"
        if kind == "final":
            assert end_kind == "turn.reply"
            assert last.final.text, "an empty final"
            assert last.final.reply_seq > 0
            assert last.final.text == body.text
        else:
            assert kind == "error", s.kinds()
            assert end_kind == "turn.error"
            assert last.error.message == body.error_message
    if victim == "core":
        with Client.connect(home) as c:
            notes = [e.description for e in c.history(limit=200).entries]
        assert any("without a clean stop" in n for n in notes), notes
    # A re-run turn never ends with an error for a started tool call.
    if point == "tool" and victim == "core":
        for tid in resumed:
            assert not any(b.tool_calls for _, b in ends.get(tid, []) if _ == "turn.error")


MODES = {
    "followup": tpb.QUEUE_MODE_FOLLOWUP,
    "collect": tpb.QUEUE_MODE_COLLECT,
    "interrupt": tpb.QUEUE_MODE_INTERRUPT,
}


@dataclass
class QueuedSender(Sender):
    mode: str = ""

    def send(self, home: str) -> None:
        if self.accepted is not None:
            self.first = self.accepted
        self.events, self.failure = [], ""
        try:
            with Client.connect(home) as c:
                stream = c.run_turn(
                    self.session, self.text, self.key, timeout=TURN_S, mode=MODES[self.mode]
                )
                for event in stream:
                    self.events.append(event)
                    self.seen.set()
        except SdkError as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.seen.set()


@pytest.mark.slow
@settings(
    max_examples=max(EXAMPLES // 2, 1),
    phases=tuple(Phase) if EXAMPLES else (Phase.explicit,),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(modes=["followup", "collect", "collect"], kill=True)
@example(modes=["collect", "interrupt", "followup"], kill=True)
@example(modes=["followup", "interrupt"], kill=False)
@given(
    modes=st.lists(st.sampled_from(sorted(MODES)), min_size=1, max_size=3),
    kill=st.booleans(),
)
def test_queued_messages_are_durable_when_acknowledged_and_run_after_a_kill(
    tmp_path_factory: pytest.TempPathFactory, modes: list[str], kill: bool
) -> None:
    """Messages sent while their session runs a turn are recorded and
    acknowledged at once (``queued``), wait in the core's lane, and after a
    SIGKILL of the core run at the next start, in their lane's order, each
    ending once and reaching its sender when it resends its key."""
    root = tmp_path_factory.mktemp("lanes")
    home = str(root / "home")
    os.makedirs(home, mode=0o700)
    log = root / "core.log"
    with model_thread() as (server, token):
        write_providers(home, server.openai_url)
        core = start_core_process(home, log)
        try:
            replies = [Reply.answer("held answer", hold="first")]
            replies += [Reply.answer(f"answer {i}") for i in range(2 * len(modes) + 4)]
            trio.from_thread.run_sync(server.script, *replies, trio_token=token)
            head = QueuedSender("q", "the first message", mode="followup")
            threads = [threading.Thread(target=head.send, args=(home,))]
            threads[0].start()
            trio.from_thread.run(server.held, "first", trio_token=token)
            senders: list[Sender] = [head]
            for i, mode in enumerate(modes):
                s = QueuedSender("q", f"queued {i} ({mode})", mode=mode)
                senders.append(s)
                threads.append(threading.Thread(target=s.send, args=(home,)))
                threads[-1].start()
                _until(f"queued {i} acknowledged", lambda s=s: s.accepted is not None or s.failure)
                acc = s.accepted
                assert acc is not None, s.failure
                if mode != "interrupt":
                    # Durable, and waiting behind the running turn. (An
                    # interrupt aborts that turn at once: it may already be
                    # next, not waiting, when its message is durable.)
                    assert acc.queued, acc
                    assert acc.position >= 1
            if kill:
                core.proc.send_signal(signal.SIGKILL)
                core.proc.wait(10)
                for t in threads:
                    t.join(TURN_S)
                core = start_core_process(home, log)
                trio.from_thread.run_sync(server.release, "first", trio_token=token)
                threads = [threading.Thread(target=s.send, args=(home,)) for s in senders]
                for t in threads:
                    t.start()
            else:
                trio.from_thread.run_sync(server.release, "first", trio_token=token)
            for t in threads:
                t.join(TURN_S)
            _check(home, senders, "queued", "core" if kill else "none")
            _check_lane_order(home, senders, modes)
            with Client.connect(home) as c:
                c.shutdown("lanes test done")
            core.proc.wait(30)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
            trio.from_thread.run_sync(server.release, "first", trio_token=token)
    verify_home(home)
    shutil.rmtree(root, ignore_errors=True)


def _check_lane_order(home: str, senders: list[Sender], modes: list[str]) -> None:
    """Followup and collect messages end in the order they were queued; a
    run of collect messages shares one answer."""
    ends: dict[str, tuple[int, str]] = {}
    for r in ledger_records(home):
        if r.kind in ("turn.reply", "turn.error"):
            body = apb.TurnRecord.FromString(r.payload)
            ends[body.turn_id] = (r.seq, body.text)
    queued = senders[1:]
    order = [ends[s.accepted.turn_id][0] for s in queued if s.accepted is not None]
    if "interrupt" not in modes:
        assert order == sorted(order), order
    for a, b, ma, mb in zip(queued, queued[1:], modes, modes[1:], strict=False):
        if ma == mb == "collect" and a.accepted and b.accepted:
            assert ends[a.accepted.turn_id][1] == ends[b.accepted.turn_id][1]
