"""The core's memory does not grow with the number of turns: the agent's
per-turn structures stay bounded through the real turn path (a core in this
process, its executors and provider plugin, the fake model), the idempotency
window replays inside it and runs anew outside it, and a restart rebuilds
the same window from the ledger.

Small windows (3 keys per session, 2 sessions in memory) make the bounds
reachable in a few dozen turns; the defaults are naga/constants.py's. The
agent is found among the live objects of this process (the core runs in a
thread here) only to count its structures: counts, not RSS, so the test is
deterministic."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio

from naga.sdk import Client
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import Agent
from naga_core.agent._sessions import KEPT_ENTRIES, Ended
from naga_core.authz import SPENT_FAMILY
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import AGENT, PLUGINS, TUNING, ServerThread, final, turn, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home

SMALL = dataclasses.replace(AGENT, keys_kept=3, sessions_kept=2)


@contextmanager
def core_on(home: str, **config: object) -> Generator[InProcessCore]:
    plugins = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    with core_in_thread(home, plugins=plugins, agent=SMALL, **config) as core:
        yield core
        with core.client() as c:
            c.shutdown("test done")
        assert not core.join().failed


@pytest.fixture
def home(model_server: ServerThread) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="naga-mem-")
    home = os.path.join(root, "home")
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    try:
        yield home
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: Every Agent made during the running test, newest last (see _record_agents).
_MADE: list[Agent] = []


@pytest.fixture(autouse=True)
def _record_agents(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Note each Agent as the core makes it. Not gc.get_objects(): a core
    runs in this process's threads, and handing out every live object can
    catch a tuple another thread is still building, which then fails with
    "SystemError: bad argument to internal function" (seen once in CI, in
    the provider's launch)."""
    made = Agent.__init__

    def note(self: Agent, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        _MADE.append(self)

    monkeypatch.setattr(Agent, "__init__", note)
    yield
    _MADE.clear()


def agent_of(home: str) -> Agent:
    """The agent of the core serving ``home`` now (the newest made for it)."""
    found = [a for a in _MADE if a.core.home.root == os.path.abspath(home)]
    assert found, "no agent was made for this home"
    return found[-1]


def requests(model_server: ServerThread) -> int:
    return model_server.run(lambda: len(model_server.server.requests))


def say(c: Client, ms: ServerThread, session: str, key: str, answer: str) -> list[tpb.TurnEvent]:
    ms.script(Reply.answer(answer, usage=(5, 1)))
    return turn(c, session, f"message {key}", key=key)


def assert_bounded(agent: Agent) -> None:
    sessions = agent.sessions
    assert sessions.loaded() <= SMALL.sessions_kept
    loaded = [s for s in sessions.recent(len(sessions)) if s.detail is not None]
    assert len(loaded) == sessions.loaded()
    for s in loaded:
        assert s.detail is not None
        assert len(s.detail.keys) <= SMALL.keys_kept
        assert len(s.detail.entries) <= KEPT_ENTRIES
        assert not s.detail.open_keys  # no turn runs
    assert agent.running == {}
    assert agent.sessions.recent(1)  # summaries stay


def test_many_turns_keep_the_agent_structures_bounded(
    home: str, model_server: ServerThread
) -> None:
    with core_on(home) as core, core.client() as c:
        for i in range(48):
            final(say(c, model_server, f"m-{i % 6}", f"k-{i}", "ok " * 50))
        agent = agent_of(home)
        assert_bounded(agent)
        assert len(agent.sessions) == 6  # every session keeps its summary
        assert {s.turns for s in agent.sessions.recent(6)} == {8}
        # A key holds seqs (and whether it steered), never the reply text (a
        # replay reads the ledger).
        assert {f.name for f in dataclasses.fields(Ended)} == {
            "turn_id",
            "message_seq",
            "end_seq",
            "steer",
        }


def test_the_window_replays_inside_runs_anew_outside_and_survives_a_restart(
    home: str, model_server: ServerThread
) -> None:
    with core_on(home) as core, core.client() as c:
        first = {k: say(c, model_server, "w", k, f"answer {k}") for k in ("k0", "k1", "k2", "k3")}
        n = requests(model_server)
        # k1..k3 are the window: the recorded answer, no model call.
        for k in ("k3", "k1"):
            again = turn(c, "w", f"message {k}", key=k)
            assert again[0].accepted.replayed
            assert again[0].accepted.message_seq == first[k][0].accepted.message_seq
            assert final(again).text == f"answer {k}"
            assert final(again).reply_seq == final(first[k]).reply_seq
        assert requests(model_server) == n
        # k0 was pushed out by k3: sent again, it is a new message and runs.
        anew = say(c, model_server, "w", "k0", "answer k0 again")
        assert not anew[0].accepted.replayed
        assert anew[0].accepted.message_seq > first["k3"][0].accepted.message_seq
        assert final(anew).text == "answer k0 again"
        assert requests(model_server) == n + 1
        # The window is now k2, k3, k0.
    with core_on(home) as core, core.client() as c:
        assert_bounded(agent_of(home))
        n = requests(model_server)
        again = turn(c, "w", "message k0", key="k0")
        assert again[0].accepted.replayed
        assert final(again).text == "answer k0 again"
        assert final(turn(c, "w", "message k2", key="k2")).text == "answer k2"
        assert requests(model_server) == n
        anew = say(c, model_server, "w", "k1", "answer k1 after the restart")
        assert not anew[0].accepted.replayed
        assert requests(model_server) == n + 1


def test_a_session_dropped_from_memory_is_read_back_when_used(
    home: str, model_server: ServerThread
) -> None:
    with core_on(home) as core, core.client() as c:
        a1 = say(c, model_server, "a", "a1", "I remember a1")
        say(c, model_server, "a", "a2", "I remember a2")
        say(c, model_server, "b", "b1", "b")
        say(c, model_server, "c", "c1", "c")  # a is now out of memory
        agent = agent_of(home)
        a = agent.sessions.get("a")
        assert a is not None
        assert a.detail is None
        assert [s.session for s in c.sessions()] == ["c", "b", "a"]
        # A repeat of a1 is read back and replayed, not run.
        n = requests(model_server)
        again = turn(c, "a", "message a1", key="a1")
        assert again[0].accepted.replayed
        assert final(again).text == "I remember a1"
        assert final(again).reply_seq == final(a1).reply_seq
        assert requests(model_server) == n
        say(c, model_server, "b", "b2", "b")
        say(c, model_server, "c", "c2", "c")  # a is out again
        # History reads it back too, in full.
        texts = [e.text for e in c.session_history("a")]
        assert texts == ["message a1", "I remember a1", "message a2", "I remember a2"]
        say(c, model_server, "b", "b3", "b")
        say(c, model_server, "c", "c3", "c")  # and out again
        # A new turn in it gets its history in the prompt.
        say(c, model_server, "a", "a3", "and a3")
        prompt = model_server.run(model_server.server.requests[-1].json)
        contents = [m.get("content") for m in prompt["messages"]][1:]
        assert contents == [*texts, "message a3"]
        assert_bounded(agent)


def spent_entries(core: InProcessCore) -> int:
    """How many ``budget.spent`` entries the core's kernel state holds."""
    state = agent_of(core.info.home).core.kernel.state
    return trio.from_thread.run_sync(
        lambda: sum(1 for family, _ in state if family == SPENT_FAMILY),
        trio_token=core.token,
    )


def forgets(c: Client) -> list[int]:
    """The seqs of the effects that dropped expired tokens' spending."""
    return [e.seq for e in c.history(limit=20).entries if "expired token(s) spent" in e.description]


def spend(c: Client, ms: ServerThread, session: str, turns: int) -> None:
    """``turns`` turns in ``session``, each spending 6 of its token's budget."""
    for i in range(turns):
        final(say(c, ms, session, f"k-{i}", "spent"))


def test_what_expired_turn_tokens_spent_is_dropped_from_kernel_state(
    home: str, model_server: ServerThread
) -> None:
    with core_on(home) as core, core.client() as c:
        spend(c, model_server, "t", 5)
        agent = agent_of(home)
        assert spent_entries(core) == 5  # each turn's token spent 6 tokens
        assert agent.expiring == 5
        # Past every one of those tokens' expiry (a turn's timeout + 60 s):
        # the next turn's end drops them, in one effect, and queues its own.
        agent.clock = lambda: time.time_ns() + 10**13
        final(say(c, model_server, "t", "k-5", "spent"))
        assert spent_entries(core) == 1
        assert agent.expiring == 1
        assert len(forgets(c)) == 1


def test_a_restart_past_their_expiry_drops_what_earlier_turn_tokens_spent(
    home: str, model_server: ServerThread
) -> None:
    with core_on(home) as core, core.client() as c:
        spend(c, model_server, "r", 3)
        assert spent_entries(core) == 3
    # Before their expiry: kept, and queued again to be dropped later.
    with core_on(home) as core, core.client() as c:
        assert spent_entries(core) == 3
        assert agent_of(home).expiring == 3
        assert forgets(c) == []
    # Past it (a turn's timeout + 60 s): dropped at start, in one effect.
    with core_on(home, clock=lambda: time.time_ns() + 10**13) as core, core.client() as c:
        assert spent_entries(core) == 0
        assert agent_of(home).expiring == 0
        c.status()  # its settle makes the start's staged effect durable
        (swept,) = forgets(c)
        c.rollback(swept - 1)
        assert spent_entries(core) == 3
