"""At start: the turn tokens whose spending kernel state still holds.

The agent queues each ended turn's token and drops what it spent once it
expires (:class:`~naga_core.agent._turn.Expiring`), but that queue lives in
memory: the tokens of the turns of the last minutes before a stop would
keep their ``budget.spent`` entries for ever. So at start the agent finds
them again: every ``budget.spent`` key, and the expiry of each from its
``token.minted`` record (read in the same pass over the ledger that
rebuilds the sessions)."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from naga.v1 import authz_pb2 as zpb
from naga_core.agent._config import EXECUTOR_ROLE
from naga_core.authz import MINTED_KIND, SPENT_FAMILY
from naga_core.kernel import Kernel
from naga_core.ledger import Record


def spent_ids(kernel: Kernel) -> set[bytes]:
    """The ids of the tokens with a ``budget.spent`` entry (on the loop)."""
    found: set[bytes] = set()
    for family, key in kernel.state:
        if family == SPENT_FAMILY:
            try:
                found.add(bytes.fromhex(key))
            except ValueError:
                continue  # not written by BudgetAccount: not ours to drop
    return found


class TurnTokens:
    """The expiry of each turn (executor) token among ``ids``, from the
    ``token.minted`` records :meth:`see` is shown."""

    def __init__(self, ids: set[bytes]) -> None:
        self._ids = ids
        #: (expiry in Unix ns, token id), in ledger order.
        self.found: list[tuple[int, bytes]] = []

    def see(self, record: Record) -> None:
        if not self._ids or record.kind != MINTED_KIND:
            return
        try:
            minted = zpb.TokenMinted.FromString(record.payload)
        except DecodeError:
            return  # not ours to judge: `naga ledger verify` checks records
        # A token without an expiry never stops being checkable: its
        # spending must stay.
        if (
            minted.id in self._ids
            and minted.role == EXECUTOR_ROLE
            and minted.HasField("expires_at_ns")
        ):
            self._ids.discard(minted.id)
            self.found.append((minted.expires_at_ns, minted.id))


__all__ = ["TurnTokens", "spent_ids"]
