"""AuthzService and the access rules on a real core: every RPC has a rule,
spawn narrows and counts against its parent, violations lower trust until
the owner raises it again (INV-6), Subscribe shows each role what it may
see, bad Mint arguments are refused by name."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import naga.v1
from naga.sdk import errors
from naga.tokens import RejectReason, Risk, TrustLevel
from naga.v1 import authz_pb2, core_pb2, kernel_pb2, ledger_pb2
from naga.v1 import core_pb2 as cpb
from naga_core.daemon import POLICY, REJECTION_STATUS
from tests.daemon.token_helpers import refused, token_core


def _every_pb2_module() -> list[ModuleType]:
    # Every generated module, so a service in a new .proto file is not missed.
    names = [m.name for m in pkgutil.iter_modules(naga.v1.__path__) if m.name.endswith("_pb2")]
    return [importlib.import_module(f"naga.v1.{name}") for name in sorted(names)]


def test_every_method_of_every_service_has_exactly_one_access_rule() -> None:
    served = {
        f"/{service.full_name}/{method.name}"
        for module in _every_pb2_module()
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert {authz_pb2, core_pb2, kernel_pb2, ledger_pb2} <= set(_every_pb2_module())
    assert len(served) == 87  # a new RPC must be added here and to the policy
    assert served == set(POLICY)
    for name, rule in POLICY.items():
        assert rule.owner or rule.roles, f"{name}: nobody may call it"


def test_every_reject_reason_has_a_status() -> None:
    assert set(REJECTION_STATUS) == set(RejectReason)


def test_spawn_narrows_and_the_child_spends_from_its_parent(home: str) -> None:
    with token_core(home) as c:
        parent = c.mint(session="s-1", tools=["model.chat", "web.search"], budget=50)
        with c.holder(parent) as p:
            child = p.spawn(20, tools=["model.chat"], risk=Risk.R0)
            assert list(child.grant.lineage) == [parent.id]
            assert (child.grant.session, child.grant.budget_ceiling) == ("s-1", 20)
            with c.holder(child.token) as ch:
                ch.head()
                with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.RISK_TOO_HIGH):
                    ch.spend(1)  # R1 over the child's R0
            widening = RejectReason.WIDENING
            with refused(errors.TokenDenied, "PERMISSION_DENIED", widening) as info:
                p.spawn(50)  # not strictly below the parent's 50
            assert "not below the parent's remaining 50" in info.value.detail
            with refused(errors.TokenDenied, "PERMISSION_DENIED", widening):
                p.spawn(5, tools=["fs.write"])
            with refused(errors.TokenDenied, "PERMISSION_DENIED", widening):
                p.spawn(5, trust=TrustLevel.OWNER)
            mid = p.spawn(30, risk=Risk.R1)
        with c.holder(mid.token) as m:
            m.spend(25, session="s-1")
        with c.holder(parent) as p:
            assert p.inspect().grant.budget_remaining == 25  # the child's spending counts
        with pytest.raises(errors.PermissionDenied, match="for capability token holders"):
            c.owner.spawn(1)  # the owner mints; it holds no token to narrow


def test_violations_lower_the_principals_trust_and_only_the_owner_raises_it(home: str) -> None:
    with token_core(home) as c:
        c.owner.set_trust("wechat:bob", "known", by_owner=True)
        token = c.mint(principal="wechat:bob", session="s-1", budget=10)
        with c.holder(token) as bob:
            assert bob.inspect().grant.trust == cpb.TRUST_LEVEL_KNOWN
            for _ in range(3):  # the policy's threshold
                with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_SESSION):
                    bob.spend(1, session="s-other")
            assert c.owner.get_trust("wechat:bob").level == cpb.TRUST_LEVEL_GUEST
            assert bob.inspect().grant.trust == cpb.TRUST_LEVEL_GUEST  # at once
            # what merely cannot be used is not a violation: no further lowering
            with refused(
                errors.BudgetExhausted, "RESOURCE_EXHAUSTED", RejectReason.BUDGET_EXHAUSTED
            ):
                bob.spend(11, session="s-1")
            assert c.owner.get_trust("wechat:bob").level == cpb.TRUST_LEVEL_GUEST
            with pytest.raises(errors.PermissionDenied):
                bob.set_trust("wechat:bob", "known", by_owner=True)
            c.owner.set_trust("wechat:bob", "known", by_owner=True, reason="forgiven")
            assert bob.inspect().grant.trust == cpb.TRUST_LEVEL_KNOWN


def test_a_process_token_is_never_charged_a_violation(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint("gateway")) as gateway:
        size = c.owner.head().size
        for _ in range(4):
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_ROLE):
                gateway.spend(1)
        assert c.owner.head().size == size  # no principal: nothing journaled


def test_subscribe_shows_each_role_only_the_kinds_it_may_see(home: str) -> None:
    with token_core(home) as c:
        c.owner.set_setting("agent.max_steps", 30)
        with c.holder(c.mint("gateway")) as gateway:
            events = iter(gateway.subscribe(0))
            assert next(events).record.kind == "kernel.effect"
        with c.holder(c.mint("executor")) as executor:
            events = iter(executor.subscribe(0, kinds=["kernel.effect"]))
            first = next(events)
            assert first.WhichOneof("event") == "caught_up"
            # the setting, then the two mints: the executor sees none of them
            assert first.caught_up.next_seq == 3
        with c.holder(c.mint("plugin")) as plugin, pytest.raises(errors.TokenDenied):
            plugin.records(0)  # records carry every kind: owner and gateway only


def test_the_owner_credential_is_refused_where_only_a_token_makes_sense(home: str) -> None:
    with token_core(home) as c:
        with pytest.raises(errors.PermissionDenied, match="not the owner credential") as info:
            c.owner.spend(1)
        assert not isinstance(info.value, errors.TokenRefused)
        with pytest.raises(errors.InvalidArgument, match="pass the token to inspect"):
            c.owner.inspect()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"role": "admin"}, "role 'admin' is not a process role"),
        ({"trust": TrustLevel.KNOWN, "risk": Risk.R1, "ttl_ns": 0}, "ttl_ns 0 must be"),
        ({"session": "a b"}, "session id 'a b'"),
        ({"principal": "bob"}, "principal 'bob' is not a peer id"),
        ({"tools": ["ok", "not ok"]}, "tool name 'not ok'"),
        ({"budget": 1 << 63}, "budget 9223372036854775808"),
    ],
)
def test_bad_mint_arguments_are_invalid_and_named(
    home: str, args: dict[str, object], message: str
) -> None:
    with token_core(home) as c:
        base: dict[str, object] = {"role": "executor", "trust": TrustLevel.KNOWN, "risk": Risk.R1}
        base.update(args)
        role = base.pop("role")
        with pytest.raises(errors.InvalidArgument, match=message):
            c.owner.mint(role, **base)  # type: ignore[arg-type]


def test_revoke_refuses_a_bad_id_and_an_empty_reason(home: str) -> None:
    with token_core(home) as c:
        with pytest.raises(errors.InvalidArgument, match="token_id is 3 bytes"):
            c.owner.revoke(b"abc", "why")
        with pytest.raises(errors.InvalidArgument, match="reason is required"):
            c.owner.revoke(bytes(16), "")
