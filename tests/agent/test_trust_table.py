"""The one trust table (naga.policy.POLICY, docs/design/trust.md) as the real
core enforces it, cell by cell: for each trust level the turn token the
core mints (its budget, risk ceiling, principal and tools, read from its
``token.minted`` record), the tools the model is offered (the fake model
records each request), and a turn that spends past its budget; then INV-6
on a live turn: lowering the peer while its reply streams ends the turn, a
raise does not, and only the owner raises.

The expected values are stated again here by hand, not read from the code
under test. The core runs in this process, its executor and provider in
their sandboxes, against the fake model over real HTTP on loopback.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from naga.sdk import Client
from naga.sdk.errors import PermissionDenied
from naga.tokens import Risk
from naga.trust import TrustLevel
from naga.v1 import authz_pb2 as zpb
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import AgentConfig
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import TUNING, ServerThread, error, final, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S

PLUGINS = Path(__file__).resolve().parent / "trust_plugins"
GUARD_S = 60.0
MINTED_KIND = "token.minted"

# The table, stated again by hand.
BUDGET = {
    TrustLevel.OWNER: 200_000,
    TrustLevel.KNOWN: 50_000,
    TrustLevel.GUEST: 10_000,
    TrustLevel.UNTRUSTED: 2_000,
}
CEILING = {  # zpb.RiskLevel: R0 = 1 .. R4 = 5
    TrustLevel.OWNER: zpb.RISK_LEVEL_R4,
    TrustLevel.KNOWN: zpb.RISK_LEVEL_R2,
    TrustLevel.GUEST: zpb.RISK_LEVEL_R0,
    TrustLevel.UNTRUSTED: zpb.RISK_LEVEL_R0,
}
# The core's own memory tools follow the same rows: memory.search is R0,
# memory.write R1 (naga_core.agent._memory_tools).
_MEMORY = ["memory.search", "memory.write"]
OFFERED = {
    # job.create (R2) is the core's own tool (naga_core.scheduler).
    TrustLevel.OWNER: [
        "job.create",
        *_MEMORY,
        "risky.r0",
        "risky.r1",
        "risky.r2",
        "risky.r3",
        "risky.r4",
    ],
    TrustLevel.KNOWN: ["job.create", *_MEMORY, "risky.r0", "risky.r1", "risky.r2"],
    TrustLevel.GUEST: ["memory.search", "risky.r0"],
    TrustLevel.UNTRUSTED: [],
}
LEVELS = list(TrustLevel)

AGENT = AgentConfig(executors=1, model_read_timeout_s=30.0, model_max_retries=0, turn_timeout_s=60)


@pytest.fixture(scope="module")
def core(model_server: ServerThread) -> Iterator[InProcessCore]:
    root = tempfile.mkdtemp(prefix="naga-tt-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT) as served:
            with served.client() as c:
                c.enable_plugin("risky", wait=READY_S)
            yield served
            with served.client() as c:
                c.shutdown("tests done")
            assert not served.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def owner(core: InProcessCore) -> Iterator[Client]:
    with core.client() as c:
        yield c


def _peer(owner: Client, level: TrustLevel) -> str:
    """A fresh peer at ``level`` in the trust table (set by the owner)."""
    peer = f"wechat:{level.label}-{uuid.uuid4().hex[:8]}"
    owner.set_trust(peer, level.label, by_owner=True, reason="test cell")
    return peer


def _turn(owner: Client, peer: str, text: str) -> list[tpb.TurnEvent]:
    session = "s-" + uuid.uuid4().hex[:10]
    return list(owner.run_turn(session, text, uuid.uuid4().hex, peer=peer, timeout=GUARD_S))


def _minted(owner: Client, message_seq: int) -> zpb.TokenMinted:
    """The turn token's record: it rides the message's commit, right after it."""
    (record,) = owner.records(message_seq + 1, 1)
    assert record.kind == MINTED_KIND
    return zpb.TokenMinted.FromString(record.payload)


def _requests(model_server: ServerThread) -> int:
    return int(model_server.run(lambda: len(model_server.server.requests)))


def _offered(model_server: ServerThread, index: int) -> list[str]:
    body = model_server.run(model_server.server.requests[index].json)
    return sorted(t["function"]["name"].replace("__", ".") for t in body.get("tools", []))


@pytest.mark.parametrize("level", LEVELS, ids=[lv.label for lv in LEVELS])
def test_a_turn_is_minted_and_offered_its_trusts_row(
    owner: Client, model_server: ServerThread, level: TrustLevel
) -> None:
    peer = _peer(owner, level)
    before = _requests(model_server)
    model_server.script(Reply.answer("hello", usage=(3, 2)))
    events = _turn(owner, peer, "hi")
    assert final(events).text == "hello"
    token = _minted(owner, events[0].accepted.message_seq)
    assert token.minted_by == f"core: turn {events[0].accepted.turn_id}"
    assert token.role == "executor"
    assert token.principal == peer
    assert token.budget_ceiling == BUDGET[level]
    assert token.risk_ceiling == CEILING[level]
    assert token.HasField("tools")
    assert list(token.tools.names) == OFFERED[level]
    # What the model was shown: the same tools, no more.
    assert _requests(model_server) == before + 1
    assert _offered(model_server, -1) == OFFERED[level]


@pytest.mark.parametrize("level", LEVELS, ids=[lv.label for lv in LEVELS])
def test_a_turn_past_its_trusts_budget_ends_with_a_budget_error(
    owner: Client, model_server: ServerThread, level: TrustLevel
) -> None:
    peer = _peer(owner, level)
    # The first call spends the whole budget and asks for a tool, so the loop
    # goes on; the next model call is refused by the budget.
    model_server.script(
        Reply.answer(tool_calls=(("c1", "risky__r0", "{}"),), usage=(BUDGET[level], 1))
    )
    events = _turn(owner, peer, "spend it all")
    failed = error(events)
    assert failed.kind == tpb.TURN_ERROR_KIND_BUDGET
    assert f"budget of {BUDGET[level]} tokens is spent" in failed.message
    finished = next(e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished")
    assert finished.ok is (level is not TrustLevel.UNTRUSTED)  # untrusted: offered no tool


def test_the_model_cannot_call_a_tool_above_its_trust(
    owner: Client, model_server: ServerThread
) -> None:
    peer = _peer(owner, TrustLevel.GUEST)
    model_server.script(
        Reply.answer(tool_calls=(("c1", "risky__r1", "{}"),)), Reply.answer("I may not.")
    )
    events = _turn(owner, peer, "write something")
    finished = next(e.tool_finished for e in events if e.WhichOneof("kind") == "tool_finished")
    assert not finished.ok
    assert "risk R1 is above the session's ceiling R0 (trust guest)" in finished.error
    assert final(events).text == "I may not."


class _Streaming:
    """A turn of ``peer`` in a thread whose reply streams its first piece
    and then holds until :meth:`release`."""

    def __init__(self, core: InProcessCore, model_server: ServerThread, peer: str) -> None:
        self._model = model_server
        self._gate = trio.Event()
        self.events: list[tpb.TurnEvent] = []
        self.failure: BaseException | None = None
        model_server.script(Reply.held("first piece, then the rest", self._gate, pieces=2))
        key = uuid.uuid4().hex

        def run() -> None:
            try:
                with core.client() as c:
                    self.events.extend(c.run_turn("s-live", "go on", key, peer=peer, timeout=90))
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                self.failure = exc

        self._thread = threading.Thread(target=run)
        self._thread.start()
        # Readiness, not a guess: the first piece reached the stream (bounded
        # wait, polled, as the other turn tests do).
        deadline = time.monotonic() + GUARD_S
        while not any(e.WhichOneof("kind") == "delta" for e in list(self.events)):
            assert self._thread.is_alive() or self.events, self.failure
            assert time.monotonic() < deadline, "the reply never started streaming"
            time.sleep(0.01)

    def release(self) -> None:
        self._model.run(self._gate.set)

    def end(self) -> list[tpb.TurnEvent]:
        self._thread.join(GUARD_S)
        assert not self._thread.is_alive()
        assert self.failure is None, self.failure
        return self.events


def test_lowering_the_peer_while_its_reply_streams_ends_the_turn(
    core: InProcessCore, owner: Client, model_server: ServerThread
) -> None:
    peer = _peer(owner, TrustLevel.KNOWN)
    live = _Streaming(core, model_server, peer)
    try:
        owner.set_trust(peer, "guest", reason="shared the link")
        events = live.end()
    finally:
        live.release()
    cut = error(events)
    assert cut.kind == tpb.TURN_ERROR_KIND_ABORTED
    assert cut.message.startswith("the turn was cut: trust lowered to guest while in use")
    assert peer in cut.message
    assert "final" not in [e.WhichOneof("kind") for e in events]
    # The peer's next turn runs at its new trust.
    model_server.script(Reply.answer("fine"))
    again = _turn(owner, peer, "still there?")
    assert final(again).text == "fine"
    assert _minted(owner, again[0].accepted.message_seq).budget_ceiling == BUDGET[TrustLevel.GUEST]


def test_raising_the_peer_needs_the_owner_and_leaves_its_turn_running(
    core: InProcessCore, owner: Client, model_server: ServerThread
) -> None:
    peer = _peer(owner, TrustLevel.GUEST)
    gateway = owner.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4).token
    live = _Streaming(core, model_server, peer)
    try:
        with pytest.raises(PermissionDenied, match="from guest to known needs the owner"):
            owner.set_trust(peer, "known", reason="not asserted by the owner")
        with (
            Client.connect(core.info.home, credential=gateway) as holder,
            pytest.raises(PermissionDenied),
        ):
            holder.set_trust(peer, "known", reason="a process may not")
        assert owner.get_trust(peer).level == cpb.TRUST_LEVEL_GUEST
        owner.set_trust(peer, "known", by_owner=True, reason="the owner vouches")
    finally:
        live.release()
    events = live.end()
    assert final(events).text == "first piece, then the rest"
