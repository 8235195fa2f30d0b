"""The holder's side of capability tokens (naga.tokens): what a process
outside the core can do with its token without the root key, and how the
core's refusals relate to the contract's."""

from __future__ import annotations

import pytest

from naga import tokens
from naga.tokens import (
    InvalidCaveat,
    RejectReason,
    Risk,
    RiskCeiling,
    SessionIs,
    Token,
    ToolsAllowed,
    TrustCeiling,
    TrustLevel,
)
from naga_core import authz
from naga_core.errors import NagaError
from naga_core.kernel import TrustLevel as KernelTrust
from tests.authz_helpers import World


def _minted() -> tuple[World, authz.TokenAuthority, bytes]:
    world = World()
    authority = world.authority()
    token = authority.mint("executor", trust=KernelTrust.KNOWN, risk=Risk.R2, budget=50)
    return world, authority, token.to_bytes()


def test_a_holder_narrows_offline_and_the_core_grants_only_the_narrower() -> None:
    _, authority, raw = _minted()
    held = Token.from_bytes(raw)  # no key: parsing only
    narrowed = held.attenuate(SessionIs("s-1"), ToolsAllowed.of(["fs.read"]), RiskCeiling(Risk.R0))
    grant = authority.verify(
        narrowed.to_bytes(), authority.request("executor", session="s-1", tool="fs.read")
    )
    assert (grant.session, grant.tools, grant.risk) == ("s-1", frozenset({"fs.read"}), Risk.R0)
    for ask in (
        {"session": "s-2"},
        {"session": "s-1", "tool": "web.search"},
        {"session": "s-1", "risk": Risk.R1},
    ):
        with pytest.raises(tokens.TokenRejected):
            authority.verify(narrowed.to_bytes(), authority.request("executor", **ask))  # type: ignore[arg-type]
    # the original still grants what it did
    authority.verify(raw, authority.request("executor", session="s-2", risk=Risk.R2))


def test_the_core_refusal_is_the_contract_refusal_and_a_naga_error() -> None:
    _, authority, raw = _minted()
    with pytest.raises(tokens.TokenRejected) as info:
        authority.verify(raw[:-1] + bytes([raw[-1] ^ 1]), authority.request("executor"))
    assert isinstance(info.value, authz.TokenRejected)
    assert isinstance(info.value, NagaError)
    assert info.value.reason is RejectReason.BAD_TAG


def test_garbage_is_refused_by_the_holder_side_parser_with_a_reason() -> None:
    with pytest.raises(tokens.TokenRejected) as info:
        Token.from_bytes(b"\x08\x01garbage")
    assert info.value.reason is RejectReason.MALFORMED
    with pytest.raises(tokens.TokenRejected) as big:
        Token.from_bytes(bytes(5000))
    assert big.value.reason is RejectReason.OVERSIZE


def test_trust_ceilings_take_either_trust_enum_but_nothing_else() -> None:
    assert TrustCeiling(KernelTrust.GUEST) == TrustCeiling(TrustLevel.GUEST)
    assert TrustCeiling(KernelTrust.GUEST).level is TrustLevel.GUEST
    for bad in (Risk.R1, 1, True, "guest"):
        with pytest.raises(InvalidCaveat, match="is not a TrustLevel"):
            TrustCeiling(bad)  # type: ignore[arg-type]


def test_reasons_travel_by_name_and_number() -> None:
    for reason in RejectReason:
        assert RejectReason.named(reason.name) is reason
        assert RejectReason.from_wire(int(reason.wire)) is reason
    assert RejectReason.named("NOT_A_REASON") is None
    assert RejectReason.from_wire(0) is None
    assert RejectReason.from_wire(999) is None
