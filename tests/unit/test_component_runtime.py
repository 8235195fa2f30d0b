"""The component runtime by example: plans run as kernel effects (INV-1 over
a real kernel and ledger is in tests/property/test_component_runtime.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from naga_core.kernel import ComponentRuntime, ComponentSpec, Kernel, replay
from naga_core.kernel._components import State as Lifecycle
from naga_core.kernel._kernel import Actions
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer


class Probe:
    """A component that logs its starts and stops and can be made to fail."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.broken = False

    def start(self) -> None:
        if self.broken:
            raise RuntimeError(f"{self.name} cannot bind its port")
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def build(log: list[str]) -> tuple[ComponentRuntime, dict[str, Probe]]:
    probes = {n: Probe(n, log) for n in ("db", "api", "web")}
    runtime = ComponentRuntime.of(
        (ComponentSpec.of("db", requires=["cap:disk"]), probes["db"]),
        (ComponentSpec.of("api", requires=["db", "setting:model"]), probes["api"]),
        (ComponentSpec.of("web", requires=["api"]), probes["web"]),
    )
    return runtime, probes


def open_runtime(d: str, log: list[str], facts: list[str]) -> tuple[Ledger, ComponentRuntime]:
    runtime, _ = build(log)
    actions = Actions()
    runtime.install(actions)
    ledger = Ledger.open(d, fixed_signer())
    runtime.bind(Kernel.open(ledger, actions), facts=facts)
    return ledger, runtime


def test_activation_follows_dependencies_and_each_step_is_an_effect(tmp_path: Path) -> None:
    log: list[str] = []
    ledger, rt = open_runtime(str(tmp_path / "l"), log, ["cap:disk"])
    with ledger:
        for name in ("web", "api", "db"):
            rt.enable(name)
        assert rt.running == ("db",)
        assert rt.status("api").missing == ("setting:model",)
        rt.add_fact("setting:model")
        assert rt.running == ("db", "api", "web")
        rt.remove_fact("cap:disk")
        assert rt.running == ()
        assert log == [
            "start db",
            "start api",
            "start web",
            "stop web",
            "stop api",
            "stop db",
        ]
        state = replay(ledger)
        assert state.family("component") == {}
        assert state.family("component.enabled") == {"db": True, "api": True, "web": True}


def test_a_failed_start_is_aborted_and_its_dependents_wait(tmp_path: Path) -> None:
    log: list[str] = []
    runtime, probes = build(log)
    actions = Actions()
    runtime.install(actions)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        kernel = Kernel.open(ledger, actions)
        runtime.bind(kernel, facts=["cap:disk", "setting:model"])
        probes["api"].broken = True
        for name in ("db", "api", "web"):
            runtime.enable(name)
        assert runtime.running == ("db",)
        status = runtime.status("api")
        assert status.state is Lifecycle.FAILED
        assert "cannot bind its port" in str(status)
        assert runtime.status("web").state is Lifecycle.BLOCKED
        assert kernel.state.family("component") == {"db": True}
        probes["api"].broken = False
        runtime.retry("api")
        assert runtime.running == ("db", "api", "web")


def test_rollback_brings_back_the_components_of_that_point(tmp_path: Path) -> None:
    log: list[str] = []
    ledger, rt = open_runtime(str(tmp_path / "l"), log, ["cap:disk", "setting:model"])
    with ledger:
        rt.enable("db")
        rt.enable("api")
        point = ledger.size - 1
        rt.enable("web")
        rt.disable("db")
        assert rt.running == ()
        before = ledger.size - 1
        rt.rollback(point)
        assert rt.running == ("db", "api")
        assert replay(ledger).family("component") == {"db": True, "api": True}
        assert replay(ledger).family("component.enabled") == {"db": True, "api": True}
        rt.rollback(before)  # undo that rollback and the activations it led to
        assert rt.running == ()
        assert replay(ledger).family("component.enabled") == {"api": True, "web": True}


def test_a_restart_starts_again_what_the_ledger_says_runs(tmp_path: Path) -> None:
    d = str(tmp_path / "l")
    log: list[str] = []
    ledger, rt = open_runtime(d, log, ["cap:disk", "setting:model"])
    with ledger:
        for name in ("db", "api", "web"):
            rt.enable(name)
        size = ledger.size
    log.clear()
    ledger, rt = open_runtime(d, log, ["cap:disk", "setting:model"])
    with ledger:
        assert rt.running == ("db", "api", "web")
        assert log == ["start db", "start api", "start web"]
        assert ledger.size == size, "restarting what runs journals nothing"
    # Without the disk, db cannot be wanted: the restart stops everything again.
    ledger, rt = open_runtime(d, log, [])
    with ledger:
        assert rt.running == ()
        assert replay(ledger).family("component") == {}


def test_a_crash_stops_the_dependents_and_is_journaled(tmp_path: Path) -> None:
    log: list[str] = []
    ledger, rt = open_runtime(str(tmp_path / "l"), log, ["cap:disk", "setting:model"])
    with ledger:
        for name in ("db", "api", "web"):
            rt.enable(name)
        rt.crashed("db", "segfault")
        assert rt.running == ()
        assert rt.status("db").state is Lifecycle.FAILED
        assert replay(ledger).family("component") == {}
        with pytest.raises(Exception, match="not running"):
            rt.crashed("db", "again")
