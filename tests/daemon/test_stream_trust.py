"""A lowered trust reaches open Subscribe streams, on a real core over gRPC:
a stream of a token held for a principal ends with PERMISSION_DENIED ("trust
lowered to guest while in use") when the trust table puts the principal
below what the stream was admitted at, whoever lowered it (the owner, the
violation policy, a rollback), idle or busy; a change to another peer's
trust, or a rise of its own, leaves it alone.

The idle streams here are an executor's Subscribe to ``kernel.effect``,
which that role may never see (it gets only caught_up events). A Subscribe
is woken by the lowering's own record too; that the trust watch alone wakes
an idle stream is shown on a Run stream, whose turn appends nothing while
it waits (tests/agent/test_run_standing.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator

import pytest

from naga.sdk import Client, errors
from naga.tokens import RejectReason, Token, TrustLevel
from naga.v1 import ledger_pb2 as lpb
from tests.daemon.token_helpers import TokenCore, caught_up, refused, token_core

#: Bounds a stream that should have been cut and was not (the test fails
#: with DEADLINE_EXCEEDED instead of hanging).
GUARD_S = 20.0
BOB = "wechat:bob"
LOWERED = "trust lowered to guest while in use: wechat:bob"


@contextlib.contextmanager
def _cut() -> Generator[pytest.ExceptionInfo[errors.PermissionDenied]]:
    """Expect the trust cut: PERMISSION_DENIED naming the fall, not a token
    refusal (a lowered trust is not a bad token, nor a violation)."""
    with pytest.raises(errors.PermissionDenied) as info:
        yield info
    assert info.value.code == "PERMISSION_DENIED", info.value
    assert not isinstance(info.value, errors.TokenRefused)
    assert LOWERED in str(info.value)


def _bob(c: TokenCore, role: str = "executor", **kw: object) -> Token:
    c.owner.set_trust(BOB, "known", by_owner=True)
    return c.mint(role, principal=BOB, session="s-1", **kw)


def _idle(h: Client) -> Iterator[lpb.SubscribeEvent]:
    events = iter(h.subscribe(0, kinds=["kernel.effect"], timeout=GUARD_S))
    assert caught_up(events) == []  # an executor sees no kernel effect
    return events


def test_an_idle_stream_is_cut_when_the_owner_lowers_its_principals_trust(home: str) -> None:
    with token_core(home) as c, c.holder(_bob(c)) as h:
        events = _idle(h)
        c.owner.set_trust(BOB, "guest", reason="shared the link")
        with _cut():
            next(events)
        h.head()  # the token still works for new calls, judged at guest


def test_a_gateway_stream_never_delivers_the_record_that_lowered_its_trust(home: str) -> None:
    with token_core(home) as c:
        for n in range(300):  # a backlog: the stream is busy when the trust falls
            c.owner.set_setting("agent.max_steps", 1 + n % 50)
        got: list[lpb.Record] = []
        with c.holder(_bob(c, "gateway", trust=TrustLevel.OWNER)) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            got.append(next(events).record)
            lowered = c.owner.set_trust(BOB, "guest").seq
            with _cut():
                for event in events:
                    if event.WhichOneof("event") == "record":
                        got.append(event.record)
        assert all(r.seq < lowered for r in got)


def test_repeated_violations_cut_the_principals_open_stream(home: str) -> None:
    with token_core(home) as c:
        token = _bob(c)
        with c.holder(token) as watcher, c.holder(token) as bob:
            events = _idle(watcher)
            for _ in range(2):  # below the policy's threshold (3): it stays known
                with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_SESSION):
                    bob.spend(1, session="s-other")
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_SESSION):
                bob.spend(1, session="s-other")  # the third lowers bob to guest
            with _cut() as info:
                next(events)
            assert "now says guest" in str(info.value)


def test_another_peers_change_or_a_rise_of_its_own_leaves_the_stream_alone(home: str) -> None:
    with token_core(home) as c, c.holder(_bob(c, "gateway", trust=TrustLevel.OWNER)) as h:
        c.owner.set_trust("wechat:alice", "known", by_owner=True)
        events = iter(h.subscribe(0, timeout=GUARD_S))
        caught_up(events)
        alice = c.owner.set_trust("wechat:alice", "guest").seq
        raised = c.owner.set_trust(BOB, "owner", by_owner=True).seq
        setting = c.owner.set_setting("agent.max_steps", 7).seq
        after: list[int] = []
        while setting not in after:
            after += [r.seq for r in caught_up(events)]
        assert after == [alice, raised, setting]


def test_a_rollback_that_lowers_the_trust_cuts_the_stream(home: str) -> None:
    with token_core(home) as c:
        c.owner.set_trust(BOB, "guest", by_owner=True)
        raised = c.owner.set_trust(BOB, "known", by_owner=True).seq
        assert raised is not None
        with c.holder(c.mint(principal=BOB, session="s-1")) as h:
            events = _idle(h)
            c.owner.rollback(raised - 1)  # lowers bob: no owner needed
            with _cut():
                next(events)
