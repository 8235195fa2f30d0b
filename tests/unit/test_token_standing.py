"""The pieces behind open streams' re-checks and the mint records, on their
own: ``TokenAuthority.recheck`` names why a grant no longer stands;
``TokenStanding`` reads the revocation list only when the epoch moved, and
its wait is woken by a revocation and at the expiry (virtual trio time tied
to the authority's clock: no real waiting); ``minted_record`` folds any
caveats like the authority does and never carries the token's tag."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from naga.tokens import Ancestor, Caveat, ExpiresAt, RejectReason, Risk, Token, TrustLevel
from naga.v1 import authz_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga_core.authz import (
    AuthzError,
    Grant,
    Scope,
    TokenAuthority,
    TokenRejected,
    describe_minted,
    mint_token,
    minted_record,
)
from naga_core.daemon import RevocationWatch, TokenStanding, TrustWatch
from tests.authz_helpers import KEY, T0, World
from tests.property.test_authz_properties import caveat_lists
from tests.seeds import pick_seed

SECOND = 10**9


def _grant(authority: TokenAuthority, token: Token) -> Grant:
    request = authority.request("executor")
    return authority.settle(authority.check(token, request))


def _still() -> TrustWatch:
    """A trust table that never changes."""
    return TrustWatch.over(lambda: 0)


def _refusal(call: Callable[[], object]) -> TokenRejected:
    with pytest.raises(TokenRejected) as info:
        call()
    return info.value


def test_recheck_names_revocation_of_the_token_or_an_ancestor_and_expiry() -> None:
    world = World()
    authority = world.authority()
    parent = _grant(authority, authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1))
    child = _grant(authority, authority.spawn(parent, budget=5, expires_at_ns=T0 + SECOND))
    authority.recheck(child)  # stands
    world.revoked.add(parent.token_id)
    refused = _refusal(lambda: authority.recheck(child))
    assert refused.reason is RejectReason.REVOKED
    assert "token revoked" in refused.detail
    assert "ancestor" in refused.detail
    world.revoked.clear()
    world.clock.advance(SECOND)
    refused = _refusal(lambda: authority.recheck(child))
    assert refused.reason is RejectReason.EXPIRED
    assert refused.detail.startswith("token expired")
    authority.recheck(parent)  # the parent has no expiry


def test_a_standing_reads_the_revocation_list_only_when_the_epoch_moved() -> None:
    world = World()
    asked: list[bytes] = []

    def is_revoked(token_id: bytes) -> bool:
        asked.append(token_id)
        return token_id in world.revoked

    authority = TokenAuthority.create(
        KEY,
        clock=world.clock,
        is_revoked=is_revoked,
        spent=lambda _tid: 0,
        trust_of=lambda _peer: TrustLevel.OWNER,
    )
    grant = _grant(authority, authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1))
    watch = RevocationWatch()
    standing = TokenStanding.of(authority, grant, watch, _still())
    asked.clear()
    for _ in range(100):
        standing.check()
    assert asked == []  # the cheap path: an epoch compare (and no expiry to read)
    watch.bump()  # someone else's revocation
    standing.check()
    assert asked == [grant.token_id]
    world.revoked.add(grant.token_id)
    standing.check()  # not told: the cheap path still says yes ...
    watch.bump()  # ... until the revocation is announced
    assert _refusal(standing.check).reason is RejectReason.REVOKED
    assert standing.deadline() == math.inf


def test_a_waiting_stream_is_woken_by_a_revocation_and_at_its_expiry() -> None:
    async def main() -> None:
        # The authority's clock runs with trio's (virtual, autojumping) one.
        world = World()
        authority = TokenAuthority.create(
            KEY,
            clock=lambda: T0 + int(trio.current_time() * 1e9),
            is_revoked=world.revoked.__contains__,
            spent=lambda _tid: 0,
            trust_of=lambda _peer: TrustLevel.OWNER,
        )
        token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, ttl_ns=5 * SECOND)
        watch = RevocationWatch()
        standing = TokenStanding.of(authority, _grant(authority, token), watch, _still())
        woken: list[float] = []

        async def wait_once() -> None:
            scope = trio.CancelScope(deadline=standing.deadline())
            with scope, standing.waking(scope):
                await trio.sleep_forever()
            woken.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_once)
            await trio.testing.wait_all_tasks_blocked()
            assert watch.waiting == 1
            await trio.sleep(1)
            watch.bump()  # a revocation: woken now, at t=1
        assert woken == [1.0]
        assert watch.waiting == 0
        standing.check()  # nothing of its own was revoked: it waits again
        await wait_once()  # nobody revokes: woken at its expiry
        assert woken == [1.0, 5.0]
        assert _refusal(standing.check).reason is RejectReason.EXPIRED

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_far_expiry_is_looked_at_again_within_the_relook_bound() -> None:
    world = World()
    authority = world.authority()
    token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, ttl_ns=10**6 * SECOND)
    standing = TokenStanding.of(authority, _grant(authority, token), RevocationWatch(), _still())

    async def main() -> None:
        # A wall clock set forward is noticed within RELOOK_S, not at the old deadline.
        assert standing.deadline() - trio.current_time() == pytest.approx(60.0)

    trio.run(main, clock=trio.testing.MockClock())


lineages = st.lists(
    st.builds(Ancestor, st.binary(min_size=16, max_size=16), st.none() | st.integers(0, 1 << 40)),
    max_size=3,
)


@seed(pick_seed(default=20261130))
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    cavs=caveat_lists,
    lineage=lineages,
    principal=st.none() | st.just("wechat:bob"),
    by=st.sampled_from(("owner", "core: gateway", "x" * 300)),
)
def test_a_mint_record_folds_the_caveats_and_never_holds_the_tag(
    cavs: list[Caveat], lineage: list[Ancestor], principal: str | None, by: str
) -> None:
    token = mint_token(
        KEY, token_id=bytes(range(16)), principal=principal, lineage=lineage, caveats=cavs
    )
    record = minted_record(token, by=by)
    wire = record.SerializeToString(deterministic=True)
    assert token.tag not in wire
    assert token.to_bytes() not in wire
    back = apb.TokenMinted.FromString(wire)
    scope = Scope.of(cavs)
    assert back.id == token.id
    assert back.parent_id == (lineage[0].id if lineage else b"")
    assert list(back.lineage) == [a.id for a in lineage]
    assert back.principal == (principal or "")
    assert back.risk_ceiling == apb.RISK_LEVEL_R0 + int(scope.risk)
    assert back.trust == cpb.TrustLevel.Value(f"TRUST_LEVEL_{scope.trust.name}")
    assert back.HasField("tools") == (scope.tools is not None)
    assert set(back.tools.names) == set(scope.tools or ())
    assert (back.budget_ceiling if back.HasField("budget_ceiling") else None) == scope.budget
    expiry = back.expires_at_ns if back.HasField("expires_at_ns") else None
    assert expiry == scope.expires_at_ns
    assert back.minted_by == by[:200]
    assert token.id.hex() in describe_minted(back)


@pytest.mark.parametrize(
    ("expires_ns", "shown"),
    [
        (1_796_180_640_021_596_721, "expires 2026-12-02 03:04:00 UTC"),
        (0, "expires 1970-01-01 00:00:00 UTC"),
        (2**63 - 1, "expires 2262-04-11 23:47:16 UTC"),
        (-(2**63), "expires 1677-09-21 00:12:43 UTC"),
    ],
)
def test_a_mint_record_says_its_expiry_as_a_time(expires_ns: int, shown: str) -> None:
    msg = apb.TokenMinted(id=bytes(16), role="executor", minted_by="core")
    msg.expires_at_ns = expires_ns
    assert shown in describe_minted(msg)


def test_a_mint_record_needs_who_asked() -> None:
    token = mint_token(KEY, token_id=bytes(16), principal=None, lineage=(), caveats=[ExpiresAt(1)])
    with pytest.raises(AuthzError, match="needs who asked"):
        minted_record(token, by="  ")
