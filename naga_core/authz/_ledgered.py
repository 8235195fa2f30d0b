"""Revocations and spending as kernel state, so they are in the ledger,
survive restarts and can be audited.

* ``token.revoked/<id hex> = True``: one registration per revoked id. A
  token's attenuations share its id, so they are revoked with it; its
  sub-tasks' tokens name it in their lineage, so the authority refuses them
  too.
* ``budget.spent/<id hex> = <total>``: what was spent under an id, its
  sub-tasks' spending included. One debit is ONE kernel effect setting the
  new total of the token and of every ancestor, so a crash leaves all of
  them debited or none.

A debit checks and journals with no await in between: in the core's trio
loop, two debits against one budget cannot interleave.
"""

from __future__ import annotations

from collections.abc import Iterable

from naga.constants import TOKEN_ID_BYTES
from naga.tokens import MAX_INT64
from naga.v1 import kernel_pb2 as kpb
from naga_core.authz._errors import AuthzError, InvalidRequest, RejectReason, TokenRejected
from naga_core.authz._grant import Grant
from naga_core.kernel import Kernel

REVOKED_FAMILY = "token.revoked"
SPENT_FAMILY = "budget.spent"


def _key(token_id: bytes) -> str:
    if not isinstance(token_id, bytes) or len(token_id) != TOKEN_ID_BYTES:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise AuthzError(f"a token id is {TOKEN_ID_BYTES} bytes, not {token_id!r}")
    return token_id.hex()


class RevocationList:
    """Revoked token ids, as the kernel's ``token.revoked`` family."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def revoke(self, token_id: bytes, reason: str) -> int | None:
        """Revoke ``token_id`` (its attenuations and sub-tasks with it). Needs a
        reason, kept in the ledger. Returns the seq, or None if it already was."""
        key = _key(token_id)
        if not reason.strip():
            raise AuthzError(f"revoking token {key} needs a reason")
        if self.is_revoked(token_id):
            return None
        return self._kernel.register(
            REVOKED_FAMILY, key, True, description=f"revoke token {key}: {reason}"
        )

    def is_revoked(self, token_id: bytes) -> bool:
        return self._kernel.state.get((REVOKED_FAMILY, _key(token_id))) is True

    def revoked(self) -> list[bytes]:
        """Every revoked id, sorted."""
        return sorted(
            bytes.fromhex(k)
            for (family, k), v in self._kernel.state.items()
            if family == REVOKED_FAMILY and v is True
        )


class BudgetAccount:
    """Spending per token id, as the kernel's ``budget.spent`` family."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def spent(self, token_id: bytes) -> int:
        """Total spent under ``token_id`` and its sub-tasks (0 if nothing)."""
        value = self._kernel.state.get((SPENT_FAMILY, _key(token_id)))
        # Only debit writes this family; anything else fails closed as spent.
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return MAX_INT64 if value is not None else 0

    def debit(self, grant: Grant, amount: int, *, what: str = "") -> int | None:
        """Spend ``amount`` under ``grant``: against the token's own ceiling and
        every ancestor's. Refused (BUDGET_EXHAUSTED) if any would go over,
        and then nothing is recorded. Returns the seq (None for 0)."""
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidRequest(f"amount to spend {amount!r} is not a non-negative integer")
        if amount == 0:
            return None
        chain = [(grant.token_id, grant.budget_ceiling, "the token")]
        chain += [
            (a.id, a.budget_ceiling, f"ancestor {a.id.hex()} ({n} level(s) up)")
            for n, a in enumerate(grant.lineage, start=1)
        ]
        ops: list[kpb.SetOp] = []
        for token_id, ceiling, who in chain:
            total = self.spent(token_id) + amount
            limit = MAX_INT64 if ceiling is None else ceiling
            if total > limit:
                raise TokenRejected(
                    RejectReason.BUDGET_EXHAUSTED,
                    f"spending {amount} would take {who} to {total} of its {limit}",
                    principal=grant.principal,
                    token_id=grant.token_id,
                )
            ops.append(
                kpb.SetOp(family=SPENT_FAMILY, key=_key(token_id), value=kpb.Value(integer=total))
            )
        because = f" for {what}" if what else ""
        return self._kernel.perform(
            [],
            [],
            description=f"token {grant.token_id.hex()} spent {amount}{because}",
            forward=ops,
        )

    def forget(self, token_ids: Iterable[bytes], *, why: str) -> int | None:
        """Drop what expired tokens spent: one effect removing their entries
        (those that have one). Only for tokens past their expiry, whose
        descendants are expired too (a child keeps its ancestors' expiry
        caveats): no call can be checked against these entries again, and
        keeping them would make kernel state grow by one entry per turn for
        ever. The debits stay in the ledger. The seq, or None if none of
        them had spent anything."""
        keys = sorted({_key(t) for t in token_ids})
        ops = [
            kpb.SetOp(family=SPENT_FAMILY, key=k)
            for k in keys
            if self._kernel.state.get((SPENT_FAMILY, k)) is not None
        ]
        if not ops:
            return None
        return self._kernel.perform(
            [],
            [],
            description=f"forget what {len(ops)} expired token(s) spent: {why}",
            forward=ops,
        )


__all__ = ["REVOKED_FAMILY", "SPENT_FAMILY", "BudgetAccount", "RevocationList"]
