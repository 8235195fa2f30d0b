"""Revocation and expiry reach open Subscribe streams, on a real core over
gRPC: an idle stream (caught up, waiting for records) and a busy one (a
backlog in flight) each end with the specific status as soon as their token,
or an ancestor of it, is revoked or expires by the core's clock; a stream
whose token is still good goes on when another token is revoked; a rollback
that brings a revocation back ends the stream again."""

from __future__ import annotations

from collections.abc import Iterator

from naga.sdk import errors
from naga.tokens import RejectReason, Token, TrustLevel
from naga.v1 import ledger_pb2 as lpb
from tests.daemon.token_helpers import SECOND, TokenCore, caught_up, refused, token_core

#: Bounds a stream that should have been cut and was not: the test fails
#: (DEADLINE_EXCEEDED is not the refusal it expects) instead of hanging.
GUARD_S = 20.0
REVOKED = RejectReason.REVOKED


def _drain(events: Iterator[lpb.SubscribeEvent], into: list[lpb.Record]) -> None:
    for event in events:
        if event.WhichOneof("event") == "record":
            into.append(event.record)


def _gateway(c: TokenCore, **kw: object) -> Token:
    # The gateway role sees every record kind: the revocation's own record
    # would reach it if the stream were not cut first.
    return c.mint("gateway", trust=TrustLevel.OWNER, **kw)


def test_an_idle_subscriber_is_cut_with_permission_denied_when_its_token_is_revoked(
    home: str,
) -> None:
    with token_core(home) as c:
        token = _gateway(c)
        with c.holder(token) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            caught_up(events)
            seq = c.owner.revoke(token, "stolen laptop")
            assert seq is not None
            with refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED) as info:
                next(events)
            assert "token revoked" in info.value.detail
            assert token.id.hex() in info.value.detail


def test_a_busy_subscriber_is_cut_and_never_sees_the_revocation(home: str) -> None:
    with token_core(home) as c:
        for n in range(600):  # more than two batches of backlog
            c.owner.set_setting("agent.max_steps", 1 + n % 50)
        token = _gateway(c)
        got: list[lpb.Record] = []
        with c.holder(token) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            got.append(next(events).record)
            seq = c.owner.revoke(token, "compromised")
            assert seq is not None
            with refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED):
                _drain(events, got)
        # What was in flight may arrive; nothing from the revocation on.
        assert got
        assert all(r.seq < seq for r in got)


def test_revoking_an_ancestor_cuts_the_sub_task_stream(home: str) -> None:
    with token_core(home) as c:
        parent = c.mint("executor")  # executors spawn sub-tasks
        with c.holder(parent) as p:
            child = p.spawn(10)
        with c.holder(child.token) as ch:
            events = iter(ch.subscribe(0, kinds=["kernel.effect"], timeout=GUARD_S))
            caught_up(events)
            c.owner.revoke(parent, "the parent's process was replaced")
            with refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED) as info:
                next(events)
            assert "ancestor" in info.value.detail


def test_an_idle_subscriber_is_cut_with_unauthenticated_when_its_token_expires(
    home: str,
) -> None:
    with token_core(home) as c:
        # A short life, so the stream's wake-up at its expiry comes soon;
        # whether it expired is the core's clock's word, moved by the test.
        token = _gateway(c, ttl_ns=SECOND // 4)
        with c.holder(token) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            caught_up(events)
            c.clock.advance(SECOND // 4)
            with refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", RejectReason.EXPIRED):
                next(events)


def test_a_busy_subscriber_is_cut_when_its_token_expires(home: str) -> None:
    with token_core(home) as c:
        for n in range(600):
            c.owner.set_setting("agent.max_steps", 1 + n % 50)
        token = _gateway(c, ttl_ns=60 * SECOND)
        with c.holder(token) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            next(events)
            c.clock.advance(60 * SECOND)
            with refused(
                errors.TokenUnauthenticated, "UNAUTHENTICATED", RejectReason.EXPIRED
            ) as info:
                _drain(events, [])
            assert "token expired" in info.value.detail


def test_a_stream_whose_token_is_good_goes_on_when_another_is_revoked(home: str) -> None:
    with token_core(home) as c:
        kept, dropped = _gateway(c), _gateway(c)
        with c.holder(kept) as k, c.holder(dropped) as d:
            good = iter(k.subscribe(0, timeout=GUARD_S))
            bad = iter(d.subscribe(0, timeout=GUARD_S))
            caught_up(good)
            caught_up(bad)
            seq = c.owner.revoke(dropped, "retired")
            with refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED):
                next(bad)
            assert seq is not None
            setting = c.owner.set_setting("agent.max_steps", 7).seq
            after: list[int] = []
            while setting not in after:
                after += [r.seq for r in caught_up(good)]
            assert after == [seq, setting]  # the revocation, then the setting


def test_a_rollback_past_a_revocation_leaves_the_stream_cut(home: str) -> None:
    """A rollback never lifts a revocation, not even the owner's (ADR 0046):
    the revoked token's stream stays refused after it."""
    with token_core(home) as c:
        token = _gateway(c)
        with c.holder(token) as h:
            events = iter(h.subscribe(0, timeout=GUARD_S))
            caught_up(events)
            revoked_at = c.owner.revoke(token, "by mistake")
            assert revoked_at is not None
            with refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED):
                next(events)
        preview = c.owner.rollback(revoked_at - 1, dry_run=True).preview
        assert not [ch for ch in preview.changes if ch.family == "token.revoked"]
        assert c.owner.rollback(revoked_at - 1, by_owner=True).HasField("seq")
        with (
            c.holder(token) as h,
            refused(errors.TokenDenied, "PERMISSION_DENIED", REVOKED),
        ):
            next(iter(h.subscribe(0, timeout=GUARD_S)))
