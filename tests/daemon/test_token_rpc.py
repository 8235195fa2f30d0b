"""Token conformance over real gRPC: a core in this process, on its socket,
called through the SDK with capability tokens. Each way a token is refused
has its own test asserting the exact status code and the reason the core
sends back; each ends with the core still serving and, after it stops, its
ledger verifying (token_core)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import grpc
import pytest

from naga.sdk import errors
from naga.tokens import (
    BudgetCeiling,
    RejectReason,
    Risk,
    RiskCeiling,
    SessionIs,
    Token,
    ToolsAllowed,
    TrustLevel,
)
from naga.v1 import authz_pb2 as apb
from naga_core.authz import RootKey, mint_token
from tests.daemon.token_helpers import SECOND, TokenCore, refused, token_core

BAD_TAG = RejectReason.BAD_TAG


def _edited(token: Token, edit: Callable[[apb.CapabilityToken], object]) -> Token:
    """``token`` with its message changed by ``edit`` (the tag left as is)."""
    msg = apb.CapabilityToken.FromString(token.to_bytes())
    edit(msg)
    return Token.from_bytes(msg.SerializeToString(deterministic=True))


def _three_caveats(c: TokenCore) -> Token:
    return c.mint(session="s-1", tools=["model.chat"], budget=100)


def test_a_token_minted_under_another_root_key_is_unauthenticated_bad_tag(home: str) -> None:
    with token_core(home) as c:
        forged = mint_token(
            RootKey.generate(),
            token_id=bytes(16),
            principal=None,
            lineage=(),
            caveats=Token.from_bytes(c.mint().to_bytes()).caveats,
        )
        with (
            c.holder(forged) as h,
            refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", BAD_TAG),
        ):
            h.head()


def test_a_removed_caveat_is_unauthenticated_bad_tag(home: str) -> None:
    with token_core(home) as c:
        token = _three_caveats(c)
        dropped = _edited(token, lambda m: m.caveats.pop(1))
        with (
            c.holder(dropped) as h,
            refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", BAD_TAG),
        ):
            h.head()
        with c.holder(token) as h:
            assert h.head().size >= 0  # the intact token still works


def test_reordered_caveats_are_unauthenticated_bad_tag(home: str) -> None:
    with token_core(home) as c:

        def swap(m: apb.CapabilityToken) -> None:
            first, second = apb.Caveat(), apb.Caveat()
            first.CopyFrom(m.caveats[0])
            second.CopyFrom(m.caveats[1])
            m.caveats[0].CopyFrom(second)
            m.caveats[1].CopyFrom(first)

        swapped = _edited(_three_caveats(c), swap)
        with (
            c.holder(swapped) as h,
            refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", BAD_TAG),
        ):
            h.head()


def test_a_duplicated_caveat_is_unauthenticated_bad_tag(home: str) -> None:
    with token_core(home) as c:
        doubled = _edited(_three_caveats(c), lambda m: m.caveats.append(m.caveats[0]))
        with (
            c.holder(doubled) as h,
            refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", BAD_TAG),
        ):
            h.head()


def test_a_flipped_bit_is_unauthenticated_bad_tag(home: str) -> None:
    with token_core(home) as c:
        token = _three_caveats(c)
        # a budget ceiling of 100 becomes 101: still a valid caveat, not the one signed
        raw = token.to_bytes()
        at = raw.index(bytes([0x38, 100]))
        flipped = raw[: at + 1] + bytes([100 ^ 1]) + raw[at + 2 :]
        with (
            c.holder(Token.from_bytes(flipped)) as h,
            refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", BAD_TAG),
        ):
            h.head()


def test_an_expired_token_is_unauthenticated_expired(home: str) -> None:
    with token_core(home) as c:
        token = c.mint(ttl_ns=SECOND)
        with c.holder(token) as h:
            h.head()
            c.clock.advance(SECOND)  # the core's clock: now == expiry
            with refused(errors.TokenUnauthenticated, "UNAUTHENTICATED", RejectReason.EXPIRED):
                h.head()


def test_a_revoked_token_is_denied_revoked_also_after_a_restart(home: str) -> None:
    with token_core(home) as c:
        token = c.mint()
        with c.holder(token) as h:
            h.head()
            assert c.owner.revoke(token, "compromised") is not None
            assert c.owner.revoke(token.id, "again") is None  # once is enough
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.REVOKED):
                h.head()
    with token_core(home) as c, c.holder(token) as h:
        with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.REVOKED):
            h.head()
        inspected = c.owner.inspect(token)
        assert inspected.rejection == apb.TOKEN_REJECTION_REVOKED
        assert not inspected.HasField("grant")


def test_a_token_used_for_another_session_is_denied_wrong_session(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint(session="s-1", budget=10)) as h:
        h.spend(1, session="s-1")
        with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_SESSION):
            h.spend(1, session="s-2")
        assert h.head().size > 0  # a call in no session is not another session


def test_a_token_of_another_role_is_denied_wrong_role(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint("gateway")) as gateway:
        gateway.history()  # what the gateway may call works
        wrong = RejectReason.WRONG_ROLE
        with refused(errors.TokenDenied, "PERMISSION_DENIED", wrong) as info:
            gateway.spend(1)  # the executor's
        assert "not open to a 'gateway' token" in info.value.detail
        with refused(errors.TokenDenied, "PERMISSION_DENIED", wrong):
            gateway.shutdown("no")  # the owner's
        with refused(errors.TokenDenied, "PERMISSION_DENIED", wrong):
            gateway.set_setting("agent.max_steps", 3)
        with refused(errors.TokenDenied, "PERMISSION_DENIED", wrong):
            gateway.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4)


def test_a_tool_outside_the_allowlist_is_denied_tool_not_allowed(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint(tools=["model.chat"], budget=10)) as h:
        h.spend(1, tool="model.chat")
        with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.TOOL_NOT_ALLOWED):
            h.spend(1, tool="web.search")


def test_an_operation_above_the_risk_ceiling_is_denied_risk_too_high(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint(risk=Risk.R0, budget=10)) as h:
        h.head()  # R0
        with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.RISK_TOO_HIGH):
            h.spend(1)  # R1


def test_an_exhausted_budget_is_resource_exhausted(home: str) -> None:
    with token_core(home) as c, c.holder(c.mint(budget=10)) as h:
        assert h.spend(6, what="a model call").remaining == 4
        size = c.owner.head().size
        with refused(errors.BudgetExhausted, "RESOURCE_EXHAUSTED", RejectReason.BUDGET_EXHAUSTED):
            h.spend(5)
        assert c.owner.head().size == size  # nothing debited
        assert h.spend(4).remaining == 0
        with refused(errors.BudgetExhausted, "RESOURCE_EXHAUSTED", RejectReason.BUDGET_EXHAUSTED):
            h.spend(1)
        assert "spent 6 for a model call" in c.owner.history(limit=5).entries[1].description


def test_garbage_and_oversized_credentials_name_their_reason_in_the_trailers(home: str) -> None:
    with token_core(home) as c, grpc.insecure_channel("unix:" + c.core.info.socket) as ch:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(
            "/naga.v1.LedgerService/GetHead"
        )
        cases = [
            (b"\x08\x01garbage", grpc.StatusCode.UNAUTHENTICATED, "MALFORMED"),
            (bytes(5000), grpc.StatusCode.INVALID_ARGUMENT, "OVERSIZE"),
        ]
        for raw, code, reason in cases:
            value = "Capability " + base64.b64encode(raw).decode()
            with pytest.raises(grpc.RpcError) as info:
                call(b"", timeout=5, metadata=(("authorization", value),))
            err = info.value
            assert isinstance(err, grpc.Call)
            assert err.code() is code
            assert ("naga-reject-reason", reason) in [
                (m.key, m.value) for m in err.trailing_metadata() or ()
            ]


def test_an_offline_attenuation_works_with_fewer_rights_and_never_more(home: str) -> None:
    with token_core(home) as c:
        token = c.mint(tools=["model.chat", "web.search"], risk=Risk.R1, budget=100)
        narrow = Token.from_bytes(token.to_bytes()).attenuate(
            SessionIs("s-1"), ToolsAllowed.of(["model.chat"]), BudgetCeiling(10)
        )
        with c.holder(narrow) as h:
            assert h.spend(3, session="s-1", tool="model.chat").remaining == 7
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WRONG_SESSION):
                h.spend(1, session="s-2", tool="model.chat")
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.TOOL_NOT_ALLOWED):
                h.spend(1, session="s-1", tool="web.search")
            with refused(
                errors.BudgetExhausted, "RESOURCE_EXHAUSTED", RejectReason.BUDGET_EXHAUSTED
            ):
                h.spend(8, session="s-1")
            grant = h.inspect().grant
            assert (grant.session, list(grant.tools.names)) == ("s-1", ["model.chat"])
            assert (grant.budget_remaining, grant.budget_ceiling) == (7, 10)
        # a caveat that would widen is folded away: the tighter one stands
        wider = narrow.attenuate(RiskCeiling(Risk.R4), BudgetCeiling(1000), ToolsAllowed.of(["x"]))
        with c.holder(wider) as h:
            grant = h.inspect().grant
            assert grant.risk_ceiling == apb.RISK_LEVEL_R1
            assert grant.budget_ceiling == 10
            assert list(grant.tools.names) == []  # {"model.chat"} & {"x"}: no tool at all
            with refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.TOOL_NOT_ALLOWED):
                h.spend(1, session="s-1", tool="model.chat")
        # the attenuation spent under the original's id: the original sees it
        with c.holder(token) as h:
            assert h.inspect().grant.budget_remaining == 97
            h.spend(1, session="s-2", tool="web.search")
