"""INV-1, confluence: incremental lifecycle plans converge on the one-shot composition.

A hypothesis state machine draws a random DAG of 2-10 components (random
requires, some of them facts or names nobody provides, random ``provides``
aliases, some components broken so that starting them fails), then applies
any sequence of register / unregister / enable / disable / add_fact /
remove_fact / retry, plus crashes, repairs and attempts to close a cycle. A
simulated runtime executes every plan action by action under the contract in
``naga_core.kernel._components``: a start of a broken component is reported
at once with ``start_failed`` and the corrective plan replaces the rest.

Checked while executing: stops precede starts; a start never hits something
running and its requirements are all met at that moment (so the start order
is a valid dependency order); a stop never hits something not running and
never leaves a running component without a provider. Checked at quiescence,
after every step: the runtime runs exactly ``planner.active``, which is
``one_shot(...)`` of the same inputs as tracked by the test, which is the
least fixpoint computed by naive iteration here; ``activation_order()`` is
topological; ``status()`` agrees with all of it.

``NAGA_CONFLUENCE_EXAMPLES`` raises the number of examples (default 600,
about 15 s; the timeout grows with it).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from naga_core.kernel._components import (
    ActionKind,
    ComponentError,
    ComponentSpec,
    DependencyCycle,
    LifecyclePlanner,
    Plan,
    State,
    UnknownComponent,
    is_fact,
    one_shot,
)

EXAMPLES = int(os.environ.get("NAGA_CONFLUENCE_EXAMPLES") or 600)
STEPS = 40

NAMES = tuple("abcdefghij")
ALIASES = ("x", "y", "z")  # some may end up provided by nobody: always missing
FACTS = ("cap:net", "cap:gpu", "setting:model.default")
INTRUDER = "cyc"  # never in a universe, so registering it is always new


@dataclass(frozen=True)
class Universe:
    specs: tuple[ComponentSpec, ...]
    broken: frozenset[str]


@st.composite
def universes(draw: st.DrawFn) -> Universe:
    count = draw(st.integers(2, len(NAMES)))
    # Index order is the DAG order; shuffling names keeps it apart from the
    # name order the planner breaks ties with.
    names = draw(st.permutations(NAMES))[:count]
    provides = [draw(st.sets(st.sampled_from(ALIASES), max_size=2)) for _ in names]
    specs: list[ComponentSpec] = []
    for i, name in enumerate(names):
        # An alias is a legal requirement only if all its providers come
        # earlier; one with no provider at all is legal and stays missing.
        aliases = [a for a in ALIASES if all(a not in provides[j] for j in range(i, count))]
        requires = draw(st.sets(st.sampled_from(names[:i]), max_size=3)) if i else set[str]()
        # Mostly components; a fact or an alias now and then, or too much
        # of the graph would be pending for good.
        requires |= draw(st.sets(st.sampled_from(sorted({*aliases, *FACTS})), max_size=1))
        specs.append(ComponentSpec.of(name, requires=requires, provides=provides[i]))
    broken = draw(st.sets(st.sampled_from(names), max_size=3))
    return Universe(tuple(specs), frozenset(broken))


def provides_name(spec: ComponentSpec, req: str) -> bool:
    return req == spec.name or req in spec.provides


def met(spec: ComponentSpec, facts: set[str], running: list[ComponentSpec]) -> bool:
    return all(
        req in facts if is_fact(req) else any(provides_name(r, req) for r in running)
        for req in spec.requires
    )


class Confluence(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.planner = LifecyclePlanner()
        self.universe: dict[str, ComponentSpec] = {}
        self.broken: set[str] = set()  # the world: starting these fails
        # The inputs as the test, not the planner, understands them.
        self.registered: set[str] = set()
        self.enabled: set[str] = set()
        self.facts: set[str] = set()
        self.failed: set[str] = set()
        self.running: list[str] = []  # in start order

    # -- the simulated runtime ----------------------------------------------

    def execute(self, plan: Plan, *, crashed: str | None = None) -> None:
        """Run ``plan``; ``crashed`` is a component the world took away first."""
        while True:
            kinds = [a.kind for a in plan]
            assert ActionKind.STOP not in kinds[len(plan.stops) :], f"start before stop: {plan}"
            for action in plan:
                if action.kind is ActionKind.STOP:
                    assert action.name in self.running, f"stops {action.name}, not running"
                    self.running.remove(action.name)
                    self.check_providers_still_running(crashed)
                    continue
                assert action.name not in self.running, f"starts {action.name} twice"
                spec = self.universe[action.name]
                assert met(spec, self.facts, self.running_specs()), f"{spec} started too early"
                if action.name in self.broken:
                    self.failed.add(action.name)
                    plan = self.planner.start_failed(action.name, "broken")
                    break  # the rest of the plan is abandoned, per the contract
                self.running.append(action.name)
            else:
                return

    def running_specs(self) -> list[ComponentSpec]:
        return [self.universe[n] for n in self.running]

    def check_providers_still_running(self, crashed: str | None) -> None:
        # Facts and crashed components vanish before the plan reacts to
        # them; anything else is stopped only once nothing running needs it.
        running = self.running_specs()
        if crashed is not None:
            running.append(self.universe[crashed])
        for spec in self.running_specs():
            for req in spec.requires:
                if not is_fact(req):
                    assert any(provides_name(r, req) for r in running), f"{spec.name} lost {req}"

    # -- rules ----------------------------------------------------------------

    @initialize(universe=universes(), data=st.data())
    def setup(self, universe: Universe, data: st.DataObject) -> None:
        # Start from a busy state, reached by ordinary operations: from an
        # empty one, most random steps would produce empty plans.
        self.universe = {spec.name: spec for spec in universe.specs}
        self.broken = set(universe.broken)
        for name in data.draw(st.permutations(sorted(self.universe))):
            self.planner.register(self.universe[name])
            self.registered.add(name)
        # Drawing what is left out (small by default) keeps most of it on.
        off = data.draw(st.sets(st.sampled_from(sorted(self.universe)), max_size=3))
        for name in data.draw(st.permutations(sorted(set(self.universe) - off))):
            self.enabled.add(name)
            self.execute(self.planner.enable(name))
        absent = data.draw(st.sets(st.sampled_from(FACTS), max_size=2))
        for fact in data.draw(st.permutations(sorted(set(FACTS) - absent))):
            self.facts.add(fact)
            self.execute(self.planner.add_fact(fact))

    def pick(self, data: st.DataObject, names: set[str] | list[str]) -> str:
        return data.draw(st.sampled_from(sorted(names)))

    @precondition(lambda self: len(self.registered) < len(self.universe))
    @rule(data=st.data())
    def register(self, data: st.DataObject) -> None:
        name = self.pick(data, set(self.universe) - self.registered)
        plan = self.planner.register(self.universe[name])
        assert plan == Plan.empty()
        self.registered.add(name)

    @precondition(lambda self: self.registered)
    @rule(data=st.data())
    def unregister(self, data: st.DataObject) -> None:
        name = self.pick(data, self.registered)
        plan = self.planner.unregister(name)
        self.registered.discard(name)
        self.enabled.discard(name)
        self.failed.discard(name)
        self.execute(plan)

    @precondition(lambda self: self.registered - self.enabled)
    @rule(data=st.data())
    def enable(self, data: st.DataObject) -> None:
        name = self.pick(data, self.registered - self.enabled)
        plan = self.planner.enable(name)
        self.enabled.add(name)
        self.execute(plan)

    @precondition(lambda self: self.enabled)
    @rule(data=st.data())
    def disable(self, data: st.DataObject) -> None:
        name = self.pick(data, self.enabled)
        plan = self.planner.disable(name)
        self.enabled.discard(name)
        self.failed.discard(name)
        self.execute(plan)

    @rule(fact=st.sampled_from(FACTS))
    def add_fact(self, fact: str) -> None:
        plan = self.planner.add_fact(fact)
        self.facts.add(fact)
        self.execute(plan)

    @precondition(lambda self: self.facts)
    @rule(data=st.data())
    def remove_fact(self, data: st.DataObject) -> None:
        fact = self.pick(data, self.facts)
        plan = self.planner.remove_fact(fact)
        self.facts.discard(fact)
        self.execute(plan)

    @precondition(lambda self: self.failed)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        name = self.pick(data, self.failed)
        plan = self.planner.retry(name)
        self.failed.discard(name)
        self.execute(plan)

    @precondition(lambda self: self.registered)
    @rule(data=st.data())
    def repeating_an_operation_does_nothing(self, data: st.DataObject) -> None:
        name = self.pick(data, self.registered)
        before = self.snapshot()
        if name in self.enabled:
            assert self.planner.enable(name) == Plan.empty()
        else:
            assert self.planner.disable(name) == Plan.empty()
        if name not in self.failed:
            assert self.planner.retry(name) == Plan.empty()
        for fact in FACTS:
            change = self.planner.add_fact if fact in self.facts else self.planner.remove_fact
            assert change(fact) == Plan.empty()
        assert self.snapshot() == before

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        name = self.pick(data, self.running)
        self.running.remove(name)
        self.failed.add(name)
        self.execute(self.planner.crashed(name, "died"), crashed=name)

    @rule(data=st.data(), broken=st.booleans())
    def world_changes(self, data: st.DataObject, broken: bool) -> None:
        name = self.pick(data, set(self.universe))
        (self.broken.add if broken else self.broken.discard)(name)

    @rule(name=st.sampled_from([*NAMES, INTRUDER]))
    def unknown_names_are_refused(self, name: str) -> None:
        if name in self.registered:
            return
        before = self.snapshot()
        for call in (self.planner.enable, self.planner.disable, self.planner.retry):
            with pytest.raises(UnknownComponent):
                call(name)
        with pytest.raises(ComponentError):
            self.planner.start_failed(name, "not ours")
        assert self.snapshot() == before

    @precondition(lambda self: any(self.graph_requirements(n) for n in self.registered))
    @rule(data=st.data())
    def closing_a_cycle_changes_nothing(self, data: st.DataObject) -> None:
        # INTRUDER provides something c requires and requires c (or one of
        # c's dependents), so c needs INTRUDER needs c.
        needy = self.pick(data, {n for n in self.registered if self.graph_requirements(n)})
        req = self.pick(data, self.graph_requirements(needy))
        via = self.pick(data, {n for n in self.registered if self.reaches(n, needy)})
        intruder = ComponentSpec.of(INTRUDER, requires={via}, provides={req})
        self.refuse_cycle(intruder)

    @rule(alias=st.sampled_from([INTRUDER, *ALIASES]))
    def closing_a_self_cycle_changes_nothing(self, alias: str) -> None:
        provides = () if alias == INTRUDER else (alias,)
        self.refuse_cycle(ComponentSpec.of(INTRUDER, requires={alias}, provides=provides))

    def refuse_cycle(self, intruder: ComponentSpec) -> None:
        before = self.snapshot()
        with pytest.raises(DependencyCycle) as caught:
            self.planner.register(intruder)
        cycle = caught.value.cycle
        assert cycle[0] == cycle[-1] == INTRUDER
        assert str(caught.value) == "dependency cycle: " + " -> ".join(cycle)
        specs = {**self.universe, INTRUDER: intruder}
        for a, b in itertools.pairwise(cycle):
            assert any(provides_name(specs[b], r) for r in specs[a].requires), f"{a} -/-> {b}"
        assert self.snapshot() == before

    # -- the test's own view of the graph -------------------------------------

    def graph_requirements(self, name: str) -> set[str]:
        return {r for r in self.universe[name].requires if not is_fact(r)}

    def depends_on(self, a: str, b: str) -> bool:
        return any(provides_name(self.universe[b], r) for r in self.universe[a].requires)

    def reaches(self, start: str, goal: str) -> bool:
        """``start`` (transitively) depends on ``goal``, among registered components."""
        todo, seen = [start], {start}
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            nxt = {n for n in self.registered if n not in seen and self.depends_on(name, n)}
            seen |= nxt
            todo.extend(nxt)
        return False

    def least_fixpoint(self) -> set[str]:
        active: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name in sorted(self.registered & self.enabled - self.failed - active):
                if met(self.universe[name], self.facts, [self.universe[n] for n in active]):
                    active.add(name)
                    changed = True
        return active

    def snapshot(self) -> object:
        p = self.planner
        statuses = {n: p.status(n) for n in sorted(p.specs)}
        return (dict(p.specs), p.enabled, p.facts, dict(p.failed), p.activation_order(), statuses)

    # -- quiescence -------------------------------------------------------------

    @invariant()
    def converged(self) -> None:
        p = self.planner
        reference = one_shot(
            [self.universe[n] for n in self.registered], self.enabled, self.facts, self.failed
        )
        assert len(set(self.running)) == len(self.running)
        assert set(self.running) == p.active == set(reference) == self.least_fixpoint()
        assert p.activation_order() == reference
        assert set(p.specs) == self.registered
        assert (p.enabled, p.facts, set(p.failed)) == (self.enabled, self.facts, self.failed)
        assert met_all(self)

    @invariant()
    def order_is_topological(self) -> None:
        order = self.planner.activation_order()
        for i, later in enumerate(order):
            for earlier in order[:i]:
                assert not self.depends_on(earlier, later), f"{earlier} before {later}"

    @invariant()
    def status_agrees(self) -> None:
        for name in self.registered:
            status = self.planner.status(name)
            expected = (
                State.DISABLED
                if name not in self.enabled
                else State.FAILED
                if name in self.failed
                else State.ACTIVE
                if name in self.running
                else None
            )
            if expected is not None:
                assert status.state is expected, (name, status)
                continue
            assert status.state in {State.PENDING, State.BLOCKED}, (name, status)
            assert status.missing or status.failed_deps, (name, status)
            assert set(status.failed_deps) <= self.failed
            for missing in status.missing:
                assert missing not in self.facts
                assert not any(provides_name(self.universe[n], missing) for n in self.running)


def met_all(machine: Confluence) -> bool:
    running = machine.running_specs()
    return all(met(spec, machine.facts, running) for spec in running)


Confluence.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None
)
# About 40 examples a second; a raised NAGA_CONFLUENCE_EXAMPLES must not run
# into the suite's 600 s default timeout.
TestConfluence = pytest.mark.timeout(max(600, EXAMPLES // 10))(Confluence.TestCase)
