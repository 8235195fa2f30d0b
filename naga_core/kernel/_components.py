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
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from naga_core.errors import NagaError

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

_MAX_NAME: Final = 128
_NAME: Final = re.compile(r"[a-z0-9_.-]+")
_FACT: Final = re.compile(r"[a-z][a-z0-9_]*:[a-z0-9_.:/-]+")
_SYNTAX: Final = {_NAME: "[a-z0-9_.-]+", _FACT: "kind:value, e.g. cap:net"}
_NONE: Final[frozenset[str]] = frozenset()


class ComponentError(NagaError):
    """A component spec or a lifecycle request was refused."""


class DependencyCycle(ComponentError):
    """The specs would form a dependency cycle; nothing was changed.

    ``cycle`` runs in requirement order and repeats its first name at the end:
    ``("a", "b", "a")`` means a requires b, which requires a.
    """

    def __init__(self, cycle: tuple[str, ...]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


class UnknownComponent(ComponentError):
    """No component of that name is registered."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown component: {name!r}")
        self.name = name


def is_fact(requirement: str) -> bool:
    """True for ``kind:value`` facts, false for component graph names."""
    return ":" in requirement


def _check(value: str, pattern: re.Pattern[str], what: str) -> None:
    if len(value) > _MAX_NAME or pattern.fullmatch(value) is None:
        raise ComponentError(f"invalid {what} {value!r}: want {_SYNTAX[pattern]}")


def _one_or_many(values: Iterable[str], what: str) -> frozenset[str]:
    # frozenset("cap:net") would silently become a set of characters.
    if isinstance(values, str):
        raise ComponentError(f"{what} must be a collection of names, not the string {values!r}")
    return frozenset(values)


@dataclass(frozen=True)
class ComponentSpec:
    """What a component is called, needs and offers. Build with :meth:`of`."""

    name: str
    requires: frozenset[str] = _NONE
    provides: frozenset[str] = _NONE

    def __post_init__(self) -> None:
        _check(self.name, _NAME, "component name")
        for req in sorted(self.requires):
            _check(req, _FACT if is_fact(req) else _NAME, "requirement")
        for alias in sorted(self.provides):
            _check(alias, _NAME, "provided name")
        if self.name in self.provides:
            raise ComponentError(f"{self.name!r} provides its own name implicitly")

    @classmethod
    def of(
        cls, name: str, *, requires: Iterable[str] = (), provides: Iterable[str] = ()
    ) -> ComponentSpec:
        return cls(name, _one_or_many(requires, "requires"), _one_or_many(provides, "provides"))


class ActionKind(StrEnum):
    START = "start"
    STOP = "stop"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    name: str

    @classmethod
    def start(cls, name: str) -> Action:
        return cls(ActionKind.START, name)

    @classmethod
    def stop(cls, name: str) -> Action:
        return cls(ActionKind.STOP, name)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Plan:
    """Actions for the runtime, in order: all stops, then all starts."""

    actions: tuple[Action, ...] = ()

    def __post_init__(self) -> None:
        kinds = [action.kind for action in self.actions]
        if kinds != sorted(kinds, key=lambda kind: kind is ActionKind.START):
            raise ValueError(f"a plan must stop before it starts: {self}")

    @classmethod
    def empty(cls) -> Plan:
        return cls()

    @classmethod
    def transition(cls, running: Sequence[str], target: Sequence[str]) -> Plan:
        """From ``running`` to ``target``, both given in dependency order."""
        keep, have = set(target), set(running)
        stops = [Action.stop(name) for name in reversed(running) if name not in keep]
        starts = [Action.start(name) for name in target if name not in have]
        return cls((*stops, *starts))

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if a.kind is ActionKind.STOP)

    @property
    def starts(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions if a.kind is ActionKind.START)

    def __iter__(self) -> Iterator[Action]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __str__(self) -> str:
        return ", ".join(map(str, self.actions)) or "(nothing to do)"


class State(StrEnum):
    ACTIVE = "active"
    PENDING = "pending"
    BLOCKED = "blocked"
    FAILED = "failed"
    DISABLED = "disabled"


@dataclass(frozen=True)
class Status:
    """Why a component is or is not running; ``str()`` is for people."""

    state: State
    missing: tuple[str, ...] = ()
    failed_deps: tuple[str, ...] = ()
    reason: str = ""

    @classmethod
    def failed(cls, reason: str) -> Status:
        return cls(State.FAILED, reason=reason)

    @classmethod
    def pending(cls, missing: Iterable[str]) -> Status:
        """Waiting for facts or names nothing enabled provides yet."""
        return cls(State.PENDING, missing=tuple(sorted(missing)))

    @classmethod
    def blocked(cls, failed_deps: Iterable[str]) -> Status:
        """Cannot run until a failed dependency is retried or replaced."""
        return cls(State.BLOCKED, failed_deps=tuple(sorted(failed_deps)))

    def __str__(self) -> str:
        if self.state is State.PENDING:
            return f"pending (missing: {', '.join(self.missing)})"
        if self.state is State.BLOCKED:
            return f"blocked (dependency failed: {', '.join(self.failed_deps)})"
        if self.state is State.FAILED:
            return f"failed ({self.reason})"
        return str(self.state)


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
    by_name: dict[str, ComponentSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ComponentError(f"component {spec.name!r} is given twice")
        by_name[spec.name] = spec
    wanted, present, broken = frozenset(enabled), frozenset(facts), frozenset(failed)
    for name in sorted(wanted | broken):
        if name not in by_name:
            raise UnknownComponent(name)
    for fact in sorted(present):
        _check(fact, _FACT, "fact")
    return _Graph.build(by_name).desired(wanted, present, broken)


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
        by_name: dict[str, ComponentSpec] = {}
        for spec in specs:
            if spec.name in by_name:
                raise ComponentError(f"component {spec.name!r} is given twice")
            by_name[spec.name] = spec
        graph = _Graph.build(by_name)
        failures = dict(failed or {})
        on, present, now = frozenset(enabled), frozenset(facts), frozenset(running)
        for name in sorted(on | failures.keys() | now):
            if name not in by_name:
                raise UnknownComponent(name)
        for fact in sorted(present):
            _check(fact, _FACT, "fact")
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
        _check(fact, _FACT, "fact")
        return self._commit(replace(self._in, facts=self._in.facts | {fact}))

    def remove_fact(self, fact: str) -> Plan:
        _check(fact, _FACT, "fact")
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
