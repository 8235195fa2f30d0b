"""The trust policy table, cell by cell: trust level x tool risk level x
event kind x scope, against an independent statement of the rules, and the
design document against the code."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from naga.policy import MAX_RISK, POLICY, EventKind, Scope
from naga.trust import TrustLevel

DOC = Path(__file__).resolve().parents[2] / "docs" / "design" / "trust.md"

# The rules, stated again by hand (not derived from the code under test).
HIGHEST_RISK = {
    TrustLevel.OWNER: 4,
    TrustLevel.KNOWN: 2,
    TrustLevel.GUEST: 0,
    TrustLevel.UNTRUSTED: -1,
}
WIDEST_SCOPE = {
    TrustLevel.OWNER: {Scope.OWN, Scope.SESSION, Scope.OTHER},
    TrustLevel.KNOWN: {Scope.OWN, Scope.SESSION},
    TrustLevel.GUEST: {Scope.OWN},
    TrustLevel.UNTRUSTED: {Scope.OWN},
}
HIDDEN_KINDS = {
    TrustLevel.OWNER: set[str](),
    TrustLevel.KNOWN: {"tool.approval"},
    TrustLevel.GUEST: {"turn.usage", "tool.approval"},
    TrustLevel.UNTRUSTED: {
        "tool.approval",
        "message",
        "turn.delta",
        "tool.started",
        "tool.finished",
        "turn.usage",
        "lane.queued",
    },
}
TOOL_KINDS = {"tool.started", "tool.finished"}
RISKS = [None, 0, 1, 2, 3, 4]  # None: a tool of unknown risk (counts as R4)

CELLS = list(itertools.product(list(TrustLevel), RISKS, list(EventKind), list(Scope)))


@pytest.mark.parametrize(("level", "risk", "kind", "scope"), CELLS)
def test_cell(level: TrustLevel, risk: int | None, kind: EventKind, scope: Scope) -> None:
    effective = MAX_RISK if risk is None else risk
    expected = (
        kind.value not in HIDDEN_KINDS[level]
        and scope in WIDEST_SCOPE[level]
        and (kind.value not in TOOL_KINDS or effective <= HIGHEST_RISK[level])
    )
    assert POLICY[level].sees(kind, scope, risk) is expected


@pytest.mark.parametrize(("level", "risk"), list(itertools.product(list(TrustLevel), RISKS)))
def test_tool_list_cell(level: TrustLevel, risk: int | None) -> None:
    effective = MAX_RISK if risk is None else risk
    assert POLICY[level].tool_visible(risk) is (effective <= HIGHEST_RISK[level])


def test_a_guest_never_sees_a_write_capable_tool_or_another_session() -> None:
    guest = POLICY[TrustLevel.GUEST]
    for kind, risk in itertools.product(EventKind, [1, 2, 3, 4, None]):
        if kind.value in TOOL_KINDS:
            assert not guest.sees(kind, Scope.OWN, risk)
    for kind in EventKind:
        assert not guest.sees(kind, Scope.OTHER)
        assert not guest.sees(kind, Scope.SESSION)


def test_budgets_and_rollback_rise_with_trust() -> None:
    ordered = [POLICY[level] for level in sorted(TrustLevel)]
    budgets = [p.turn_budget for p in ordered]
    assert budgets == sorted(budgets)
    assert len(set(budgets)) == len(budgets)
    assert [p.may_rollback for p in ordered] == [False, False, False, True]


def test_the_design_document_shows_this_table() -> None:
    text = DOC.read_text()
    block = text.split("<!-- policy-table -->")[1].split("<!-- /policy-table -->")[0]
    rows = block.strip().splitlines()[2:]
    shown: dict[str, list[str]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        shown[cells[0]] = cells[1:]
    for level, pol in POLICY.items():
        budget, risk, scope, rollback, events = shown[level.label]
        assert int(budget) == pol.turn_budget
        assert risk == ("none" if pol.max_tool_risk is None else f"R{pol.max_tool_risk}")
        assert scope == pol.scope.value
        assert rollback == ("yes" if pol.may_rollback else "no")
        assert set(re.split(r",\s*", events)) == {k.value for k in pol.events}
