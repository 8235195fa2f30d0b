"""The pieces behind cutting a stream whose principal's trust was lowered,
on their own: the kernel's version of a family moves with every change to
it (registrations, the violation policy's lowering, rollbacks, aborts) and
with nothing else; ``TokenStanding`` looks the principal's level up only
when the trust epoch moved and refuses only a fall below the grant's trust;
``TrustWatch.notice`` wakes waiting streams only when the epoch moved."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from naga.tokens import Risk, TrustLevel
from naga_core.authz import Grant, TokenAuthority, TrustLowered, ViolationPolicy
from naga_core.daemon import RevocationWatch, TokenStanding, TrustWatch
from naga_core.kernel import TRUST_FAMILY, ActionFailed, Kernel, TrustTable, action
from naga_core.kernel._state import set_op
from tests.authz_helpers import KEY, World, sim_kernel

BOB = "wechat:bob"


def _grant(authority: TokenAuthority, principal: str | None) -> Grant:
    token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, principal=principal)
    return authority.settle(authority.check(token, authority.request("executor")))


def test_the_trust_version_moves_with_every_change_to_the_table_and_nothing_else() -> None:
    with sim_kernel() as (kernel, _ledger):
        table = TrustTable(kernel)
        seen = [kernel.version(TRUST_FAMILY)]

        def moved() -> bool:
            now = kernel.version(TRUST_FAMILY)
            changed = now != seen[-1]
            seen.append(now)
            return changed

        kernel.register("setting", "agent.max_steps", 3)
        assert not moved()
        table.set(BOB, TrustLevel.KNOWN, by_owner=True)
        assert moved()
        before_lowering = kernel.ledger.size - 1
        policy = ViolationPolicy.over(kernel, threshold=2)
        policy.record(BOB, "reached for another session")
        assert not moved()  # a count, not yet a lowering
        policy.record(BOB, "again")
        assert table.level(BOB) is TrustLevel.GUEST
        assert moved()
        kernel.rollback(before_lowering, by_owner=True)  # a rollback raising it back
        assert table.level(BOB) is TrustLevel.KNOWN
        assert moved()
        kernel.rollback(kernel.ledger.size - 1)  # changes nothing of the table
        assert not moved()


def test_an_aborted_trust_change_moves_the_version_twice() -> None:
    with sim_kernel() as (kernel, _ledger):
        before = kernel.version(TRUST_FAMILY)
        with pytest.raises(ActionFailed):
            kernel.perform(
                [action("nobody.handles.this")],  # no handler: the world part fails
                None,
                description="a trust write whose world part fails",
                forward=[set_op(TRUST_FAMILY, BOB, "guest")],
            )
        assert TrustTable(kernel).level(BOB) is TrustLevel.UNTRUSTED
        assert kernel.version(TRUST_FAMILY) == before + 2  # the write, then its abort


def _over(kernel: Kernel) -> tuple[TokenAuthority, TrustWatch, list[str]]:
    asked: list[str] = []
    table = TrustTable(kernel)

    def trust_of(peer: str) -> TrustLevel:
        asked.append(peer)
        return table.level(peer)

    authority = TokenAuthority.create(
        KEY,
        clock=World().clock,
        is_revoked=lambda _tid: False,
        spent=lambda _tid: 0,
        trust_of=trust_of,
    )
    return authority, TrustWatch.over_kernel(kernel), asked


def test_a_standing_looks_trust_up_only_when_the_table_moved_and_refuses_only_a_fall() -> None:
    with sim_kernel() as (kernel, _ledger):
        table = TrustTable(kernel)
        table.set(BOB, TrustLevel.KNOWN, by_owner=True)
        authority, trust, asked = _over(kernel)
        grant = _grant(authority, BOB)
        assert grant.trust is TrustLevel.KNOWN
        standing = TokenStanding.of(authority, grant, RevocationWatch(), trust)
        asked.clear()
        for _ in range(100):
            standing.check()
        assert asked == []  # the cheap path: an epoch compare
        table.set("wechat:alice", TrustLevel.GUEST, by_owner=True)
        standing.check()  # another peer's change: looked up once, stands
        standing.check()
        assert asked == [BOB]
        table.set(BOB, TrustLevel.OWNER, by_owner=True)
        standing.check()  # a rise stands
        table.set(BOB, TrustLevel.KNOWN, by_owner=True)
        standing.check()  # back to what it was admitted at: stands
        table.lower(BOB, TrustLevel.GUEST, "misbehaved")
        with pytest.raises(TrustLowered) as info:
            standing.check()
        assert str(info.value).startswith("trust lowered to guest while in use: wechat:bob")
        assert (info.value.principal, info.value.level) == (BOB, TrustLevel.GUEST)


def test_a_process_token_has_no_principal_whose_trust_could_fall() -> None:
    with sim_kernel() as (kernel, _ledger):
        authority, trust, asked = _over(kernel)
        standing = TokenStanding.of(authority, _grant(authority, None), RevocationWatch(), trust)
        TrustTable(kernel).set(BOB, TrustLevel.UNTRUSTED, by_owner=True)
        standing.check()
        assert asked == []


def test_the_watch_wakes_waiting_streams_only_when_the_epoch_moved() -> None:
    epoch = [0]
    watch = TrustWatch.over(lambda: epoch[0])

    async def main() -> None:
        woken: list[float] = []

        async def wait_once() -> None:
            with trio.CancelScope() as scope, watch.waking(scope):
                await trio.sleep_forever()
            woken.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_once)
            await trio.testing.wait_all_tasks_blocked()
            assert watch.waiting == 1
            await trio.sleep(1)
            watch.notice()  # a write that left the table alone
            await trio.testing.wait_all_tasks_blocked()
            assert (woken, watch.waiting) == ([], 1)
            await trio.sleep(1)
            epoch[0] += 1
            watch.notice()
        assert woken == [2.0]
        assert watch.waiting == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
