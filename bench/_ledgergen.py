"""Fill a home's ledger with ``records`` records the way a long-lived home
holds them, through the real write path (the kernel, the token authority's
``token.minted`` records, the agent's turn records): per turn, an executor
token minted with an expiry, the message, one model call, the budget debit
(a kernel effect), the reply; every 50 turns the sweep's effect forgetting
what expired tokens spent; every 500 a setting registered.

Used by bench/startup.py and the start-up tests."""

from __future__ import annotations

import os

from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.agent import EXECUTOR_ROLE
from naga_core.authz import (
    SPENT_FAMILY,
    Risk,
    TokenAuthority,
    load_token_key,
    stage_minted,
)
from naga_core.kernel import Actions, Kernel
from naga_core.ledger import Entry


def fill(home: str, records: int, *, sessions: int = 500, clock_ns: int = 0) -> int:
    """Append about ``records`` records to ``home``'s ledger (created if
    new); the ledger's size after."""
    h = Home(home)
    key = load_token_key(h, create=True)
    now = clock_ns or 1_700_000_000_000_000_000
    with open_ledger(h, create=True) as ledger:
        kernel = Kernel.open(ledger, Actions())
        authority = TokenAuthority.over_kernel(kernel, key, clock=lambda: now)
        expired: list[bytes] = []
        i = 0
        while ledger.size < records:
            session, turn = f"s-{i % sessions}", f"t{i:09d}"
            with kernel.staged():
                token = authority.mint(
                    EXECUTOR_ROLE,
                    trust=TrustLevel.OWNER,
                    risk=Risk.R2,
                    session=session,
                    budget=100_000,
                    ttl_ns=60_000_000_000,
                )
                stage_minted(ledger, token, by="bench")
                message = apb.TurnRecord(
                    session=session,
                    turn_id=turn,
                    idempotency_key=f"k{i}",
                    text=f"message {i}: what is on my calendar today?",
                    trust="owner",
                    risk_ceiling=2,
                )
                ledger.stage(_entry("turn.message", message))
                model = apb.TurnRecord(session=session, turn_id=turn, model_calls=1)
                ledger.stage(_entry("turn.model", model))
                kernel.perform(
                    [],
                    [],
                    description=f"token {token.id.hex()} spent 120 for a model call",
                    forward=[
                        kpb.SetOp(
                            family=SPENT_FAMILY,
                            key=token.id.hex(),
                            value=kpb.Value(integer=120),
                        )
                    ],
                )
                reply = apb.TurnRecord(session=session, turn_id=turn, text=f"answer {i}")
                ledger.stage(_entry("turn.reply", reply))
                expired.append(token.id)
                if len(expired) >= 50:
                    ops = [kpb.SetOp(family=SPENT_FAMILY, key=t.hex()) for t in expired]
                    kernel.perform([], [], description="forget expired spending", forward=ops)
                    expired = []
                if i % 500 == 0:
                    kernel.register("settings", "agent.max_steps", 8 + i % 3)
            if i % 200 == 199:
                ledger.commit()
            i += 1
            now += 1_000_000
        ledger.commit()
        return ledger.size


def _entry(kind: str, body: apb.TurnRecord) -> Entry:
    return Entry.of(kind, body.SerializeToString())


if __name__ == "__main__":  # python bench/_ledgergen.py HOME RECORDS
    import sys

    os.makedirs(sys.argv[1], mode=0o700, exist_ok=True)
    print(fill(sys.argv[1], int(sys.argv[2])))
