"""Capability tokens: the format, the HMAC chain, and one conformance test per
way a token is refused, each with the reason it must be refused for."""

from __future__ import annotations

import hmac
import os
import random
from pathlib import Path

import pytest

from naga import tokens
from naga.constants import (
    TOKEN_MAX_BYTES,
    TOKEN_MAX_CAVEATS,
    TOKEN_MAX_SPAWN_DEPTH,
    TOKEN_TAG_DOMAIN,
)
from naga.v1 import authz_pb2 as pb
from naga_core.authz import (
    Ancestor,
    AuthzError,
    BudgetAccount,
    BudgetCeiling,
    ExpiresAt,
    RejectReason,
    Request,
    RevocationList,
    Risk,
    RiskCeiling,
    RoleIs,
    SessionIs,
    Token,
    TokenAuthority,
    TokenRejected,
    ToolsAllowed,
)
from naga_core.authz._token import mint_token
from naga_core.errors import NagaError
from naga_core.kernel import TrustLevel
from tests.authz_helpers import KEY, OTHER_KEY, VirtualClock, World, disk_kernel, sim_kernel
from tests.seeds import pick_seed

SEED = pick_seed()
SECOND = 10**9


def _world_token(**kw: object) -> tuple[World, TokenAuthority, Token]:
    world = World()
    authority = world.authority()
    args: dict[str, object] = {
        "trust": TrustLevel.KNOWN,
        "risk": Risk.R2,
        "session": "s-1",
        "principal": "wechat:bob",
        "tools": ["fs.read", "web.search"],
        "budget": 100,
        "ttl_ns": 60 * SECOND,
    }
    args.update(kw)
    token = authority.mint("executor", **args)  # type: ignore[arg-type]
    return world, authority, token


def _ok_request(authority: TokenAuthority, **kw: object) -> Request:
    args: dict[str, object] = {"session": "s-1", "tool": "fs.read", "risk": Risk.R1, "budget": 5}
    args.update(kw)
    return authority.request("executor", **args)  # type: ignore[arg-type]


def _refused(authority: TokenAuthority, raw: bytes, request: Request) -> TokenRejected:
    with pytest.raises(TokenRejected) as info:
        authority.verify(raw, request)
    assert isinstance(info.value, AuthzError)
    assert isinstance(info.value, NagaError)
    return info.value


def _message(raw: bytes) -> pb.CapabilityToken:
    return pb.CapabilityToken.FromString(raw)


def _encode(msg: pb.CapabilityToken) -> bytes:
    return msg.SerializeToString(deterministic=True)


# --- what a good token grants ------------------------------------------------------------


def test_a_minted_token_grants_what_it_says() -> None:
    world, authority, token = _world_token()
    grant = authority.verify(token.to_bytes(), _ok_request(authority))
    assert grant.token_id == token.id == (1).to_bytes(16, "big")
    assert grant.role == "executor"
    assert grant.session == "s-1"
    assert grant.tools == frozenset({"fs.read", "web.search"})
    assert grant.risk is Risk.R2
    assert grant.trust is TrustLevel.KNOWN
    assert grant.budget == grant.budget_ceiling == 100
    assert grant.expires_at_ns == world.clock.now + 60 * SECOND
    assert grant.principal == "wechat:bob"
    assert grant.lineage == ()
    assert grant.depth == token.depth == 0


def test_an_unconstrained_dimension_grants_anything_in_it() -> None:
    world = World()
    authority = world.authority()
    token = authority.mint("gateway", trust=TrustLevel.OWNER, risk=Risk.R4)
    for request in (
        authority.request("gateway", session="any", tool="x", risk=Risk.R4, budget=10**18),
        authority.request("gateway"),
    ):
        grant = authority.verify(token.to_bytes(), request)
        assert (grant.session, grant.tools, grant.budget, grant.expires_at_ns) == (
            None,
            None,
            None,
            None,
        )
    assert authority.verify(token.to_bytes(), authority.request("gateway")).principal is None


def test_the_wire_layout_is_the_documented_one() -> None:
    _, authority, token = _world_token(
        session=None, tools=None, budget=None, ttl_ns=None, principal=None
    )
    raw = token.to_bytes()
    # version, id, then the three caveats mint always writes, then the tag.
    assert raw[:4] == bytes([0x08, 0x01, 0x12, 0x10])
    assert raw[4:20] == token.id
    assert raw[20:] == (
        bytes([0x2A, 0x0A, 0x12, 0x08]) + b"executor"  # role
        + bytes([0x2A, 0x02, 0x30, 0x02])  # trust_ceiling = known
        + bytes([0x2A, 0x02, 0x28, 0x02])  # risk_ceiling = R2
        + bytes([0x32, 0x20]) + token.tag
    )  # fmt: skip
    # The chain, recomputed by hand from the documented definition.
    tag = hmac.digest(KEY.secret, TOKEN_TAG_DOMAIN + raw[:20], "sha256")
    for link in (raw[22:32], raw[34:36], raw[38:40]):
        tag = hmac.digest(tag, link, "sha256")
    assert tag == token.tag
    assert authority.verify(raw, authority.request("executor")).role == "executor"


def test_attenuation_needs_no_key_and_the_core_accepts_it() -> None:
    _, authority, token = _world_token()
    narrowed = Token.from_bytes(token.to_bytes()).attenuate(
        RiskCeiling(Risk.R1), ToolsAllowed.of(["fs.read"])
    )
    assert narrowed.id == token.id
    assert narrowed.caveats[: len(token.caveats)] == token.caveats
    grant = authority.verify(narrowed.to_bytes(), _ok_request(authority))
    assert (grant.risk, grant.tools) == (Risk.R1, frozenset({"fs.read"}))
    # attenuating one at a time is the same as all at once
    assert token.attenuate(RiskCeiling(Risk.R1)).attenuate(ToolsAllowed.of(["fs.read"])) == narrowed


def test_the_reject_reasons_are_the_wire_enum() -> None:
    wire = {
        v.name.removeprefix("TOKEN_REJECTION_"): v.number
        for v in pb.TokenRejection.DESCRIPTOR.values
    }
    del wire["UNSPECIFIED"]
    assert {r.name: r.value for r in RejectReason} == wire
    assert RejectReason.WIDENING.wire == pb.TOKEN_REJECTION_WIDENING


# --- conformance: each way a token is refused --------------------------------------------


def test_wrong_root_key_is_refused_bad_tag() -> None:
    _, _, token = _world_token()
    other = World().authority(OTHER_KEY)
    e = _refused(other, token.to_bytes(), _ok_request(other))
    assert e.reason is RejectReason.BAD_TAG
    assert e.principal is None  # not authenticated: nobody to charge


def test_a_removed_caveat_is_refused_bad_tag() -> None:
    _, authority, token = _world_token()
    for i in range(len(token.caveats)):
        msg = _message(token.to_bytes())
        del msg.caveats[i]
        e = _refused(authority, _encode(msg), _ok_request(authority))
        assert e.reason is RejectReason.BAD_TAG, i


def test_reordered_caveats_are_refused_bad_tag() -> None:
    _, authority, token = _world_token()
    msg = _message(token.to_bytes())
    caveats = list(msg.caveats)
    del msg.caveats[:]
    msg.caveats.extend([caveats[1], caveats[0], *caveats[2:]])
    assert _refused(authority, _encode(msg), _ok_request(authority)).reason is RejectReason.BAD_TAG


def test_a_duplicated_caveat_is_refused_bad_tag() -> None:
    _, authority, token = _world_token()
    msg = _message(token.to_bytes())
    msg.caveats.insert(2, msg.caveats[2])
    assert _refused(authority, _encode(msg), _ok_request(authority)).reason is RejectReason.BAD_TAG


def test_a_changed_header_is_refused_bad_tag() -> None:
    _, authority, token = _world_token()
    for change in ("id", "principal", "lineage"):
        msg = _message(token.to_bytes())
        if change == "id":
            msg.id = bytes(16)
        elif change == "principal":
            msg.principal = "webchat:loopback"  # someone else to charge violations to
        else:
            msg.lineage.add(id=bytes(16))
        e = _refused(authority, _encode(msg), _ok_request(authority))
        assert e.reason is RejectReason.BAD_TAG, change


def test_every_single_bit_flip_is_refused() -> None:
    world = World()
    authority = world.authority()
    token = authority.mint("gateway", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=10)
    raw = token.to_bytes()
    request = authority.request("gateway", risk=Risk.R1, budget=1)
    authority.verify(raw, request)
    tag_at = len(raw) - 32
    seen: dict[RejectReason, int] = {}
    for bit in range(len(raw) * 8):
        flipped = bytearray(raw)
        flipped[bit // 8] ^= 1 << (bit % 8)
        e = _refused(authority, bytes(flipped), request)
        seen[e.reason] = seen.get(e.reason, 0) + 1
        assert e.reason in {
            RejectReason.MALFORMED,
            RejectReason.UNSUPPORTED_VERSION,
            RejectReason.BAD_TAG,
        }, (bit, e)
        if bit // 8 >= tag_at or 4 <= bit // 8 < 20:  # the tag's or the id's bytes
            assert e.reason is RejectReason.BAD_TAG, bit
    assert seen[RejectReason.BAD_TAG] >= 48 * 8
    assert seen[RejectReason.MALFORMED] > 0


def test_a_truncated_token_is_refused_malformed() -> None:
    _, authority, token = _world_token()
    raw = token.to_bytes()
    for cut in range(len(raw)):
        e = _refused(authority, raw[:cut], _ok_request(authority))
        assert e.reason is RejectReason.MALFORMED, cut


def test_garbage_is_refused_malformed() -> None:
    rng = random.Random(SEED)
    authority = World().authority()
    request = authority.request("executor")
    samples = [b"", b"\x00", b"\xff" * 64, b"naga token please", os.urandom(0)]
    samples += [rng.randbytes(rng.randrange(1, 300)) for _ in range(500)]
    for garbage in samples:
        e = _refused(authority, garbage, request)
        assert e.reason is RejectReason.MALFORMED, (SEED, garbage.hex())
    e = _refused(authority, "a string", request)  # type: ignore[arg-type]
    assert e.reason is RejectReason.MALFORMED


def test_a_non_canonical_encoding_is_refused_malformed() -> None:
    _, authority, token = _world_token()
    raw = token.to_bytes()
    unknown_field = raw + bytes([0x78, 0x01])  # field 15, varint 1
    assert _refused(authority, unknown_field, _ok_request(authority)).reason is (
        RejectReason.MALFORMED
    )
    tag_first = raw[-34:] + raw[:-34]  # same fields, out of order
    assert _refused(authority, tag_first, _ok_request(authority)).reason is RejectReason.MALFORMED


def test_an_oversized_token_is_refused_oversize() -> None:
    _, authority, token = _world_token()
    request = _ok_request(authority)
    big = _message(token.to_bytes())
    big.principal = "wechat:" + "x" * TOKEN_MAX_BYTES
    assert _refused(authority, _encode(big), request).reason is RejectReason.OVERSIZE
    many = _message(token.to_bytes())
    many.caveats.extend([pb.Caveat(risk_ceiling=4)] * TOKEN_MAX_CAVEATS)
    assert _refused(authority, _encode(many), request).reason is RejectReason.OVERSIZE
    deep = _message(token.to_bytes())
    deep.lineage.extend([pb.TokenAncestor(id=bytes(16))] * (TOKEN_MAX_SPAWN_DEPTH + 1))
    assert _refused(authority, _encode(deep), request).reason is RejectReason.OVERSIZE
    # and a holder cannot make one by attenuating (offline: the contract's error)
    room = TOKEN_MAX_CAVEATS - len(token.caveats)
    full = token.attenuate(*[RiskCeiling(Risk.R2)] * room)
    authority.verify(full.to_bytes(), request)
    with pytest.raises(tokens.TokenRejected) as info:
        full.attenuate(RiskCeiling(Risk.R2))
    assert info.value.reason is RejectReason.OVERSIZE


def test_an_unknown_version_is_refused_unsupported_version() -> None:
    _, authority, token = _world_token()
    msg = _message(token.to_bytes())
    msg.version = 2
    e = _refused(authority, _encode(msg), _ok_request(authority))
    assert e.reason is RejectReason.UNSUPPORTED_VERSION


def _append_raw(token: Token, caveat: pb.Caveat) -> bytes:
    """What a holder (or a bug) appending ``caveat`` with a correct tag makes."""
    msg = _message(token.to_bytes())
    msg.caveats.append(caveat)
    msg.tag = hmac.digest(token.tag, caveat.SerializeToString(deterministic=True), "sha256")
    return _encode(msg)


@pytest.mark.parametrize(
    "caveat",
    [
        pb.Caveat(),  # no kind: fail closed
        pb.Caveat(risk_ceiling=5),
        pb.Caveat(trust_ceiling=4),
        pb.Caveat(expires_at_ns=-1),
        pb.Caveat(budget_ceiling=1 << 63),
        pb.Caveat(role="Executor"),
        pb.Caveat(session="two words"),
        pb.Caveat(tools=pb.ToolAllowlist(names=["b", "a"])),
        pb.Caveat(tools=pb.ToolAllowlist(names=["a", "a"])),
        pb.Caveat(tools=pb.ToolAllowlist(names=[""])),
    ],
    ids=lambda c: str(c).strip().replace("\n", " ") or "empty",
)
def test_a_bad_caveat_under_a_good_tag_is_refused_invalid_caveat(caveat: pb.Caveat) -> None:
    _, authority, token = _world_token()
    e = _refused(authority, _append_raw(token, caveat), _ok_request(authority))
    assert e.reason is RejectReason.INVALID_CAVEAT
    assert (e.principal, e.token_id) == ("wechat:bob", token.id)  # the tag verified


def test_an_expired_token_is_refused_expired() -> None:
    world, authority, token = _world_token(ttl_ns=10 * SECOND)
    world.clock.advance(10 * SECOND - 1)
    authority.verify(token.to_bytes(), _ok_request(authority))
    world.clock.advance(1)
    e = _refused(authority, token.to_bytes(), _ok_request(authority))
    assert e.reason is RejectReason.EXPIRED
    assert "expired at" in str(e)
    # an attenuated expiry cannot extend it
    world.clock.now -= 5 * SECOND
    later = token.attenuate(ExpiresAt(world.clock.now + 3600 * SECOND))
    authority.verify(later.to_bytes(), _ok_request(authority))
    sooner = token.attenuate(ExpiresAt(world.clock.now))
    assert _refused(authority, sooner.to_bytes(), _ok_request(authority)).reason is (
        RejectReason.EXPIRED
    )


def test_a_revoked_token_is_refused_revoked_even_after_a_restart(tmp_path: Path) -> None:
    clock = VirtualClock()
    directory = str(tmp_path / "ledger")
    with disk_kernel(directory) as (kernel, ledger):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        token = authority.mint(
            "executor", trust=TrustLevel.KNOWN, risk=Risk.R2, principal="wechat:bob", budget=100
        )
        request = authority.request("executor", risk=Risk.R1)
        parent = authority.verify(token.to_bytes(), request)
        child = authority.spawn(parent, budget=10)
        narrowed = token.attenuate(RiskCeiling(Risk.R1))
        revocations = RevocationList(kernel)
        seq = revocations.revoke(token.id, "executor misbehaved")
        assert seq is not None
        assert revocations.revoke(token.id, "again") is None
        assert ledger.read(seq).kind == "kernel.effect"
        for raw in (token.to_bytes(), narrowed.to_bytes(), child.to_bytes()):
            assert _refused(authority, raw, request).reason is RejectReason.REVOKED
    with disk_kernel(directory) as (kernel, _):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        assert RevocationList(kernel).revoked() == [token.id]
        e = _refused(authority, token.to_bytes(), request)
        assert e.reason is RejectReason.REVOKED
        assert e.token_id == token.id
        e = _refused(authority, child.to_bytes(), request)
        assert e.reason is RejectReason.REVOKED
        assert f"ancestor {token.id.hex()}" in str(e)


def test_another_session_is_refused_wrong_session() -> None:
    _, authority, token = _world_token()
    for session in ("s-2", None):
        e = _refused(authority, token.to_bytes(), _ok_request(authority, session=session))
        assert e.reason is RejectReason.WRONG_SESSION
        assert e.principal == "wechat:bob"
    # a holder narrowing an any-session token to a session
    _, authority, free = _world_token(session=None)
    pinned = free.attenuate(SessionIs("s-9"))
    assert authority.verify(pinned.to_bytes(), _ok_request(authority, session="s-9"))
    e = _refused(authority, pinned.to_bytes(), _ok_request(authority, session="s-1"))
    assert e.reason is RejectReason.WRONG_SESSION


def test_another_role_is_refused_wrong_role() -> None:
    _, authority, token = _world_token()
    request = authority.request("plugin", session="s-1", tool="fs.read")
    e = _refused(authority, token.to_bytes(), request)
    assert e.reason is RejectReason.WRONG_ROLE
    assert "'plugin'" in str(e)
    both = token.attenuate(RoleIs("plugin"))  # no caller is both
    for role in ("executor", "plugin"):
        r = authority.request(role, session="s-1")
        assert _refused(authority, both.to_bytes(), r).reason is RejectReason.WRONG_ROLE


def test_a_tool_outside_the_allowlist_is_refused_tool_not_allowed() -> None:
    _, authority, token = _world_token()
    e = _refused(authority, token.to_bytes(), _ok_request(authority, tool="shell.exec"))
    assert e.reason is RejectReason.TOOL_NOT_ALLOWED
    assert "'shell.exec'" in str(e)
    none = token.attenuate(ToolsAllowed.of([]))
    e = _refused(authority, none.to_bytes(), _ok_request(authority, tool="fs.read"))
    assert e.reason is RejectReason.TOOL_NOT_ALLOWED
    assert authority.verify(none.to_bytes(), _ok_request(authority, tool=None)).tools == frozenset()


def test_a_risk_above_the_ceiling_is_refused_risk_too_high() -> None:
    _, authority, token = _world_token()
    authority.verify(token.to_bytes(), _ok_request(authority, risk=Risk.R2))
    e = _refused(authority, token.to_bytes(), _ok_request(authority, risk=Risk.R3))
    assert e.reason is RejectReason.RISK_TOO_HIGH


def test_spending_past_the_budget_is_refused_budget_exhausted() -> None:
    clock = VirtualClock()
    with sim_kernel() as (kernel, ledger):
        authority = TokenAuthority.over_kernel(kernel, KEY, clock=clock)
        account = BudgetAccount(kernel)
        token = authority.mint("executor", trust=TrustLevel.KNOWN, risk=Risk.R1, budget=10)
        raw = token.to_bytes()
        grant = authority.verify(raw, authority.request("executor", budget=7))
        account.debit(grant, 7, what="a model call")
        grant = authority.verify(raw, authority.request("executor", budget=3))
        assert grant.budget == 3
        e = _refused(authority, raw, authority.request("executor", budget=4))
        assert e.reason is RejectReason.BUDGET_EXHAUSTED
        size = ledger.size
        with pytest.raises(TokenRejected) as info:
            account.debit(grant, 4)
        assert info.value.reason is RejectReason.BUDGET_EXHAUSTED
        assert ledger.size == size  # nothing recorded
        assert account.spent(token.id) == 7
        # a holder cannot lift it by attenuating: budgets intersect
        more = token.attenuate(BudgetCeiling(1000))
        assert authority.verify(more.to_bytes(), authority.request("executor")).budget == 3


def test_the_known_answer_vector() -> None:
    # docs/design/authz.md's example: a change here is a format change.
    token = mint_token(
        KEY,
        token_id=bytes(range(16)),
        principal="wechat:bob",
        lineage=[Ancestor(b"\xaa" * 16, 100)],
        caveats=[RoleIs("executor"), RiskCeiling(Risk.R1), ToolsAllowed.of(["fs.read"])],
    )
    assert token.to_bytes().hex() == (
        "08011210000102030405060708090a0b0c0d0e0f1a0a7765636861743a626f62"
        "22140a10aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa10642a0a12086578656375746f72"
        "2a0228012a0b22090a0766732e72656164"
        "322042f6f520a420b780fabede1d927e86773f1641647b574008c5e7adf2dd94ffd5"
    )
