"""The component runtime: the lifecycle planner's plans, executed as kernel effects.

The planner (``_components``) is pure; this module gives it a world. Each
start and stop in a plan is a ``perform`` effect whose world action starts or
stops the component and whose state op records it in the ``component``
family, so activations and deactivations are journaled, replayed and rolled
back like any other effect. Enabling and disabling are registrations in the
``component.enabled`` family, so a rollback brings the enabled set back too.

A start that raises aborts its effect (the kernel journals the ABORT and runs
the stop as compensation) and the planner's corrective plan runs instead of
the rest, per the planner's runtime contract.

The start/stop world actions act only while the runtime itself performs
them. A rollback restores the *intent* of its target (the enabled set, in
the state) and records; it does not start components blindly, since facts
may have gone since (a component of that time may not be able to run now).
After every rollback (:meth:`ComponentRuntime.rollback`, or
:meth:`~ComponentRuntime.resync` after a rollback done elsewhere) and on
:meth:`~ComponentRuntime.bind` after a restart, the runtime reconciles: it
journals the truth where the records and the running components differ and
executes the plan from what runs to the desired set. So the components
running are always the one-shot composition of the enabled set, the facts
and the failures (INV-1), and the ``component`` family always records them.
Interrupted activations that ``Kernel.open`` re-runs are no-ops for the same
reason: ``bind`` decides what runs.

Facts (``cap:net``, ``setting:x``) describe the world outside the graph and
are not journaled: their sources report them again after a restart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Mapping
from typing import Protocol

from naga_core.kernel._components import (
    ActionKind,
    ComponentError,
    ComponentSpec,
    LifecyclePlanner,
    Plan,
    Status,
    UnknownComponent,
    is_fact,
)
from naga_core.kernel._kernel import ActionFailed, Actions, Kernel, RollbackPreview, action
from naga_core.kernel._state import Scalar, set_op

ACTIVE_FAMILY = "component"
ENABLED_FAMILY = "component.enabled"
START_ACTION = "component.start"
STOP_ACTION = "component.stop"


class Component(Protocol):
    """What the runtime drives. ``start`` raises if the component cannot run;
    ``stop`` releases what it holds. The runtime never calls ``start`` on a
    running component nor ``stop`` on a stopped one."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ComponentRuntime:
    """Components over one kernel. Build with :meth:`of`, :meth:`install` the
    world actions before the kernel is opened, then :meth:`bind` to it."""

    def __init__(self, specs: Mapping[str, ComponentSpec], impls: Mapping[str, Component]) -> None:
        self._specs = dict(specs)
        self._impls = dict(impls)
        self._running: list[str] = []  # in start order: the world's truth
        self._planner = LifecyclePlanner.resume(self._specs.values())[0]
        self._kernel: Kernel | None = None
        self._active_depth = 0  # > 0 while the runtime performs (see module doc)
        self.stop_errors: list[str] = []

    @classmethod
    def of(cls, *entries: tuple[ComponentSpec, Component]) -> ComponentRuntime:
        specs: dict[str, ComponentSpec] = {}
        for spec, _ in entries:
            if spec.name in specs:
                raise ComponentError(f"component {spec.name!r} is given twice")
            specs[spec.name] = spec
        return cls(specs, {spec.name: impl for spec, impl in entries})

    # --- wiring ----------------------------------------------------------------

    def install(self, actions: Actions) -> None:
        """Register the start/stop world actions (before ``Kernel.open``,
        which may run interrupted ones again)."""
        actions.register(START_ACTION, self._start_action)
        actions.register(STOP_ACTION, self._stop_action)

    def bind(self, kernel: Kernel, *, facts: Iterable[str] = ()) -> None:
        """Drive ``kernel``'s components: start what its state says runs,
        then converge on the desired set."""
        if self._kernel is not None:
            raise ComponentError("the runtime is already bound to a kernel")
        self._kernel = kernel
        # Start again, unjournaled, what the ledger says ran, as far as it can
        # run now; the rest is journaled by the reconciliation.
        present = frozenset(facts)
        _, plan = LifecyclePlanner.resume(
            self._specs.values(), enabled=self._recorded(ENABLED_FAMILY), facts=present
        )
        recorded = set(self._recorded(ACTIVE_FAMILY))
        failed: dict[str, str] = {}
        for name in plan.starts:
            spec = self._specs[name]
            if name not in recorded or not all(self._met(r, present) for r in spec.requires):
                continue
            try:
                with self._acting():
                    self._start_action({"component": name})
            except Exception as exc:  # noqa: BLE001 - any start error; cancellation passes
                failed[name] = f"{type(exc).__name__}: {exc}"
        self._reconcile(facts=present, failed=failed)

    # --- operations ------------------------------------------------------------

    def enable(self, name: str) -> None:
        self._known(name)
        self._bound().register(ENABLED_FAMILY, name, True, description=f"enable component {name}")
        self._execute(self._planner.enable(name))

    def disable(self, name: str) -> None:
        self._known(name)
        self._bound().register(ENABLED_FAMILY, name, None, description=f"disable component {name}")
        self._execute(self._planner.disable(name))

    def add_fact(self, fact: str) -> None:
        self._execute(self._planner.add_fact(fact))

    def remove_fact(self, fact: str) -> None:
        self._execute(self._planner.remove_fact(fact))

    def retry(self, name: str) -> None:
        self._execute(self._planner.retry(name))

    def crashed(self, name: str, reason: str) -> None:
        """``name`` died by itself: it and its dependents stop, journaled."""
        self._known(name)
        if name not in self._running:
            raise ComponentError(f"{name!r} is not running")
        plan = self._planner.crashed(name, reason)
        self._running.remove(name)  # the world no longer runs it
        self._deactivate(name, f"component {name} crashed: {reason}")
        self._execute(plan)

    def rollback(self, to_seq: int, *, by_owner: bool = False) -> tuple[int, RollbackPreview]:
        """``Kernel.rollback``, then converge the components on the desired set."""
        seq, preview = self._bound().rollback(to_seq, by_owner=by_owner)
        self.resync()
        return seq, preview

    def resync(self) -> None:
        """Converge after a change to the kernel state made elsewhere (a
        rollback through the kernel itself)."""
        self._reconcile(facts=self._planner.facts, failed=self._planner.failed)

    # --- reading ---------------------------------------------------------------

    @property
    def running(self) -> tuple[str, ...]:
        """The components that run now, in the order they started."""
        return tuple(self._running)

    @property
    def kernel(self) -> Kernel:
        """The kernel it is bound to."""
        return self._bound()

    @property
    def planner(self) -> LifecyclePlanner:
        return self._planner

    def status(self, name: str) -> Status:
        return self._planner.status(name)

    # --- the world actions -----------------------------------------------------

    @contextlib.contextmanager
    def _acting(self) -> Generator[None]:
        self._active_depth += 1
        try:
            yield
        finally:
            self._active_depth -= 1

    def _start_action(self, args: Mapping[str, Scalar]) -> None:
        name = self._named(args)
        if self._active_depth and name not in self._running:  # idempotent
            self._impls[name].start()
            self._running.append(name)

    def _stop_action(self, args: Mapping[str, Scalar]) -> None:
        name = self._named(args)
        if self._active_depth and name in self._running:
            self._running.remove(name)
            try:
                self._impls[name].stop()
            except Exception as exc:  # noqa: BLE001 - reported in stop_errors; not undone
                self.stop_errors.append(f"{name}: {type(exc).__name__}: {exc}")

    def _named(self, args: Mapping[str, Scalar]) -> str:
        name = args.get("component")
        if not isinstance(name, str) or name not in self._impls:
            raise UnknownComponent(str(name))
        return name

    # --- internals -------------------------------------------------------------

    def _bound(self) -> Kernel:
        if self._kernel is None:
            raise ComponentError("the runtime is not bound to a kernel yet")
        return self._kernel

    def _known(self, name: str) -> None:
        if name not in self._specs:
            raise UnknownComponent(name)

    def _recorded(self, family: str) -> list[str]:
        values = self._bound().state.family(family)
        return sorted(n for n, v in values.items() if v is True and n in self._specs)

    def _met(self, req: str, facts: frozenset[str]) -> bool:
        if is_fact(req):
            return req in facts
        return any(req == n or req in self._specs[n].provides for n in self._running)

    def _perform(self, name: str, *, start: bool, why: str) -> None:
        go, back = action(START_ACTION, component=name), action(STOP_ACTION, component=name)
        with self._acting():
            self._bound().perform(
                [go] if start else [back],
                [back] if start else [go],
                description=why,
                forward=[set_op(ACTIVE_FAMILY, name, True if start else None)],
            )

    def _deactivate(self, name: str, why: str) -> None:
        self._perform(name, start=False, why=why)

    def _reconcile(self, *, facts: Iterable[str], failed: Mapping[str, str]) -> None:
        for name in self._recorded(ACTIVE_FAMILY):
            if name not in self._running:
                why = failed.get(name, "it is not running")
                self._deactivate(name, f"component {name} is recorded active, but {why}")
        self._planner, plan = LifecyclePlanner.resume(
            self._specs.values(),
            enabled=self._recorded(ENABLED_FAMILY),
            facts=facts,
            failed=failed,
            running=self._running,
        )
        self._execute(plan)
        recorded = set(self._recorded(ACTIVE_FAMILY))
        for name in self._planner.activation_order():
            if name not in recorded:  # ran all along; the records said otherwise
                self._perform(name, start=True, why=f"component {name} runs")

    def _execute(self, plan: Plan) -> None:
        while plan:
            for act in plan:
                name = act.name
                if act.kind is ActionKind.STOP:
                    self._deactivate(name, f"deactivate component {name}")
                    continue
                try:
                    self._perform(name, start=True, why=f"activate component {name}")
                except ActionFailed as exc:
                    plan = self._planner.start_failed(name, exc.reason)
                    break
            else:
                return


__all__ = [
    "ACTIVE_FAMILY",
    "ENABLED_FAMILY",
    "START_ACTION",
    "STOP_ACTION",
    "Component",
    "ComponentRuntime",
]
