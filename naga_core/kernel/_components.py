"""Pure lifecycle planner for declarative components (SPEC section 4, INV-1).

Model
-----
A :class:`ComponentSpec` names a component (``[a-z0-9_.-]+``), what it
``requires`` and what it ``provides`` besides its own name. A requirement is
either a *graph name* (a component's name or something a component provides)
or a *fact*, written ``kind:value`` (``setting:model.default``, ``cap:net``):
something that exists outside the component graph and that the runtime
reports with :meth:`LifecyclePlanner.add_fact` / ``remove_fact``. The colon
keeps the two apart, so no component can pose as a setting or a capability.

:class:`LifecyclePlanner` holds the registered specs, the *enabled* set (what
the owner or the agent asked for), the present facts and the *failed* set
(components whose start failed, each with its reason). A component is ACTIVE
iff it is enabled, not failed, and each requirement is a present fact or is
provided by an ACTIVE component. This is a least fixpoint, so components can
never hold each other up; and because the registered graph is kept acyclic it
is computed in one pass in dependency order. A component that cannot be
active is never a hang: :meth:`LifecyclePlanner.status` says it is pending
(``missing: setting:model.default``), blocked (``dependency failed: db``),
failed (with the reason), disabled or active.

Component ``a`` *depends on* ``b`` when ``b`` is or provides something ``a``
requires. The dependency order of a set of components is its topological
order under that relation, ties broken by name, so it is deterministic.
:meth:`~LifecyclePlanner.register` refuses a spec that would close a cycle
among the registered components (:class:`DependencyCycle`, e.g.
``a -> b -> a``) and changes nothing; since every registered graph is acyclic,
enabling can never create a cycle. A failed component stays failed until it
is disabled, unregistered or retried.

Every operation returns a :class:`Plan`: first the stops, dependents before
their dependencies, then the starts, dependencies first. (Each operation
only grows or only shrinks the desired set, so in practice a plan is one or
the other.)

Runtime contract
----------------
The runtime executes each plan's actions in order. If a start fails, it
stops executing that plan, at once calls ``start_failed(name, reason)`` and
executes the plan it gets back *instead of the rest of the failed one*.
Dependents come after their dependencies, so none of them was started; the
corrective plan starts whatever in the abandoned rest is still wanted. A
component that was running and died is reported with ``crashed(name,
reason)``, and the corrective plan stops its running dependents, last
started first. Either way the component then counts as failed. The runtime
finishes (or abandons, as above) one plan before it asks for the next.

:func:`one_shot` computes the desired composition from scratch; INV-1 is
that any sequence of operations, executed under this contract, leaves the
runtime running exactly ``one_shot(...)`` of the final inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from naga_core.kernel._component_types import (
    Action,
    ActionKind,
    ComponentError,
    ComponentSpec,
    DependencyCycle,
    Plan,
    State,
    Status,
    UnknownComponent,
    check_fact,
    is_fact,
)

__all__ = [
    "Action",
    "ActionKind",
    "ComponentError",
    "ComponentSpec",
    "DependencyCycle",
    "LifecyclePlanner",
    "Plan",
    "State",
    "Status",
    "UnknownComponent",
    "dependency_order",
    "is_fact",
    "one_shot",
]

_NONE: Final[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class _Graph:
    """The dependency relation of a set of specs, checked to be acyclic."""

    specs: Mapping[str, ComponentSpec]
    providers: Mapping[str, frozenset[str]]  # graph name -> components that are/provide it
    deps: Mapping[str, frozenset[str]]  # component -> registered components it depends on

    @classmethod
    def build(cls, specs: Mapping[str, ComponentSpec], *, blame: str | None = None) -> _Graph:
        providers: dict[str, frozenset[str]] = {}
        for spec in specs.values():
            for name in spec.provides | {spec.name}:
                providers[name] = providers.get(name, _NONE) | {spec.name}
        deps = {
            spec.name: _NONE.union(
                *(providers.get(r, _NONE) for r in spec.requires if not is_fact(r))
            )
            for spec in specs.values()
        }
        graph = cls(specs, providers, deps)
        _, stuck = graph.order(specs)
        if stuck:
            raise DependencyCycle(graph.cycle(stuck, blame))
        return graph

    def order(self, members: Iterable[str]) -> tuple[tuple[str, ...], frozenset[str]]:
        """Kahn's algorithm on ``members`` alone, ties by name; and what a cycle held back."""
        todo = set(members)
        waiting = {m: len(self.deps[m] & todo) for m in todo}
        dependents: dict[str, list[str]] = {m: [] for m in todo}
        for m in todo:
            for dep in self.deps[m] & todo:
                dependents[dep].append(m)
        ready = [m for m, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        out: list[str] = []
        while ready:
            out.append(heapq.heappop(ready))
            for dependent in dependents[out[-1]]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    heapq.heappush(ready, dependent)
        return tuple(out), frozenset(todo.difference(out))

    def cycle(self, stuck: frozenset[str], blame: str | None) -> tuple[str, ...]:
        # Every stuck component waits on another stuck one, so walking any
        # such edge must come round; smallest names keep the message stable.
        name = blame if blame in stuck else min(stuck)
        seen: dict[str, int] = {}
        path: list[str] = []
        while name not in seen:
            seen[name] = len(path)
            path.append(name)
            name = min(self.deps[name] & stuck)
        loop = path[seen[name] :]
        first = loop.index(blame) if blame in loop else loop.index(min(loop))
        loop = loop[first:] + loop[:first]
        return (*loop, loop[0])

    def satisfied(self, req: str, facts: frozenset[str], active: Iterable[str]) -> bool:
        if is_fact(req):
            return req in facts
        return not self.providers.get(req, _NONE).isdisjoint(active)

    def desired(
        self, enabled: frozenset[str], facts: frozenset[str], failed: Iterable[str]
    ) -> tuple[str, ...]:
        """The least fixpoint, in dependency order."""
        everything, _ = self.order(self.specs)
        blocked = frozenset(failed)
        active: set[str] = set()
        for name in everything:  # providers before dependents: one pass settles it
            if (
                name in enabled
                and name not in blocked
                and all(self.satisfied(r, facts, active) for r in self.specs[name].requires)
            ):
                active.add(name)
        return self.order(active)[0]


def one_shot(
    specs: Iterable[ComponentSpec],
    enabled: Iterable[str],
    facts: Iterable[str],
    failed: Iterable[str],
) -> tuple[str, ...]:
    """The dependency-ordered composition computed from scratch (INV-1's reference)."""
    by_name = _by_name(specs)
    wanted, present, broken = frozenset(enabled), frozenset(facts), frozenset(failed)
    _check_inputs(by_name, wanted | broken, present)
    return _Graph.build(by_name).desired(wanted, present, broken)


def _by_name(specs: Iterable[ComponentSpec]) -> dict[str, ComponentSpec]:
    by_name: dict[str, ComponentSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ComponentError(f"component {spec.name!r} is given twice")
        by_name[spec.name] = spec
    return by_name


def _check_inputs(
    by_name: Mapping[str, ComponentSpec], names: Iterable[str], facts: Iterable[str]
) -> None:
    """Refuse an unknown component name or a malformed fact, smallest first."""
    for name in sorted(names):
        if name not in by_name:
            raise UnknownComponent(name)
    for fact in sorted(facts):
        check_fact(fact)


def dependency_order(specs: Iterable[ComponentSpec], names: Iterable[str]) -> tuple[str, ...]:
    """``names`` in the order they start: dependencies first, ties by name."""
    by_name = {spec.name: spec for spec in specs}
    chosen = set(names)
    for name in sorted(chosen - by_name.keys()):
        raise UnknownComponent(name)
    return _Graph.build(by_name).order(chosen)[0]


@dataclass(frozen=True)
class _Inputs:
    """Everything the desired set depends on; replaced whole, never mutated."""

    graph: _Graph
    enabled: frozenset[str] = _NONE
    facts: frozenset[str] = _NONE
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def without_failure(self, name: str) -> Mapping[str, str]:
        return MappingProxyType({n: r for n, r in self.failed.items() if n != name})


class LifecyclePlanner:
    """The lifecycle state machine; every operation returns the plan to execute.

    An operation that raises changes nothing: it builds the new inputs whole,
    and they replace the old ones only once the desired set is computed.
    """

    def __init__(self) -> None:
        self._in = _Inputs(_Graph.build({}))
        self._order: tuple[str, ...] = ()
        self._last = Plan.empty()  # how far a failed plan got is read off it

    @classmethod
    def resume(
        cls,
        specs: Iterable[ComponentSpec],
        *,
        enabled: Iterable[str] = (),
        facts: Iterable[str] = (),
        failed: Mapping[str, str] | None = None,
        running: Iterable[str] = (),
    ) -> tuple[LifecyclePlanner, Plan]:
        """A planner for a world that already runs ``running`` (after a
        restart or a rollback), and the plan from there to the desired set."""
        by_name = _by_name(specs)
        graph = _Graph.build(by_name)
        failures = dict(failed or {})
        on, present, now = frozenset(enabled), frozenset(facts), frozenset(running)
        _check_inputs(by_name, on | failures.keys() | now, present)
        planner = cls()
        inputs = _Inputs(graph, on, present, MappingProxyType(failures))
        return planner, planner._commit(inputs, graph.order(now)[0])

    @property
    def specs(self) -> Mapping[str, ComponentSpec]:
        return MappingProxyType(self._in.graph.specs)

    @property
    def enabled(self) -> frozenset[str]:
        return self._in.enabled

    @property
    def facts(self) -> frozenset[str]:
        return self._in.facts

    @property
    def failed(self) -> Mapping[str, str]:
        """Failed components and why; they stay until disabled or retried."""
        return self._in.failed

    @property
    def active(self) -> frozenset[str]:
        return frozenset(self._order)

    def activation_order(self) -> tuple[str, ...]:
        return self._order

    def register(self, spec: ComponentSpec) -> Plan:
        """Add a spec, disabled. Raises DependencyCycle if it would close a cycle."""
        if spec.name in self._in.graph.specs:
            raise ComponentError(f"component {spec.name!r} is already registered")
        graph = _Graph.build({**self._in.graph.specs, spec.name: spec}, blame=spec.name)
        return self._commit(replace(self._in, graph=graph))

    def unregister(self, name: str) -> Plan:
        """Forget a component; it and whatever needed it stop."""
        self._known(name)
        graph = _Graph.build({n: s for n, s in self._in.graph.specs.items() if n != name})
        enabled = self._in.enabled - {name}
        return self._commit(
            replace(self._in, graph=graph, enabled=enabled, failed=self._in.without_failure(name))
        )

    def enable(self, name: str) -> Plan:
        self._known(name)
        return self._commit(replace(self._in, enabled=self._in.enabled | {name}))

    def disable(self, name: str) -> Plan:
        """Turn a component off; this also forgets that it failed."""
        self._known(name)
        enabled = self._in.enabled - {name}
        return self._commit(
            replace(self._in, enabled=enabled, failed=self._in.without_failure(name))
        )

    def add_fact(self, fact: str) -> Plan:
        check_fact(fact)
        return self._commit(replace(self._in, facts=self._in.facts | {fact}))

    def remove_fact(self, fact: str) -> Plan:
        check_fact(fact)
        return self._commit(replace(self._in, facts=self._in.facts - {fact}))

    def retry(self, name: str) -> Plan:
        """Forget that ``name`` failed, and start it again if it is wanted."""
        self._known(name)
        return self._commit(replace(self._in, failed=self._in.without_failure(name)))

    def start_failed(self, name: str, reason: str) -> Plan:
        """The last plan's start of ``name`` failed; returns the corrective plan.

        Per the runtime contract nothing after that start was executed, and
        the runtime executes this plan instead of the rest.
        """
        self._known(name)
        starts = self._last.starts
        if name not in starts:
            raise ComponentError(f"the last plan did not start {name!r}")
        unstarted = set(starts[starts.index(name) :])
        return self._fail(name, reason, tuple(n for n in self._order if n not in unstarted))

    def crashed(self, name: str, reason: str) -> Plan:
        """``name`` was running and stopped by itself; its dependents stop too.

        Only after the last plan ran in full: a failure while executing it is
        :meth:`start_failed`, which knows that the rest never ran.
        """
        self._known(name)
        if name not in self._order:
            raise ComponentError(f"{name!r} is not running")
        return self._fail(name, reason, tuple(n for n in self._order if n != name))

    def status(self, name: str) -> Status:
        self._known(name)
        if name not in self._in.enabled:
            return Status(State.DISABLED)
        if name in self._in.failed:
            return Status.failed(self._in.failed[name])
        if name in self._order:
            return Status(State.ACTIVE)
        missing, failed_deps = self._why(name, {})
        return Status.blocked(failed_deps) if failed_deps else Status.pending(missing)

    def _why(
        self, name: str, memo: dict[str, tuple[set[str], set[str]]]
    ) -> tuple[set[str], set[str]]:
        """(missing, failed dependencies) of an enabled, unfailed, inactive component.

        A requirement is blocked when each of its providers is failed or
        blocked; if any provider is disabled or pending, help may still come
        without a retry, so the requirement (or what it waits on) is missing.
        """
        if name not in memo:
            missing: set[str] = set()
            failed: set[str] = set()
            graph = self._in.graph
            for req in graph.specs[name].requires:
                if graph.satisfied(req, self._in.facts, self._order):
                    continue
                providers = _NONE if is_fact(req) else graph.providers.get(req, _NONE)
                req_missing = {req} if not providers else set[str]()
                req_failed: set[str] = set()
                for provider in providers:
                    if provider in self._in.failed:
                        req_failed.add(provider)
                    elif provider not in self._in.enabled:
                        req_missing.add(req)
                    else:
                        sub_missing, sub_failed = self._why(provider, memo)
                        (req_failed if sub_failed else req_missing).update(
                            sub_failed or sub_missing
                        )
                (missing if req_missing else failed).update(req_missing or req_failed)
            memo[name] = missing, failed
        return memo[name]

    def _known(self, name: str) -> None:
        if name not in self._in.graph.specs:
            raise UnknownComponent(name)

    def _fail(self, name: str, reason: str, running: tuple[str, ...]) -> Plan:
        failed = MappingProxyType({**self._in.failed, name: reason})
        return self._commit(replace(self._in, failed=failed), running)

    def _commit(self, inputs: _Inputs, running: tuple[str, ...] | None = None) -> Plan:
        order = inputs.graph.desired(inputs.enabled, inputs.facts, inputs.failed)
        plan = Plan.transition(self._order if running is None else running, order)
        self._in, self._order, self._last = inputs, order, plan
        return plan
