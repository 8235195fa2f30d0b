"""One deadline (docs/adr/0009-turn-deadline-scheme.md), through the real
core, executors and provider plugin against the fake model over HTTP:

* a model that streams its answer for more than 90 s is slow, not hung:
  the turn completes, the provider is not rebuilt, and other sessions'
  calls on the same provider come and go meanwhile;
* a provider that stops (SIGSTOP: it answers no heartbeat) is found and
  rebuilt within seconds; only the call it held fails, and the next turn
  reaches the new worker.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import AgentConfig
from tests.agent.conftest import ServerThread, error, final, running_core
from tests.daemon.conftest import InProcessCore
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S

AGENT = AgentConfig(
    executors=3,
    model_read_timeout_s=30.0,
    model_max_retries=0,
    turn_timeout_s=300,
).with_budgets(1_000_000)
#: 20 text pieces 4.8 s apart, plus the closing events: about 100 s.
PIECES = 20
PACE_S = 4.8


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    with running_core(model_server, AGENT) as c:
        yield c


def _provider(c: Client) -> cpb.ProcessStatus:
    rows = [p for p in c.status().processes if p.role.startswith("provider:")]
    assert len(rows) == 1, rows
    return rows[0]


def _in_thread(
    core: InProcessCore, session: str, text: str
) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        with core.client() as c:
            box["events"] = list(c.run_turn(session, text, uuid.uuid4().hex, timeout=280.0))
            box["done"] = time.monotonic()

    thread = threading.Thread(target=run, name=f"turn-{session}")
    thread.start()
    return thread, box


def _arrived(model_server: ServerThread, name: str) -> None:
    trio.from_thread.run(model_server.server.held, name, trio_token=model_server.token)


def _quick_turns(c: Client, model_server: ServerThread, prefix: str, n: int) -> None:
    for i in range(n):
        model_server.script(Reply.answer(f"quick {i}"))
        events = list(c.run_turn(f"{prefix}-{i}", "hi", uuid.uuid4().hex, timeout=READY_S))
        assert final(events).text == f"quick {i}"


@pytest.mark.slow
def test_a_reply_streamed_over_90_s_completes_while_other_sessions_go_on(
    core: InProcessCore, model_server: ServerThread
) -> None:
    words = " ".join(f"word{i}" for i in range(PIECES * 2))
    with core.client() as c:
        c.set_setting("model.timeout_s", 240.0)
        model_server.script(Reply.answer(words, pieces=PIECES, pace_s=PACE_S, hold="slow"))
        started = time.monotonic()
        slow, box = _in_thread(core, "s-slow", "tell me a long story")
        _arrived(model_server, "slow")
        model_server.run(lambda: model_server.server.release("slow"))
        provider = _provider(c)
        # While the slow answer streams: other sessions' turns on the same
        # provider, each answered at once.
        _quick_turns(c, model_server, "s-other", 5)
        assert slow.is_alive(), "the slow turn should still be streaming"
        slow.join(260)
        assert not slow.is_alive()
        took = box["done"] - started
        events: list[tpb.TurnEvent] = box["events"]
        assert final(events).text == words
        assert took > 90, took
        assert sum(1 for e in events if e.HasField("delta")) >= 2, "the reply did not stream"
        after = _provider(c)
        assert after.pid == provider.pid, "a slow answer was taken for a hung worker"
        _quick_turns(c, model_server, "s-after", 1)


def test_a_provider_that_stops_answering_heartbeats_is_rebuilt_and_only_its_call_fails(
    core: InProcessCore, model_server: ServerThread
) -> None:
    with core.client() as c:
        _quick_turns(c, model_server, "s-warm", 1)
        executors = {p.role: p.pid for p in c.status().processes if p.role.startswith("executor")}
        model_server.script(Reply.answer("never shown", hold="stuck"))
        stuck, box = _in_thread(core, "s-stuck", "hello?")
        _arrived(model_server, "stuck")
        provider = _provider(c)
        stopped_at = time.monotonic()
        os.kill(provider.pid, signal.SIGSTOP)
        stuck.join(READY_S)
        assert not stuck.is_alive()
        failed = error(box["events"])
        assert failed.kind == tpb.TURN_ERROR_KIND_MODEL, failed
        assert "provider" in failed.message
        # Found by the supervisor, not by the turn's deadline (300 s).
        assert box["done"] - stopped_at < 15, box["done"] - stopped_at
        model_server.run(lambda: model_server.server.release("stuck"))
        # The next turns reach a new worker; the executors were untouched.
        _quick_turns(c, model_server, "s-next", 2)
        assert _provider(c).pid != provider.pid
        now = {p.role: p.pid for p in c.status().processes if p.role.startswith("executor")}
        assert now == executors


def test_a_call_past_its_share_fails_alone_and_the_provider_serves_on(
    core: InProcessCore, model_server: ServerThread
) -> None:
    """model.timeout_s is one call's ceiling: the call past it ends its turn
    with a TIMEOUT model error; the provider is not rebuilt and another
    session's call on it, made meanwhile, is answered."""
    with core.client() as c:
        _quick_turns(c, model_server, "s-pre", 1)
        provider = _provider(c)
        c.set_setting("model.timeout_s", 3.0)
        try:
            model_server.script(Reply.answer("too late", hold="late"))
            late, box = _in_thread(core, "s-late", "take your time")
            _arrived(model_server, "late")
            _quick_turns(c, model_server, "s-meanwhile", 2)
            late.join(READY_S)
            assert not late.is_alive()
            failed = error(box["events"])
            assert failed.kind == tpb.TURN_ERROR_KIND_MODEL, failed
            # The adapter's own deadline (the core's share less the way back)
            # answered first, with a clear sentence.
            assert "within the call's 2.5 s deadline" in failed.message, failed.message
        finally:
            model_server.run(lambda: model_server.server.release("late"))
            c.set_setting("model.timeout_s", 120.0)
        _quick_turns(c, model_server, "s-post", 1)
        assert _provider(c).pid == provider.pid, "one slow call took the provider down"
