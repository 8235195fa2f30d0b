"""Mints and spawns as ledger records, so an audit can list every token
that ever existed (docs/design/authz.md, "Minted tokens in the ledger").

One ``token.minted`` record (a :class:`~naga.v1.authz_pb2.TokenMinted`)
per token: its id, parent and lineage, role, principal and its caveats
folded (session, tools, risk and trust ceilings, budget ceiling, expiry),
and who had it minted. Never the token's bytes or its tag: whoever reads the
ledger (the gateway subscribes to all of it) must not be able to present
it.

Not a kernel effect, on purpose: nothing reads these records to decide a
call, and a rollback must neither erase that a token was handed out nor
bring one back (INV-6). Withdrawing a token is a revocation, which is kernel
state (:class:`~naga_core.authz.RevocationList`).

The record is staged: the caller settles it (the bridge's group commit, or
the turn's first record's) before the token leaves the core.
"""

from __future__ import annotations

import datetime

from naga.tokens import Token
from naga.v1 import authz_pb2 as zpb
from naga.v1 import core_pb2 as cpb
from naga_core.authz._caveats import Scope
from naga_core.authz._errors import AuthzError
from naga_core.ledger import Entry, Ledger

MINTED_KIND = "token.minted"
#: Longest ``minted_by`` kept; longer is cut (it names, it does not narrate).
MAX_BY_CHARS = 200


def minted_record(token: Token, *, by: str) -> zpb.TokenMinted:
    """What the ledger keeps of ``token``: everything but its secret."""
    if not by.strip():
        raise AuthzError(f"minting token {token.id.hex()} needs who asked for it")
    scope = Scope.of(token.caveats)
    msg = zpb.TokenMinted(
        id=token.id,
        parent_id=token.lineage[0].id if token.lineage else b"",
        lineage=[a.id for a in token.lineage],
        role=sorted(scope.roles)[0] if scope.roles else "",
        principal=token.principal or "",
        risk_ceiling=zpb.RiskLevel.ValueType(int(scope.risk) + zpb.RISK_LEVEL_R0),
        trust=cpb.TrustLevel.Value(f"TRUST_LEVEL_{scope.trust.name}"),
        minted_by=by[:MAX_BY_CHARS],
    )
    if scope.sessions:
        msg.session = sorted(scope.sessions)[0]
    if scope.tools is not None:
        msg.tools.names.extend(sorted(scope.tools))
    if scope.budget is not None:
        msg.budget_ceiling = scope.budget
    if scope.expires_at_ns is not None:
        msg.expires_at_ns = scope.expires_at_ns
    return msg


def stage_minted(ledger: Ledger, token: Token, *, by: str) -> int:
    """Stage the ``token.minted`` record of ``token``; its seq. On the thread
    that owns the ledger's writes (the core's loop)."""
    payload = minted_record(token, by=by).SerializeToString(deterministic=True)
    return ledger.stage(Entry.of(MINTED_KIND, payload)).seq


def _when(ns: int) -> str:
    """A time a person reads (the record keeps the nanoseconds; every int64
    of them is a date between 1677 and 2262)."""
    when = datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)
    return f"{when:%Y-%m-%d %H:%M:%S} UTC"


def describe_minted(msg: zpb.TokenMinted) -> str:
    """One line for ``naga history``."""
    under = f"under {msg.parent_id.hex()}" if msg.parent_id else "(root)"
    parts = [f"minted {msg.role or 'role-less'} token {msg.id.hex()} {under}"]
    if msg.principal:
        parts.append(f"for {msg.principal}")
    if msg.HasField("session"):
        parts.append(f"session {msg.session}")
    if msg.HasField("tools"):
        parts.append(f"tools [{', '.join(msg.tools.names)}]")
    parts.append(f"risk <= {zpb.RiskLevel.Name(msg.risk_ceiling).removeprefix('RISK_LEVEL_')}")
    parts.append(f"trust <= {cpb.TrustLevel.Name(msg.trust).removeprefix('TRUST_LEVEL_').lower()}")
    if msg.HasField("budget_ceiling"):
        parts.append(f"budget {msg.budget_ceiling}")
    if msg.HasField("expires_at_ns"):
        parts.append(f"expires {_when(msg.expires_at_ns)}")
    return ", ".join(parts) + f" (by {msg.minted_by})"


__all__ = ["MAX_BY_CHARS", "MINTED_KIND", "describe_minted", "minted_record", "stage_minted"]
