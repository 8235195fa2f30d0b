"""What a verified token grants: the answer to one request."""

from __future__ import annotations

from dataclasses import dataclass

from naga.tokens import Ancestor, Risk
from naga_core.kernel import TrustLevel


@dataclass(frozen=True, slots=True)
class Grant:
    """A verified token's effective rights at the time of one request.

    ``tools`` None means any tool; ``budget`` is what may still be spent
    (the least over the token and every ancestor; None: unlimited);
    ``budget_ceiling`` is the token's own ceiling (debits check it);
    ``trust`` is the lower of the token's trust ceiling and the principal's
    current level in the trust table.
    """

    token_id: bytes
    role: str
    session: str | None
    tools: frozenset[str] | None
    risk: Risk
    trust: TrustLevel
    budget: int | None
    budget_ceiling: int | None
    expires_at_ns: int | None
    principal: str | None
    lineage: tuple[Ancestor, ...]

    @property
    def depth(self) -> int:
        """0 for a root token, 1 for its sub-task's, ..."""
        return len(self.lineage)


__all__ = ["Grant"]
