"""The authorization algebra by example: spawn narrowing (INV-3), budgets
debited through the ledger against every ancestor, and the trust ratchet
(INV-6). The same laws over random inputs: tests/property/test_authz_properties.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naga.constants import TOKEN_MAX_SPAWN_DEPTH
from naga_core.authz import (
    AUTHZ_KEEPS,
    AUTHZ_RATCHETS,
    SPENT_FAMILY,
    VIOLATIONS_FAMILY,
    AuthzError,
    BudgetAccount,
    BudgetCeiling,
    EndedTokens,
    Grant,
    InvalidCaveat,
    InvalidRequest,
    RejectReason,
    RevocationList,
    Risk,
    Token,
    TokenAuthority,
    TokenRejected,
    ViolationPolicy,
    authz_raises,
)
from naga_core.kernel import (
    RATCHETS,
    Actions,
    Change,
    Kernel,
    KernelError,
    OwnerRequired,
    TrustLevel,
    TrustTable,
)
from naga_core.ledger import Ledger, SimulatedFileSystem
from tests.authz_helpers import KEY, VirtualClock, World, disk_kernel, sim_kernel
from tests.ledger_helpers import fixed_signer

SECOND = 10**9
BOB = "wechat:bob"


def _parent(world: World, **kw: object) -> tuple[TokenAuthority, Token, Grant]:
    authority = world.authority()
    args: dict[str, object] = {
        "trust": TrustLevel.KNOWN,
        "risk": Risk.R3,
        "session": "s-1",
        "principal": BOB,
        "tools": ["fs.read", "fs.write", "web.search"],
        "budget": 100,
        "ttl_ns": 600 * SECOND,
    }
    args.update(kw)
    token = authority.mint("executor", **args)  # type: ignore[arg-type]
    grant = authority.verify(token.to_bytes(), authority.request("executor", session="s-1"))
    return authority, token, grant


def _child_grant(authority: TokenAuthority, token: Token, session: str = "s-1") -> Grant:
    return authority.verify(token.to_bytes(), authority.request("executor", session=session))


# --- spawn ---------------------------------------------------------------------------------


def test_a_child_inherits_or_narrows_and_records_its_lineage() -> None:
    world = World()
    authority, token, parent = _parent(world)
    child_token = authority.spawn(
        parent, budget=40, tools=["fs.read"], risk=Risk.R1, trust=TrustLevel.GUEST
    )
    assert child_token.id != token.id
    assert child_token.principal == BOB
    child = _child_grant(authority, child_token)
    assert child.tools == frozenset({"fs.read"})
    assert (child.risk, child.trust, child.budget) == (Risk.R1, TrustLevel.GUEST, 40)
    assert (child.session, child.expires_at_ns) == (parent.session, parent.expires_at_ns)
    assert [(a.id, a.budget_ceiling) for a in child.lineage] == [(token.id, 100)]
    inherited = _child_grant(authority, authority.spawn(child, budget=39))
    assert inherited.depth == 2
    assert (inherited.tools, inherited.risk, inherited.trust) == (child.tools, Risk.R1, child.trust)
    assert [a.id for a in inherited.lineage] == [child.token_id, token.id]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"budget": 100}, "budget 100 is not below the parent's remaining 100"),
        ({"budget": 101}, "budget 101"),
        ({"tools": ["fs.read", "shell.exec"]}, "tools ['shell.exec'] are not the parent's"),
        ({"risk": Risk.R4}, "risk R4 is above the parent's R3"),
        ({"trust": TrustLevel.OWNER}, "trust owner is above the parent's known"),
        ({"session": "s-2"}, "session 's-2' is not the parent's 's-1'"),
        ({"expires_at_ns": "later"}, "is after the parent's"),
    ],
)
def test_every_widening_is_refused_and_nothing_is_minted(
    change: dict[str, object], words: str
) -> None:
    world = World()
    authority, _, parent = _parent(world)
    if change.get("expires_at_ns") == "later":
        assert parent.expires_at_ns is not None
        change = {"expires_at_ns": parent.expires_at_ns + 1}
    args: dict[str, object] = {"budget": 10, **change}
    drawn = world.ids_drawn
    with pytest.raises(TokenRejected) as info:
        authority.spawn(parent, **args)  # type: ignore[arg-type]
    assert info.value.reason is RejectReason.WIDENING
    assert words in str(info.value)
    assert info.value.principal == BOB
    assert world.ids_drawn == drawn  # no id drawn: nothing minted


def test_the_parents_spending_and_the_trust_table_bound_a_child() -> None:
    world = World()
    authority, token, parent = _parent(world)
    world.spent[token.id] = 60
    with pytest.raises(TokenRejected, match="not below the parent's remaining 40"):
        authority.spawn(parent, budget=40)
    assert _child_grant(authority, authority.spawn(parent, budget=39)).budget == 39
    world.trust[BOB] = TrustLevel.GUEST  # lowered since the parent's grant
    with pytest.raises(TokenRejected, match="trust known is above the parent's guest"):
        authority.spawn(parent, budget=1, trust=TrustLevel.KNOWN)
    assert _child_grant(authority, authority.spawn(parent, budget=1)).trust is TrustLevel.GUEST


def test_an_unlimited_parent_still_gives_a_finite_child_and_a_session_free_one_may_pick() -> None:
    world = World()
    authority, _, parent = _parent(world, budget=None, session=None, tools=None, ttl_ns=None)
    child = authority.spawn(parent, budget=5, session="s-7", tools=["a"], expires_at_ns=1)
    assert [c for c in child.caveats if isinstance(c, BudgetCeiling)] == [BudgetCeiling(5)]
    world.clock.now = 0
    grant = _child_grant(authority, child, session="s-7")
    assert (grant.budget, grant.session, grant.tools) == (5, "s-7", frozenset({"a"}))
    with pytest.raises(InvalidCaveat, match="child budget"):
        authority.spawn(parent, budget=-1)


def test_a_presented_attenuation_bounds_the_child_with_its_own_ceiling() -> None:
    world = World()
    authority, token, _ = _parent(world)
    narrowed = token.attenuate(BudgetCeiling(20))
    parent = _child_grant(authority, narrowed)
    assert parent.budget == 20
    child = _child_grant(authority, authority.spawn(parent, budget=19))
    assert [a.budget_ceiling for a in child.lineage] == [20]
    with pytest.raises(TokenRejected) as info:
        authority.spawn(parent, budget=20)
    assert info.value.reason is RejectReason.WIDENING


def test_spawning_past_the_depth_limit_is_refused() -> None:
    world = World()
    authority, _, grant = _parent(world, budget=1000)
    for depth in range(1, TOKEN_MAX_SPAWN_DEPTH + 1):
        grant = _child_grant(authority, authority.spawn(grant, budget=1000 - depth))
        assert grant.depth == depth
    with pytest.raises(TokenRejected) as info:
        authority.spawn(grant, budget=1)
    assert info.value.reason is RejectReason.SPAWN_TOO_DEEP


def test_a_revoked_or_expired_parent_cannot_spawn() -> None:
    world = World()
    authority, token, parent = _parent(world)
    world.revoked.add(token.id)
    with pytest.raises(TokenRejected) as info:
        authority.spawn(parent, budget=1)
    assert info.value.reason is RejectReason.REVOKED
    world.revoked.clear()
    world.clock.advance(600 * SECOND)
    with pytest.raises(TokenRejected) as info:
        authority.spawn(parent, budget=1)
    assert info.value.reason is RejectReason.EXPIRED


# --- budgets through the ledger ------------------------------------------------------------


def test_a_childs_spending_counts_against_every_ancestor_in_one_effect(tmp_path: Path) -> None:
    clock = VirtualClock()
    directory = str(tmp_path / "ledger")
    with disk_kernel(directory) as (kernel, ledger):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        account = BudgetAccount(kernel)
        root = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=100)
        g0 = authority.verify(root.to_bytes(), authority.request("executor"))
        g1 = authority.verify(
            authority.spawn(g0, budget=50).to_bytes(), authority.request("executor")
        )
        t2 = authority.spawn(g1, budget=30)
        g2 = authority.verify(t2.to_bytes(), authority.request("executor"))
        size = ledger.size
        seq = account.debit(g2, 20, what="a model call")
        assert seq is not None
        assert ledger.size == size + 1  # one effect for the three totals
        assert [account.spent(g.token_id) for g in (g0, g1, g2)] == [20, 20, 20]
        assert account.debit(g1, 25) is not None
        assert [account.spent(g.token_id) for g in (g0, g1, g2)] == [45, 45, 20]
        # g2 has 10 of its own left, but its parent only 5
        assert authority.verify(t2.to_bytes(), authority.request("executor")).budget == 5
        size = ledger.size
        with pytest.raises(TokenRejected, match=r"ancestor .* \(1 level\(s\) up\) to 51 of its 50"):
            account.debit(g2, 6)
        assert ledger.size == size
        assert account.debit(g2, 0) is None
        with pytest.raises(InvalidRequest):
            account.debit(g2, -1)
    with disk_kernel(directory) as (kernel, _):
        account = BudgetAccount(kernel)
        assert [account.spent(g.token_id) for g in (g0, g1, g2)] == [45, 45, 20]
        assert kernel.state.family(SPENT_FAMILY) == {
            g0.token_id.hex(): 45,
            g1.token_id.hex(): 45,
            g2.token_id.hex(): 20,
        }


def test_an_unlimited_token_still_cannot_overflow_its_total() -> None:
    with sim_kernel() as (kernel, _):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=VirtualClock())
        token = authority.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R0)
        grant = authority.verify(token.to_bytes(), authority.request("gateway"))
        account = BudgetAccount(kernel)
        account.debit(grant, (1 << 63) - 1)
        with pytest.raises(TokenRejected) as info:
            account.debit(grant, 1)
        assert info.value.reason is RejectReason.BUDGET_EXHAUSTED


def test_revocation_list_refuses_bad_input() -> None:
    with sim_kernel() as (kernel, _):
        revocations = RevocationList(kernel)
        with pytest.raises(AuthzError, match="needs a reason"):
            revocations.revoke(bytes(16), " ")
        with pytest.raises(AuthzError, match="16 bytes"):
            revocations.revoke(b"short", "why")


# --- the ratchet ---------------------------------------------------------------------------


def _verify_bob(authority: TokenAuthority, token: Token) -> Grant:
    return authority.verify(token.to_bytes(), authority.request("executor", session="s-1"))


def test_violations_lower_trust_and_grants_follow_at_once(tmp_path: Path) -> None:
    directory = str(tmp_path / "ledger")
    clock = VirtualClock()
    with disk_kernel(directory) as (kernel, _):
        table = TrustTable(kernel)
        table.set(BOB, TrustLevel.OWNER, by_owner=True)
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        policy = ViolationPolicy.over(kernel, threshold=3)
        token = authority.mint(
            "executor", trust=TrustLevel.KNOWN, risk=Risk.R2, session="s-1", principal=BOB
        )
        assert _verify_bob(authority, token).trust is TrustLevel.KNOWN  # the ceiling caps it
        bad = authority.request("executor", session="s-1", risk=Risk.R4)
        for n in (1, 2):
            with pytest.raises(TokenRejected) as info:
                authority.verify(token.to_bytes(), bad)
            assert policy.observe(info.value) is TrustLevel.OWNER
            assert policy.count(BOB) == n
    with disk_kernel(directory) as (kernel, _):  # the count survives a restart
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        policy = ViolationPolicy.over(kernel, threshold=3)
        assert policy.count(BOB) == 2
        with pytest.raises(TokenRejected) as info:
            authority.verify(token.to_bytes(), bad)
        assert policy.observe(info.value) is TrustLevel.KNOWN
        assert policy.count(BOB) == 0
        assert (VIOLATIONS_FAMILY, BOB) not in kernel.state
        for _ in range(3):
            policy.record(BOB, "asked for another session's events")
        assert _verify_bob(authority, token).trust is TrustLevel.GUEST  # below the ceiling now
        levels = [policy.record(BOB, "again") for _ in range(9)]
        assert levels == [TrustLevel.GUEST] * 2 + [TrustLevel.UNTRUSTED] * 7
        assert _verify_bob(authority, token).trust is TrustLevel.UNTRUSTED
        # only the owner raises it again, and never past the token's ceiling
        TrustTable(kernel).set(BOB, TrustLevel.OWNER, by_owner=True, reason="my mistake")
        assert _verify_bob(authority, token).trust is TrustLevel.KNOWN


def test_only_violations_by_an_authenticated_principal_count() -> None:
    with sim_kernel() as (kernel, ledger):
        policy = ViolationPolicy.over(kernel, threshold=1)
        size = ledger.size
        for e in (
            TokenRejected(RejectReason.BAD_TAG, "forged"),  # no principal: not authenticated
            TokenRejected(RejectReason.EXPIRED, "late", principal=BOB),  # unusable, not malice
            TokenRejected(RejectReason.BUDGET_EXHAUSTED, "spent", principal=BOB),
            TokenRejected(RejectReason.TOOL_NOT_ALLOWED, "no tool", principal=None),
        ):
            assert policy.observe(e) is None
        assert ledger.size == size
        assert TrustTable(kernel).level(BOB) is TrustLevel.UNTRUSTED
        TrustTable(kernel).set(BOB, TrustLevel.KNOWN, by_owner=True)
        widening = TokenRejected(RejectReason.WIDENING, "more tools", principal=BOB)
        assert policy.observe(widening) is TrustLevel.GUEST


def test_violation_policy_refuses_bad_input() -> None:
    with sim_kernel() as (kernel, _):
        for threshold in (0, -1, 1001, True):
            with pytest.raises(AuthzError, match="threshold"):
                ViolationPolicy.over(kernel, threshold=threshold)
        policy = ViolationPolicy.over(kernel)
        with pytest.raises(AuthzError, match="needs a description"):
            policy.record(BOB, "")
        with pytest.raises(KernelError, match="not <channel>:<id>"):
            policy.record("bob", "x")


def test_a_rollback_cannot_unrevoke_or_refund_without_the_owner() -> None:
    with sim_kernel() as (kernel, _):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=VirtualClock())
        token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R0, budget=10)
        grant = authority.verify(token.to_bytes(), authority.request("executor"))
        before_debit = kernel.ledger.size - 1
        BudgetAccount(kernel).debit(grant, 10)
        with pytest.raises(OwnerRequired, match=r"budget\.spent"):
            kernel.rollback(before_debit)
        before_revoke = kernel.ledger.size - 1
        RevocationList(kernel).revoke(token.id, "compromised")
        with pytest.raises(OwnerRequired, match=r"token\.revoked"):
            kernel.rollback(before_revoke)
        kernel.rollback(before_revoke, by_owner=True)
        assert authority.verify(token.to_bytes(), authority.request("executor")).budget == 0


def test_a_kernel_keeping_revocations_never_lifts_one_and_still_refuses_a_refund() -> None:
    """The core's kernel (keeps=AUTHZ_KEEPS, ADR 0046): a rollback past a
    revocation is done for anyone and leaves the revocation; it still undoes
    the rest; a refund is still the owner's. A rollback that did lift one (a
    ledger from before the keep) can be rolled back: that revokes again."""
    with Ledger.open("/ledger", fixed_signer(), fs=SimulatedFileSystem()) as ledger:
        kernel = Kernel.open(ledger, Actions(), ratchets=(*RATCHETS, *AUTHZ_RATCHETS))
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=VirtualClock())
        token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R0, budget=10)
        revocations = RevocationList(kernel)
        before = kernel.ledger.size - 1
        revocations.revoke(token.id, "its worker ended")
        lifted, _ = kernel.rollback(before, by_owner=True)  # the old way, the owner's
        assert not revocations.is_revoked(token.id)
        kernel = Kernel.open(
            ledger, Actions(), ratchets=(*RATCHETS, *AUTHZ_RATCHETS), keeps=AUTHZ_KEEPS
        )
        revocations = RevocationList(kernel)
        kernel.rollback(lifted - 1)  # undoing that lift revokes again: no raise
        assert revocations.is_revoked(token.id)
        kernel.register("setting", "agent.max_steps", 7)
        _, preview = kernel.rollback(before)  # past the revocation, not the owner
        assert [(c.family, c.key) for c in preview.changes] == [("setting", "agent.max_steps")]
        # The revocation, its lift and its return: each stays as it is, said so.
        assert preview.kept == (before + 1, lifted, lifted + 1)
        assert revocations.is_revoked(token.id)
        assert kernel.state.get(("setting", "agent.max_steps")) is None
        grant = TokenAuthority.over_kernel(kernel, KEY, clock=VirtualClock())
        other = grant.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R0, budget=10)
        debited = kernel.ledger.size - 1
        BudgetAccount(kernel).debit(grant.verify(other.to_bytes(), grant.request("executor")), 5)
        with pytest.raises(OwnerRequired, match=r"budget\.spent"):
            kernel.rollback(debited)


def test_authz_raises_finds_unrevocations_and_refunds() -> None:
    changes = [
        Change("token.revoked", "aa", True, None),
        Change("token.revoked", "bb", None, True),
        Change("budget.spent", "aa", 10, 4),
        Change("budget.spent", "bb", None, 4),
        Change("budget.spent", "cc", 4, None),
        Change("trust", "wechat:a", "guest", "owner"),
    ]
    assert authz_raises(changes) == [changes[0], changes[2], changes[4]]


def test_a_refund_to_an_ended_token_is_no_raise_but_everything_else_is() -> None:
    ended = EndedTokens()
    ended.end(bytes.fromhex("aa" * 16))
    gone, live = "aa" * 16, "bb" * 16
    changes = [
        Change("budget.spent", gone, 10, None),  # its turn ended: nothing to raise
        Change("budget.spent", live, 10, 4),  # a live token could spend it again
        Change("budget.spent", "not-hex", 10, 4),  # not BudgetAccount's: fails closed
        Change("token.revoked", gone, True, None),  # un-revoking is a raise, ended or not
        Change("budget.spent", gone, None, 4),
    ]
    assert ended.raises(changes) == [changes[1], changes[2], changes[3]]
    assert gone not in ended
    assert bytes.fromhex(gone) in ended
    ended.forget([bytes.fromhex(gone)])  # its spending dropped: a refund fails closed again
    assert ended.raises(changes[:1]) == changes[:1]


@given(
    st.lists(st.tuples(st.sampled_from(["aa", "bb", "cc"]), st.integers(0, 9), st.integers(0, 9)))
)
def test_ended_tokens_only_ever_narrow_authz_raises(spends: list[tuple[str, int, int]]) -> None:
    ended = EndedTokens()
    ended.end(bytes.fromhex("aa" * 16))
    changes = [Change("budget.spent", k * 16, a, b) for k, a, b in spends]
    narrowed = ended.raises(changes)
    assert all(c in authz_raises(changes) for c in narrowed)
    assert [c for c in authz_raises(changes) if c not in narrowed] == [
        c for c in authz_raises(changes) if c.key == "aa" * 16
    ]
