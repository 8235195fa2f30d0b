"""INV-6 for authorization: privileges lower automatically, never rise
without the owner.

* :class:`ViolationPolicy` counts policy violations per principal (the
  kernel's ``authz.violations`` family, so counts survive restarts) and, at
  every ``threshold``-th, lowers the principal's trust one level in the
  trust table. The authority caps every grant's trust at the table's level,
  so the lowering reaches tokens already handed out, at their next call;
  a stream already open under the old level ends (the core's trust watch,
  naga_core/daemon/_standing.py).
* :func:`authz_raises` is a kernel ratchet: a rollback (or merge) that would
  un-revoke a token or refund spending raises a privilege, so the kernel
  asks for the owner. Open the kernel with ``ratchets=(*RATCHETS,
  *AUTHZ_RATCHETS)``.
* :class:`EndedTokens` narrows that for the core: a refund to a token that
  can never spend again (its turn ended, so nothing holds it) raises
  nothing live, so a rollback past a finished turn needs no owner. Open the
  core's kernel with ``ratchets=(*RATCHETS, *ended.ratchets)``; the agent
  tells it each turn token whose turn ended. Every other refund, and every
  un-revocation, is still a raise.
* :func:`keeps_revocations` is a kernel keep: a rollback leaves every
  revocation in place (ADR 0046). A revocation is one-way: the token's
  process is gone (a restart revokes every worker's) or the owner withdrew
  it; lifting it gives nothing back that a new token would not, and would
  make a stolen copy good again. Open the core's kernel with
  ``keeps=AUTHZ_KEEPS``; then no rollback is refused for an un-revocation,
  the console's included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from naga_core.authz._errors import AuthzError, TokenRejected
from naga_core.authz._ledgered import REVOKED_FAMILY, SPENT_FAMILY
from naga_core.kernel import Change, Kernel, TrustLevel, TrustTable

VIOLATIONS_FAMILY = "authz.violations"


class ViolationPolicy:
    """Build with :meth:`over`."""

    def __init__(self, kernel: Kernel, threshold: int) -> None:
        self._kernel = kernel
        self._table = TrustTable(kernel)
        self._threshold = threshold

    @classmethod
    def over(cls, kernel: Kernel, *, threshold: int = 3) -> ViolationPolicy:
        """Lower a principal's trust one level every ``threshold`` violations."""
        if isinstance(threshold, bool) or not 1 <= threshold <= 1000:
            raise AuthzError(f"violation threshold {threshold!r} is not in 1..1000")
        return cls(kernel, threshold)

    @property
    def threshold(self) -> int:
        return self._threshold

    def count(self, peer: str) -> int:
        """Violations since ``peer``'s trust was last lowered by this policy."""
        value = self._kernel.state.get((VIOLATIONS_FAMILY, peer))
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def record(self, peer: str, what: str) -> TrustLevel:
        """Count one violation by ``peer`` (``what`` it did, for the ledger);
        returns the peer's trust level afterwards."""
        level = self._table.level(peer)  # validates the peer id
        if not what.strip():
            raise AuthzError(f"a violation by {peer!r} needs a description")
        count = self.count(peer) + 1
        self._kernel.register(
            VIOLATIONS_FAMILY, peer, count, description=f"violation {count} by {peer}: {what}"
        )
        if count < self._threshold:
            return level
        # Lower first, then reset: a crash between the two leaves the count
        # at the threshold, so the next violation lowers again: it errs
        # toward less privilege, never more.
        if level > TrustLevel.UNTRUSTED:
            self._table.lower(
                peer,
                TrustLevel(level - 1),
                f"{count} policy violations, the last: {what}",
            )
        self._kernel.register(
            VIOLATIONS_FAMILY,
            peer,
            None,
            description=f"violations of {peer} counted again from 0 after lowering its trust",
        )
        return self._table.level(peer)

    def observe(self, rejected: TokenRejected) -> TrustLevel | None:
        """Record ``rejected`` if it is a violation charged to a principal
        (the token verified and names one); the level afterwards, else None."""
        if rejected.principal is None or not rejected.reason.is_violation:
            return None
        return self.record(rejected.principal, f"{rejected.reason.name}: {rejected.detail}")


class EndedTokens:
    """Token ids that can never spend again: the agent adds each turn's
    token when the turn ends (and, at start, every earlier turn's: their
    executors died with the last core), and forgets it once what it spent
    is dropped from kernel state. An id not in it fails closed (its refund
    is a raise)."""

    def __init__(self) -> None:
        self._ids: set[bytes] = set()

    def end(self, token_id: bytes) -> None:
        """``token_id`` will never be presented again."""
        if token_id:
            self._ids.add(token_id)

    def forget(self, token_ids: Iterable[bytes]) -> None:
        """``token_ids``' spending is gone from kernel state: nothing is left
        to refund."""
        self._ids.difference_update(token_ids)

    def __contains__(self, token_id: object) -> bool:
        return token_id in self._ids

    def raises(self, changes: Iterable[Change]) -> list[Change]:
        """Like :func:`authz_raises`, but a refund to an ended token is not a
        raise: nothing can spend under it again, so what it spent is only
        history (the debit stays in the ledger either way)."""
        return [c for c in changes if _unrevokes(c) or (_refunds(c) and not self._ended(c.key))]

    @property
    def ratchets(self) -> tuple[Callable[[Sequence[Change]], Sequence[Change]], ...]:
        """This set's kernel ratchets, in place of :data:`AUTHZ_RATCHETS`."""
        return (self.raises,)

    def _ended(self, key: str) -> bool:
        try:
            return bytes.fromhex(key) in self._ids
        except ValueError:
            return False  # not written by BudgetAccount: fail closed


def authz_raises(changes: Iterable[Change]) -> list[Change]:
    """The changes that lift a revocation or refund spending."""
    return [c for c in changes if _unrevokes(c) or _refunds(c)]


def keeps_revocations(c: Change) -> bool:
    """Whether a rollback leaves ``c`` out: it would lift a revocation."""
    return _unrevokes(c)


def _unrevokes(c: Change) -> bool:
    return c.family == REVOKED_FAMILY and c.before is True and c.after is not True


def _refunds(c: Change) -> bool:
    return c.family == SPENT_FAMILY and _amount(c.after) < _amount(c.before)


def _amount(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


AUTHZ_RATCHETS = (authz_raises,)
AUTHZ_KEEPS = (keeps_revocations,)

__all__ = [
    "AUTHZ_KEEPS",
    "AUTHZ_RATCHETS",
    "VIOLATIONS_FAMILY",
    "EndedTokens",
    "ViolationPolicy",
    "authz_raises",
    "keeps_revocations",
]
