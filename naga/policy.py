"""The trust policy table: what a peer of each trust level may spend, which
tools it may see and which events reach it (SPEC section 4, L0.5 "Trust";
docs/design/trust.md).

One declarative table. The core mints every turn's token from the row of
the peer's trust at that moment (its budget, its risk ceiling, the tools
its model is offered: :meth:`TrustPolicy.tool_visible`); the gateway shows
a peer what the same row lets it see. Everything a peer is shown goes
through :meth:`TrustPolicy.sees`; nothing else decides.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from naga.trust import TrustLevel


class EventKind(enum.Enum):
    """What the gateway streams to a peer (docs/protocol/websocket.md)."""

    MESSAGE = "message"  # a user message, recorded
    ACCEPTED = "turn.accepted"  # a turn started (its message is durable)
    DELTA = "turn.delta"  # more reply text
    TOOL_STARTED = "tool.started"
    TOOL_FINISHED = "tool.finished"
    FINAL = "turn.final"  # the whole reply
    USAGE = "turn.usage"  # tokens and calls a turn cost
    ERROR = "turn.error"
    QUEUED = "lane.queued"  # a message waits in its session's lane
    APPROVAL = "tool.approval"  # a tool call waits for the owner (owner only)


class Scope(enum.Enum):
    """Whose event it is, relative to the peer looking."""

    OWN = "own"  # the peer's own message, or a turn answering it
    SESSION = "session"  # another peer's, in a session the peer is in
    OTHER = "other"  # in a session the peer is not in


#: Tool risk levels, R0 (read-only) .. R4 (destructive).
MAX_RISK = 4
_TOOL_KINDS = frozenset({EventKind.TOOL_STARTED, EventKind.TOOL_FINISHED})


@dataclass(frozen=True, slots=True)
class TrustPolicy:
    """One row of the table."""

    level: TrustLevel
    #: Tokens (prompt + completion) one turn may spend.
    turn_budget: int
    #: The highest tool risk level shown (None: no tool at all).
    max_tool_risk: int | None
    #: The event kinds that reach the peer at all.
    events: frozenset[EventKind]
    #: The widest scope of events the peer sees.
    scope: Scope
    #: Whether the peer may roll the ledger back (the console's "undo").
    may_rollback: bool
    #: Whether the agent may write skills from the peer's turns (into the
    #: peer's own scope only; docs/design/skills.md).
    may_write_skills: bool = False

    def tool_visible(self, risk: int | None) -> bool:
        """Whether a tool of ``risk`` (None: unknown, treated as R4) shows:
        in the tool list, in tool events, and to the peer's model."""
        if self.max_tool_risk is None:
            return False
        return (MAX_RISK if risk is None else risk) <= self.max_tool_risk

    @property
    def risk_ceiling(self) -> int:
        """The risk ceiling of a turn's token (0 when no tool shows: the
        token then allows no tool at all)."""
        return 0 if self.max_tool_risk is None else self.max_tool_risk

    def sees(self, kind: EventKind, scope: Scope, tool_risk: int | None = None) -> bool:
        """Whether an event of ``kind`` in ``scope`` reaches the peer;
        ``tool_risk`` is the tool's level for tool events."""
        if kind not in self.events:
            return False
        if _WIDTH[scope] > _WIDTH[self.scope]:
            return False
        return kind not in _TOOL_KINDS or self.tool_visible(tool_risk)


_WIDTH = {Scope.OWN: 0, Scope.SESSION: 1, Scope.OTHER: 2}
_ALL = frozenset(EventKind)
_TEXT = frozenset(
    {EventKind.MESSAGE, EventKind.ACCEPTED, EventKind.DELTA, EventKind.FINAL, EventKind.ERROR}
)

#: The table (docs/design/trust.md shows it; a test checks they agree).
POLICY: Mapping[TrustLevel, TrustPolicy] = MappingProxyType(
    {
        TrustLevel.OWNER: TrustPolicy(
            TrustLevel.OWNER,
            200_000,
            4,
            _ALL,
            Scope.OTHER,
            may_rollback=True,
            may_write_skills=True,
        ),
        TrustLevel.KNOWN: TrustPolicy(
            TrustLevel.KNOWN,
            50_000,
            2,
            _ALL - {EventKind.APPROVAL},
            Scope.SESSION,
            may_rollback=False,
            may_write_skills=True,
        ),
        TrustLevel.GUEST: TrustPolicy(
            TrustLevel.GUEST,
            10_000,
            0,
            _TEXT | _TOOL_KINDS | {EventKind.QUEUED},
            Scope.OWN,
            may_rollback=False,
        ),
        TrustLevel.UNTRUSTED: TrustPolicy(
            TrustLevel.UNTRUSTED,
            2_000,
            None,
            frozenset({EventKind.ACCEPTED, EventKind.FINAL, EventKind.ERROR}),
            Scope.OWN,
            may_rollback=False,
        ),
    }
)


def policy_for(level: TrustLevel) -> TrustPolicy:
    return POLICY[level]


__all__ = ["MAX_RISK", "POLICY", "EventKind", "Scope", "TrustPolicy", "policy_for"]
