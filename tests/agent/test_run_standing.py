"""Revocation, expiry and a lowered trust reach an open TurnService.Run
stream: a gateway token's Run stream, idle while its turn waits on a stalled
model, ends with PERMISSION_DENIED (revoked; its principal's trust lowered)
or UNAUTHENTICATED (expired, by the core's clock) though the turn sends
nothing; the turn itself goes on (the owner's abort still finds it running).
Nothing appends to the ledger while the stream waits (the stalled model
call), so only the core's revocation and trust watches and the expiry
deadline can wake it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest

from naga.sdk import Client, TurnEvents, errors
from naga.tokens import RejectReason, Risk, Token, TrustLevel
from naga.v1 import authz_pb2 as apb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import AgentConfig
from naga_core.authz import MINTED_KIND
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import PLUGINS, TUNING, ServerThread, write_providers
from tests.daemon.conftest import InProcessCore, core_in_thread
from tests.daemon.token_helpers import SECOND, MovableClock, refused
from tests.fakes.model_server import Reply
from tests.ledger_helpers import verify_home
from tests.plugin_host.conftest import READY_S

GUARD_S = 20.0
#: A stalled model call gives up after this: long enough that a stream cut
#: while its turn still runs was cut by the watch or the deadline (not by
#: the turn's end), short enough that the next test's turn gets the
#: provider soon (an abort does not free it).
STALL_S = 3.0
AGENT = AgentConfig(
    executors=1,
    model_read_timeout_s=STALL_S,
    model_max_retries=0,
    turn_timeout_s=60,
).with_budgets(1000)


@pytest.fixture(scope="module")
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture(scope="module")
def core(model_server: ServerThread, clock: MovableClock) -> Iterator[InProcessCore]:
    root = tempfile.mkdtemp(prefix="naga-r-")
    home = root + "/home"
    os.makedirs(home, mode=0o700)
    write_providers(home, model_server.server.openai_url)
    config = PluginsConfig(roots=(str(PLUGINS),), tuning=TUNING)
    try:
        with core_in_thread(home, plugins=config, agent=AGENT, clock=clock) as served:
            yield served
            with served.client() as c:
                c.shutdown("tests done")
            assert not served.join().failed
        verify_home(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _open_turn(
    core: InProcessCore,
    owner: Client,
    model_server: ServerThread,
    *,
    ttl_ns: int | None = None,
    principal: str | None = None,
) -> tuple[Token, Client, str, Iterator[tpb.TurnEvent]]:
    """A gateway token's Run stream, accepted, its turn stalled in the model call."""
    model_server.script(Reply.stall())
    asked = model_server.run(lambda: len(model_server.server.requests))
    token = owner.mint(
        "gateway", trust=TrustLevel.OWNER, risk=Risk.R4, ttl_ns=ttl_ns, principal=principal
    ).token
    holder = Client.connect(core.info.home, credential=token)
    session = "s-" + uuid.uuid4().hex[:8]
    run: TurnEvents = holder.run_turn(session, "take your time", uuid.uuid4().hex, timeout=GUARD_S)
    events = iter(run)
    first = next(events)
    assert first.WhichOneof("kind") == "accepted"
    # Readiness, not a guess: once the fake model holds the turn's request,
    # the stream has long been back on the core's loop waiting for events
    # (bounded wait, polled, as tests/agent/test_turns.py does).
    deadline = time.monotonic() + GUARD_S
    while model_server.run(lambda: len(model_server.server.requests)) == asked:
        assert time.monotonic() < deadline, "the model call never arrived"
        time.sleep(0.01)
    return token, holder, session, events


def test_revoking_the_token_cuts_an_idle_run_stream(
    core: InProcessCore, model_server: ServerThread
) -> None:
    with core.client() as owner:
        token, holder, session, events = _open_turn(core, owner, model_server)
        with holder:
            owner.revoke(token, "the gateway was replaced")
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.REVOKED) as info:
                next(events)
            assert "token revoked" in info.value.detail
        # Cut while the turn still runs (the abort finds it): the revocation
        # woke the stream, not the turn's end.
        owner.abort_turn(session)


def test_expiry_cuts_an_idle_run_stream(
    core: InProcessCore, model_server: ServerThread, clock: MovableClock
) -> None:
    with core.client() as owner:
        _token, holder, session, events = _open_turn(core, owner, model_server, ttl_ns=SECOND // 4)
        with holder:
            clock.advance(SECOND // 4)
            with refused(
                errors.TokenUnauthenticated, "UNAUTHENTICATED", RejectReason.EXPIRED
            ) as info:
                next(events)
            assert "token expired" in info.value.detail
        owner.abort_turn(session)  # still running: the expiry cut it


def test_lowering_the_principals_trust_cuts_an_idle_run_stream(
    core: InProcessCore, model_server: ServerThread
) -> None:
    peer = "wechat:p-" + uuid.uuid4().hex[:8]  # the core is the module's: a peer of its own
    with core.client() as owner:
        owner.set_trust(peer, "known", by_owner=True)
        _token, holder, session, events = _open_turn(core, owner, model_server, principal=peer)
        with holder:
            owner.set_trust(peer, "guest", reason="shared the link")
            with pytest.raises(errors.PermissionDenied) as info:
                next(events)
            assert info.value.code == "PERMISSION_DENIED"
            assert f"trust lowered to guest while in use: {peer}" in str(info.value)
        # Cut while the turn still runs: the trust watch woke the stream
        # (the turn appends nothing while its model call stalls).
        owner.abort_turn(session)


def test_a_run_stream_goes_on_when_another_token_is_revoked(
    core: InProcessCore, model_server: ServerThread
) -> None:
    with core.client() as owner:
        _token, holder, session, events = _open_turn(core, owner, model_server)
        with holder:
            other = owner.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4).token
            owner.revoke(other, "retired")  # wakes the stream, which checks and waits again
            owner.abort_turn(session)
            rest = list(events)
        assert rest[-1].WhichOneof("kind") == "error"
        assert rest[-1].error.message == "the turn was aborted"


def test_turn_and_plugin_tokens_are_recorded_as_minted_by_the_core(
    core: InProcessCore, model_server: ServerThread
) -> None:
    with core.client() as owner:
        model_server.script(Reply.answer("hello", usage=(3, 2)))
        events = list(owner.run_turn("s-mint", "hi", uuid.uuid4().hex, timeout=GUARD_S))
        turn_id = events[0].accepted.turn_id
        message_seq = events[0].accepted.message_seq
        owner.enable_plugin("danger", wait=READY_S)
        by_seq = {
            r.seq: apb.TokenMinted.FromString(r.payload)
            for r in owner.records(0, 1000)
            if r.kind == MINTED_KIND
        }
        owner.disable_plugin("danger")
    # The turn's token rode the message's commit: the record right after it.
    turn = by_seq[message_seq + 1]
    assert turn.minted_by == f"core: turn {turn_id}"
    assert (turn.role, turn.session, turn.budget_ceiling) == ("executor", "s-mint", 1000)
    plugin = [m for m in by_seq.values() if m.minted_by == "core: plugin danger"]
    assert plugin
    assert plugin[0].role == "plugin"
    assert list(plugin[0].tools.names) == ["danger.echo", "danger.wipe"]
