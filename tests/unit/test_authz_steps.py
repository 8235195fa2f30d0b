"""TokenAuthority's steps (authenticate, check, settle): the pure ones read
nothing of the world, and run in steps they refuse exactly as verify does."""

from __future__ import annotations

import pytest

from naga.tokens import RejectReason, Risk
from naga_core.authz import RootKey, TokenAuthority, TokenRejected
from naga_core.kernel import TrustLevel
from tests.authz_helpers import KEY, VirtualClock, World


def _untouchable(_: object) -> object:
    raise AssertionError("a pure step read the world")


def test_authenticate_and_check_read_nothing_but_the_key_and_the_clock() -> None:
    world = World()
    token = world.authority().mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=5)
    pure = TokenAuthority.create(
        KEY,
        clock=VirtualClock(),
        is_revoked=_untouchable,  # type: ignore[arg-type]
        spent=_untouchable,  # type: ignore[arg-type]
        trust_of=_untouchable,  # type: ignore[arg-type]
    )
    checked = pure.check(
        pure.authenticate(token.to_bytes()), pure.request("executor", risk=Risk.R2)
    )
    assert checked.refusal is not None
    assert checked.refusal.reason is RejectReason.RISK_TOO_HIGH


def test_revocation_is_reported_before_what_the_pure_checks_found() -> None:
    world = World()
    authority = world.authority()
    token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, session="s-1")
    world.revoked.add(token.id)
    request = authority.request("executor", session="s-2")
    checked = authority.check(authority.authenticate(token.to_bytes()), request)
    assert checked.refusal is not None
    assert checked.refusal.reason is RejectReason.WRONG_SESSION
    for run in (
        lambda: authority.settle(checked),
        lambda: authority.verify(token.to_bytes(), request),
    ):
        with pytest.raises(TokenRejected) as info:
            run()
        assert info.value.reason is RejectReason.REVOKED


def test_a_role_refusal_of_the_caller_ranks_after_expiry() -> None:
    world = World()
    authority = world.authority()
    token = authority.mint("gateway", trust=TrustLevel.KNOWN, risk=Risk.R1, ttl_ns=10)
    t = authority.authenticate(token.to_bytes())
    mine = (RejectReason.WRONG_ROLE, "Spend is for executors")
    fresh = authority.check(t, authority.request("gateway"), role_refusal=mine)
    assert fresh.refusal is not None
    assert fresh.refusal.reason is RejectReason.WRONG_ROLE
    assert fresh.refusal.detail == "Spend is for executors"
    world.clock.advance(10)
    late = authority.check(t, authority.request("gateway"), role_refusal=mine)
    assert late.refusal is not None
    assert late.refusal.reason is RejectReason.EXPIRED


def test_another_key_fails_authentication() -> None:
    world = World()
    token = world.authority().mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1)
    other = World().authority(RootKey(bytes(32)))
    with pytest.raises(TokenRejected) as info:
        other.authenticate(token.to_bytes())
    assert info.value.reason is RejectReason.BAD_TAG
    assert info.value.principal is None
