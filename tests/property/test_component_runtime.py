"""INV-1 and INV-2 together: the component runtime over a real kernel and ledger.

A hypothesis state machine draws a random dependency graph (the universes of
tests/property/test_confluence.py: aliases, facts, names nobody provides,
components whose start fails) and drives a :class:`ComponentRuntime` bound to
a :class:`Kernel` over a real :class:`Ledger` in a temporary directory:
enable, disable, facts appearing and going, retries, repairs, crashes,
rollbacks to random earlier seqs, and restarts (the process dies: nothing is
stopped, the ledger is reopened and a new runtime binds to it).

The components are probes that check, while starting, that everything they
require is there (a fact, or a running provider) and refuse to start twice.
Checked after every step (quiescence):

(a) the components running are exactly ``one_shot`` of the enabled set the
    kernel state records, the facts the test reported and the failures the
    planner knows, and every failure is a broken or crashed component (INV-1);
(b) the kernel's ``component`` family records exactly what runs;
(c) the live state equals ``replay(ledger)``, and right after a rollback to
    P the enabled set is the one replayed at P (INV-2).

Seeds: hypothesis is derandomized with ``NAGA_TEST_SEED`` (default fixed);
``NAGA_RUNTIME_EXAMPLES`` sets the number of examples (default 150).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from naga_core.kernel import ComponentRuntime, Kernel, replay
from naga_core.kernel._components import ComponentSpec, is_fact, one_shot
from naga_core.kernel._kernel import Actions
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer
from tests.property.test_confluence import FACTS, Universe, universes
from tests.seeds import pick_seed

SEED = pick_seed(default=20261129)
EXAMPLES = int(os.environ.get("NAGA_RUNTIME_EXAMPLES") or 150)
WHO = f"NAGA_TEST_SEED={SEED}"


class World:
    """What runs in the process; probes check their requirements on start."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.facts: set[str] = set()
        self.broken: set[str] = set()
        self.specs: dict[str, ComponentSpec] = {}

    def satisfied(self, req: str) -> bool:
        if is_fact(req):
            return req in self.facts
        return any(req == n or req in self.specs[n].provides for n in self.running)


class Probe:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name

    def start(self) -> None:
        w = self.world
        assert self.name not in w.running, f"{WHO}: {self.name} started twice"
        missing = [r for r in sorted(w.specs[self.name].requires) if not w.satisfied(r)]
        assert not missing, f"{WHO}: {self.name} started without {missing}"
        if self.name in w.broken:
            raise RuntimeError(f"{self.name} is broken")
        w.running.append(self.name)

    def stop(self) -> None:
        assert self.name in self.world.running, f"{WHO}: {self.name} stopped while not running"
        self.world.running.remove(self.name)


class RuntimeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="naga-runtime-")
        self.world = World()
        self.ledger: Ledger | None = None
        self.runtime: ComponentRuntime | None = None
        self.crashed: set[str] = set()  # a crash counts as a failure until retried

    @initialize(universe=universes())
    def setup(self, universe: Universe) -> None:
        self.world.specs = {s.name: s for s in universe.specs}
        self.world.broken = set(universe.broken)
        self.names = sorted(self.world.specs)
        self.open()

    def open(self) -> None:
        runtime = ComponentRuntime.of(
            *((spec, Probe(self.world, spec.name)) for spec in self.world.specs.values())
        )
        actions = Actions()
        runtime.install(actions)
        self.ledger = Ledger.open(os.path.join(self.tmp, "ledger"), fixed_signer())
        runtime.bind(Kernel.open(self.ledger, actions), facts=sorted(self.world.facts))
        self.runtime = runtime

    def teardown(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def rt(self) -> ComponentRuntime:
        assert self.runtime is not None
        return self.runtime

    @property
    def led(self) -> Ledger:
        assert self.ledger is not None
        return self.ledger

    # --- steps -------------------------------------------------------------------

    @precondition(lambda self: self.runtime is not None)
    @rule(data=st.data())
    def enable(self, data: st.DataObject) -> None:
        self.rt.enable(data.draw(st.sampled_from(self.names)))

    @precondition(lambda self: self.runtime is not None)
    @rule(data=st.data())
    def disable(self, data: st.DataObject) -> None:
        self.rt.disable(data.draw(st.sampled_from(self.names)))

    @precondition(lambda self: self.runtime is not None)
    @rule(fact=st.sampled_from(FACTS))
    def toggle_fact(self, fact: str) -> None:
        if fact in self.world.facts:
            self.world.facts.discard(fact)  # gone from the world before anyone reacts
            self.rt.remove_fact(fact)
        else:
            self.world.facts.add(fact)
            self.rt.add_fact(fact)

    @precondition(lambda self: self.runtime is not None)
    @rule(data=st.data())
    def repair_and_retry(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.names))
        if data.draw(st.booleans(), label="repair"):
            self.world.broken.discard(name)
        self.rt.retry(name)

    @precondition(lambda self: self.runtime is not None and bool(self.rt.running))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.rt.running)))
        self.world.running.remove(name)  # it died: nobody stops it
        self.crashed.add(name)
        self.rt.crashed(name, "died")

    @precondition(lambda self: self.runtime is not None and self.led.size > 0)
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        to = data.draw(st.integers(-1, self.led.size - 1), label="to")
        enabled_then = replay(self.led, to).family("component.enabled")
        self.rt.rollback(to, by_owner=True)
        now = self.rt.planner.enabled
        assert now == frozenset(n for n, v in enabled_then.items() if v is True), (
            f"{WHO}: rollback({to}) left enabled {sorted(now)}"
        )

    @precondition(lambda self: self.runtime is not None)
    @rule()
    def restart(self) -> None:
        self.led.close()
        self.world.running.clear()  # the process died with everything in it
        self.open()

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def runs_the_one_shot_composition(self) -> None:
        if self.runtime is None:
            return
        rt = self.rt
        recorded = rt.kernel.state.family("component.enabled").items()
        kernel_enabled = {n for n, v in recorded if v is True}
        failed = set(rt.planner.failed)
        assert failed <= self.world.broken | self.crashed, f"{WHO}: failed {failed}, not broken"
        expected = one_shot(
            self.world.specs.values(), kernel_enabled, self.world.facts, rt.planner.failed
        )
        assert sorted(rt.running) == sorted(expected), (
            f"{WHO}: runs {rt.running}, one-shot {expected}"
        )
        assert sorted(self.world.running) == sorted(rt.running), f"{WHO}: world differs"

    @invariant()
    def the_ledger_records_what_runs(self) -> None:
        if self.runtime is None:
            return
        state = self.rt.kernel.state
        assert set(state.family("component")) == set(self.rt.running), (
            f"{WHO}: recorded {sorted(state.family('component'))}, running {self.rt.running}"
        )
        assert replay(self.led).snapshot() == state.snapshot(), f"{WHO}: replay differs"


RuntimeMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=30,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestComponentRuntime = seed(SEED)(RuntimeMachine.TestCase)
