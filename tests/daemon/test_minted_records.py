"""Every token the core mints or spawns is a ``token.minted`` ledger record:
what it is and allows, never its bytes or its tag (no file of the home
holds them), listed by ``naga history``, still there after a restart; a
rollback neither removes a mint nor lifts a revocation (ADR 0046)."""

from __future__ import annotations

import base64
import os

from naga.sdk import errors
from naga.tokens import RejectReason, Risk, Token, TrustLevel
from naga.v1 import authz_pb2 as apb
from naga.v1 import core_pb2 as cpb
from naga_core.authz import MINTED_KIND
from tests.daemon.token_helpers import SECOND, TokenCore, refused, token_core


def _minted(c: TokenCore) -> dict[bytes, apb.TokenMinted]:
    """Every token.minted record in the ledger, by token id."""
    out: dict[bytes, apb.TokenMinted] = {}
    for rec in c.owner.records(0, 1000):
        if rec.kind == MINTED_KIND:
            msg = apb.TokenMinted.FromString(rec.payload)
            out[msg.id] = msg
    return out


def _secrets(token: Token) -> list[bytes]:
    """What must never be written anywhere: the token, its tag, and their base64."""
    raw = token.to_bytes()
    return [raw, token.tag, base64.b64encode(raw), base64.b64encode(token.tag)]


def _files_holding(root: str, needles: list[bytes]) -> list[str]:
    found: list[str] = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            found += [f"{path}: {n[:8].hex()}" for n in needles if n in data]
    return found


def test_mint_and_spawn_are_recorded_without_their_secret_and_survive_a_restart(
    home: str,
) -> None:
    with token_core(home) as c:
        parent = c.owner.mint(
            "executor",
            trust=TrustLevel.KNOWN,
            risk=Risk.R2,
            session="s-1",
            principal="wechat:alice",
            tools=["model.chat", "web.search"],
            budget=100,
            ttl_ns=60 * SECOND,
        ).token
        with c.holder(parent) as p:
            child = p.spawn(40, tools=["model.chat"], risk=Risk.R1).token
        records = _minted(c)
        mine = records[parent.id]
        assert mine.role == "executor"
        assert mine.parent_id == b""
        assert not mine.lineage
        assert mine.principal == "wechat:alice"
        assert mine.session == "s-1"
        assert list(mine.tools.names) == ["model.chat", "web.search"]
        assert mine.risk_ceiling == apb.RISK_LEVEL_R2
        assert mine.trust == cpb.TRUST_LEVEL_KNOWN
        assert mine.budget_ceiling == 100
        assert mine.expires_at_ns == c.clock.now + 60 * SECOND
        assert mine.minted_by == "owner"
        sub = records[child.id]
        assert sub.parent_id == parent.id
        assert list(sub.lineage) == [parent.id]
        assert list(sub.tools.names) == ["model.chat"]
        assert sub.risk_ceiling == apb.RISK_LEVEL_R1
        assert sub.budget_ceiling == 40
        assert sub.expires_at_ns == mine.expires_at_ns  # inherited
        assert sub.minted_by == "wechat:alice"  # the holder who spawned it
        shown = [e.description for e in c.owner.history(limit=10).entries]
        assert any(d.startswith(f"minted executor token {child.id.hex()} under ") for d in shown)
        root = f"minted executor token {parent.id.hex()} (root), for wechat:alice"
        assert any(d.startswith(root) for d in shown)
    # After the core stopped: nothing of the home holds either token.
    for token in (parent, child):
        assert _files_holding(home, _secrets(token)) == []
    with token_core(home) as c:
        assert {parent.id, child.id} <= set(_minted(c))


def test_a_rollback_past_a_mint_keeps_its_record_and_changes_no_token(home: str) -> None:
    with token_core(home) as c:
        before = c.owner.set_setting("agent.max_steps", 9).seq
        token = c.mint()
        preview = c.owner.rollback(before, dry_run=True).preview
        assert not [ch for ch in preview.changes if ch.family.startswith("token")]
        c.owner.rollback(before)
        assert token.id in _minted(c)  # the ledger forgets nothing
        with c.holder(token) as h:
            h.head()  # not revoked by the rollback either: a mint is not state


def test_a_rollback_never_lifts_a_revocation(home: str) -> None:
    """Not as any caller, not as the owner's terminal (by_owner): a
    revocation is one-way (ADR 0046), and the rollback is done, not refused."""
    with token_core(home) as c:
        token = c.mint()
        seq = c.owner.revoke(token, "compromised")
        assert seq is not None
        assert not c.owner.rollback(seq - 1, dry_run=True).preview.changes
        assert c.owner.rollback(seq - 1).HasField("seq")
        assert c.owner.rollback(seq - 1, by_owner=True).HasField("seq")
        with (
            c.holder(token) as h,
            refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.REVOKED),
        ):
            h.head()
        assert token.id in _minted(c)


def test_a_spawn_refused_as_widening_records_nothing(home: str) -> None:
    with token_core(home) as c:
        parent = c.mint(budget=10)
        before = set(_minted(c))
        with (
            c.holder(parent) as p,
            refused(errors.TokenDenied, "PERMISSION_DENIED", RejectReason.WIDENING),
        ):
            p.spawn(10)
        assert set(_minted(c)) == before
