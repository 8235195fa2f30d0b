"""Messages queued behind a running turn in each queue mode, through
WebChat and the real core, then a SIGKILL of the gateway or of the core.

The owner's WebSocket client sends a first message, whose turn is held at
the model (its first answer, a tool call or with ``last`` its final answer,
is let go only by the test), then
one or two more in a mode (docs/protocol/websocket.md, "Queue modes"), each
acknowledged: durable in the core. Then the gateway or the core (``naga
daemon start``, restarted on the same home and gateway port) is SIGKILLed;
the client reconnects and sends again, with the same keys, every message
whose end it has not seen, either while the head turn (or its re-run) is
still held or once every turn has ended. Then, from the ledger:

* every acknowledged key has exactly one ``turn.message`` (its own turn),
  or for a steer exactly one ``turn.steer`` (into the head turn) and none;
* every turn of a key ends exactly once (one ``turn.reply`` or one
  ``turn.error``), and the client received that end (a ``turn.final``
  with text, or the recorded error);
* by mode: a followup or an interrupt is a turn of its own that answered;
  consecutive collects share one answer that saw both texts; a steer
  reached the model once (the head turn's answer saw its text once, also
  when it came during the answer that was to be the last); an
  interrupt stopped the head turn (its abort is durable before the
  interrupt is acknowledged, so a core kill does not re-run it).

The model answers ``saw: <the turn's user texts>``, so an answer says what
its turn ran with. Real processes throughout (the core, its gateway,
executors and provider plugin); only the model is the fake on loopback.

Examples: the eight explicit ones (each mode with each victim) and
``NAGA_CRASH_EXAMPLES // 3`` drawn ones (default 2; 0: explicit only).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from tests.agent.conftest import write_providers
from tests.crash._webchat import (
    TurnLedger,
    gateway_row,
    model_thread,
    pinned_port,
    reconnect,
)
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.fakes.model_server import FakeModelServer, Recorded, Reply
from tests.gateway._client import WsClient
from tests.gateway._login import core_codes, owner_cookie

EXAMPLES = int(os.environ.get("NAGA_CRASH_EXAMPLES", "6"))
MODES = ("followup", "collect", "steer", "interrupt")
VICTIMS = ("gateway", "core")
#: When the client sends again: while the head turn (or its re-run) is
#: still held at the model (its resends join running turns), or once every
#: turn ended (they replay the recorded ends).
RESENDS = ("running", "ended")
ENDS = ("turn.final", "turn.error")
SESSION = "w"
#: A whole example's wait, restarts included, never takes this long.
WAIT_S = 60.0


@dataclass
class Sent:
    key: str
    text: str
    mode: str | None
    #: the ``send``'s acknowledgement
    ack: dict[str, Any] = field(default_factory=dict[str, Any])


class Model:
    """The fake model's answers: the first request (the head turn's) is
    held under ``first`` and asks for a tool no turn is offered (so the
    turn calls the model again after it: a steer's boundary), or with
    ``last`` is an answer with no tool call (a steer then comes during the
    turn's last answer: docs/adr/0059); every other answers what its turn's
    user texts were. ``hold_next`` holds the next request under that name
    (a re-run after a core kill)."""

    def __init__(self, *, last: bool = False) -> None:
        self.lock = threading.Lock()
        self.asked = 0
        self.hold_next = ""
        self.last = last

    def __call__(self, request: Recorded) -> Reply:
        with self.lock:
            self.asked += 1
            if self.asked == 1:
                if self.last:
                    return Reply.answer(_saw(request), hold="first")
                call = ("call_0", "nothing__offered", "{}")
                return Reply.answer(tool_calls=(call,), hold="first")
            hold, self.hold_next = self.hold_next, ""
        return Reply.answer(_saw(request), hold=hold)


def _saw(request: Recorded) -> str:
    return "saw: " + " | ".join(_turn_texts(request))


def _turn_texts(request: Recorded) -> list[str]:
    """The user texts after the last answer of the conversation: the
    turn's own message (collected ones joined in it) and its steering."""
    texts: list[str] = []
    for m in request.json()["messages"]:
        if m["role"] == "assistant" and not m.get("tool_calls"):
            texts = []
        elif m["role"] == "user":
            content = m["content"]
            if not isinstance(content, str):
                content = " ".join(part.get("text", "") for part in content)
            texts.append(content)
    return texts


@pytest.mark.slow
@settings(
    max_examples=max(EXAMPLES // 3, 1),
    phases=tuple(Phase) if EXAMPLES // 3 else (Phase.explicit,),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    modes=st.lists(st.sampled_from(MODES), min_size=1, max_size=2),
    victim=st.sampled_from(VICTIMS),
    resend=st.sampled_from(RESENDS),
    last=st.booleans(),
)
# Each mode with each victim, whatever the draw.
@example(modes=["followup", "followup"], victim="gateway", resend="running", last=False)
@example(modes=["followup"], victim="core", resend="running", last=False)
@example(modes=["collect", "collect"], victim="gateway", resend="ended", last=False)
@example(modes=["collect", "collect"], victim="core", resend="running", last=False)
@example(modes=["steer"], victim="gateway", resend="running", last=False)
@example(modes=["steer"], victim="core", resend="ended", last=False)
# A steer during the head's last answer (docs/adr/0059).
@example(modes=["steer"], victim="gateway", resend="ended", last=True)
@example(modes=["steer"], victim="core", resend="running", last=True)
@example(modes=["interrupt"], victim="gateway", resend="running", last=False)
@example(modes=["interrupt", "followup"], victim="core", resend="running", last=False)
def test_acknowledged_messages_of_every_mode_run_once_after_a_sigkill(
    tmp_path_factory: pytest.TempPathFactory,
    modes: list[str],
    victim: str,
    resend: str,
    last: bool,
) -> None:
    root = tmp_path_factory.mktemp("webchat-modes")
    home = str(root / "home")
    os.makedirs(home, mode=0o700)
    sent = [Sent("k0", "the first message", None)]
    sent += [Sent(f"k{i}", f"queued {i} ({m})", m) for i, m in enumerate(modes, 1)]
    with model_thread() as (server, token):
        case = Case(home, root / "core.log", pinned_port(), sent, server, token, Model(last=last))
        write_providers(home, server.openai_url)
        server.responder = case.model
        core = start_core_process(home, case.log, gateway_port=case.port)
        try:
            seen = case.before_kill()
            core = case.kill(victim, core, hold_rerun=resend == "running")
            if resend == "ended":
                case.release("first")
                case.until_ended()
            seen += case.after_kill(seen)
            ledger = TurnLedger.read(home)
            with Client.connect(home) as c:
                c.shutdown("webchat modes test done")
            core.proc.wait(30)
        finally:
            if core.proc.poll() is None:
                core.proc.kill()
                core.proc.wait()
    _check(ledger, sent, seen)


@dataclass
class Case:
    home: str
    log: Path
    port: int
    sent: list[Sent]
    server: FakeModelServer
    token: trio.lowlevel.TrioToken
    model: Model = field(default_factory=Model)
    cookie: str = ""

    def release(self, name: str) -> None:
        trio.from_thread.run_sync(self.server.release, name, trio_token=self.token)

    def before_kill(self) -> list[dict[str, Any]]:
        """Send the head message, wait until its turn is held at the model,
        send the others, each acknowledged; the ends the client saw."""
        head, *queued = self.sent

        async def run() -> list[dict[str, Any]]:
            self.cookie = await owner_cookie(self.port, core_codes(self.home))
            c = await WsClient.open(self.port, cookie=self.cookie)
            await c.connect()
            first = await c.request("send", session=SESSION, text=head.text, key=head.key)
            assert first["ok"], first
            head.ack = first["result"]
            await trio.to_thread.run_sync(
                lambda: trio.from_thread.run(self.server.held, "first", trio_token=self.token)
            )
            for s in queued:
                resp = await c.request("send", session=SESSION, text=s.text, key=s.key, mode=s.mode)
                assert resp["ok"], resp
                s.ack = resp["result"]
                if s.mode != "steer":
                    assert not s.ack["steered"], s.ack
            ends = [e for e in c.events if e["event"] in ENDS]
            await c.aclose()
            return ends

        return trio.run(run)

    def kill(self, victim: str, core: CoreProcess, *, hold_rerun: bool) -> CoreProcess:
        """SIGKILL the victim; a killed core is started again on the same
        home and gateway port (with ``hold_rerun``, the first request of its
        re-runs is held under ``second``, so resends find it running)."""
        if victim == "gateway":
            os.kill(gateway_row(self.home).pid, signal.SIGKILL)
            return core
        core.proc.send_signal(signal.SIGKILL)
        core.proc.wait(10)
        if hold_rerun:
            with self.model.lock:
                self.model.hold_next = "second"
        return start_core_process(self.home, self.log, gateway_port=self.port)

    def until_ended(self) -> None:
        """Until every key's turn has a recorded end (the client is away)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            ledger = TurnLedger.read(self.home)
            turns = [t for s in self.sent for t in _turns(ledger, s.key)]
            if turns and all(ledger.ends.get(t) for t in turns):
                return
            assert time.monotonic() < deadline, f"turns not ended: {ledger}"
            time.sleep(0.02)  # polling the ledger, not waiting out a race

    def after_kill(self, seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Reconnect, send again every message whose end was not seen (same
        key), let the held answers go, and read until every key's end came."""
        ledger = TurnLedger.read(self.home)
        ended = {ledger.end_of(e) for e in seen}
        unseen = [s for s in self.sent if not set(_turns(ledger, s.key)) <= ended]

        async def run() -> list[dict[str, Any]]:
            c = await reconnect(self.port, self.cookie)
            with trio.fail_after(WAIT_S):
                rids = [
                    (s, await c.start("send", session=SESSION, text=s.text, key=s.key, mode=s.mode))
                    for s in unseen
                ]
                for s, rid in rids:
                    again = await c.response(rid)
                    assert again["ok"], (s, again)
                    # The same message, acknowledged again: not a new one.
                    assert again["result"]["message_seq"] == s.ack["message_seq"], (s, again)
                for name in ("first", "second"):
                    await trio.to_thread.run_sync(self.release, name)
                got: list[dict[str, Any]] = []
                while True:
                    now = await trio.to_thread.run_sync(TurnLedger.read, self.home)
                    have = {now.end_of(e) for e in seen + got}
                    if all(set(_turns(now, s.key)) <= have for s in self.sent):
                        break
                    got.append(await c.until_event(ENDS, SESSION))
            await c.aclose()
            return got

        return trio.run(run)


def _turns(ledger: TurnLedger, key: str) -> list[str]:
    return ledger.messages.get(key, []) + ledger.steers.get(key, [])


def _check(ledger: TurnLedger, sent: list[Sent], seen: list[dict[str, Any]]) -> None:
    by_turn = {ledger.end_of(e): e for e in seen}
    head = ledger.turn_of(sent[0].key)
    answers = {
        t: b.text for t, ends in ledger.ends.items() for k, _, b in ends if k == "turn.reply"
    }
    for i, s in enumerate(sent):
        if s.ack["steered"]:
            assert len(ledger.steers.get(s.key, [])) == 1, (s, ledger.steers)
            assert s.key not in ledger.messages, (s, ledger.messages)
        else:  # a steer that found no turn running is a followup
            assert len(ledger.messages.get(s.key, [])) == 1, (s, ledger.messages)
            assert s.key not in ledger.steers, (s, ledger.steers)
        turn = ledger.turn_of(s.key)
        ends = ledger.ends.get(turn, [])
        assert len(ends) == 1, (s, ends)
        event = by_turn.get(turn)
        assert event is not None, f"{s.key}'s end never reached its client: {seen}"
        if event["event"] == "turn.final":
            assert event["data"]["text"], event
            assert event["data"]["text"] == answers[turn], (event, answers)
        # What ran, by mode: only a later interrupt may stop a turn.
        stoppable = any(later.mode == "interrupt" for later in sent[i + 1 :])
        if s.ack["steered"]:
            # Never seen twice by the model; once, when it steered the head
            # turn (whose first answer is a tool call, a boundary, or its
            # last answer, which then gets one more model call).
            assert answers.get(turn, "").count(s.text) <= 1, answers
            if turn == head and not stoppable:
                assert answers[head].count(s.text) == 1, answers
        elif i and not stoppable:
            assert turn != head, (s, answers)
            assert s.text in answers.get(turn, ""), (s, answers)
    for s, after in itertools.pairwise(sent):
        if s.mode == after.mode == "collect":
            merged = answers[ledger.turn_of(s.key)]
            assert merged == answers[ledger.turn_of(after.key)], answers
            assert f"{s.text}\n\n{after.text}" in merged, merged
    if any(s.mode == "interrupt" for s in sent):
        # The head was running when the interrupt came: its abort is durable
        # before the interrupt's acknowledgement, so no kill brings it back.
        ((kind, _, body),) = ledger.ends[head]
        assert (kind, body.error_kind) == ("turn.error", tpb.TURN_ERROR_KIND_ABORTED), body
