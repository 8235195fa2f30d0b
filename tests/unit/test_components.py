"""The lifecycle planner by example (the model is in the module docstring)."""

from __future__ import annotations

import pytest

from naga_core.errors import NagaError
from naga_core.kernel._components import (
    Action,
    ComponentError,
    ComponentSpec,
    DependencyCycle,
    LifecyclePlanner,
    Plan,
    State,
    Status,
    UnknownComponent,
    one_shot,
)


def spec(name: str, *requires: str, provides: tuple[str, ...] = ()) -> ComponentSpec:
    return ComponentSpec.of(name, requires=requires, provides=provides)


def planner(*specs: ComponentSpec, facts: tuple[str, ...] = ()) -> LifecyclePlanner:
    """Registered, nothing enabled yet; registering never starts anything."""
    p = LifecyclePlanner()
    for s in specs:
        assert p.register(s) == Plan.empty()
    for f in facts:
        p.add_fact(f)
    return p


def start(*names: str) -> Plan:
    return Plan(tuple(Action.start(n) for n in names))


def stop(*names: str) -> Plan:
    return Plan(tuple(Action.stop(n) for n in names))


def chain() -> LifecyclePlanner:
    """a <- b <- c: c requires b, which requires a; all enabled and running."""
    p = planner(spec("c", "b"), spec("b", "a"), spec("a"))
    p.enable("c")
    p.enable("b")
    assert p.enable("a") == start("a", "b", "c")
    return p


# -- activation order --------------------------------------------------------


def test_chain_starts_dependencies_first() -> None:
    p = chain()
    assert p.activation_order() == ("a", "b", "c")
    assert p.active == {"a", "b", "c"}


def test_enabling_a_dependent_waits_then_starts_in_order() -> None:
    p = planner(spec("c", "b"), spec("b", "a"), spec("a"))
    assert p.enable("c") == Plan.empty()
    assert p.enable("a") == start("a")
    assert p.enable("b") == start("b", "c")


def test_disable_in_the_middle_stops_dependents_first() -> None:
    p = chain()
    assert p.disable("b") == stop("c", "b")
    assert p.activation_order() == ("a",)
    assert str(p.status("c")) == "pending (missing: b)"
    assert p.enable("b") == start("b", "c")


def test_unregister_stops_dependents_first() -> None:
    p = chain()
    assert p.unregister("a") == stop("c", "b", "a")
    assert str(p.status("b")) == "pending (missing: a)"
    with pytest.raises(UnknownComponent):
        p.status("a")


def test_fact_removal_stops_dependents() -> None:
    p = planner(spec("model", "setting:model.default"), spec("agent", "model", "cap:net"))
    p.enable("model")
    p.enable("agent")
    assert p.add_fact("setting:model.default") == start("model")
    assert p.add_fact("cap:net") == start("agent")
    assert p.remove_fact("setting:model.default") == stop("agent", "model")
    assert str(p.status("model")) == "pending (missing: setting:model.default)"
    # The agent waits on the root cause, not on its pending dependency.
    assert p.status("agent") == Status.pending(["setting:model.default"])
    assert p.add_fact("setting:model.default") == start("model", "agent")


def test_pending_reason_names_everything_missing() -> None:
    p = planner(spec("a", "cap:net", "db", "setting:x"))
    p.enable("a")
    status = p.status("a")
    assert status.state is State.PENDING
    assert str(status) == "pending (missing: cap:net, db, setting:x)"


def test_disabled_provider_is_reported_as_the_missing_name() -> None:
    p = planner(spec("db"), spec("app", "db"))
    p.enable("app")
    assert str(p.status("app")) == "pending (missing: db)"
    assert str(p.status("db")) == "disabled"


# -- cycles and errors -------------------------------------------------------


def test_cycle_error_names_the_cycle_and_changes_nothing() -> None:
    p = planner(spec("a", "b"), spec("c"))
    p.enable("a")
    before = (p.specs, p.enabled, p.active, p.status("a"))
    with pytest.raises(DependencyCycle, match=r"^dependency cycle: b -> a -> b$") as caught:
        p.register(spec("b", "a"))
    assert caught.value.cycle == ("b", "a", "b")
    assert (p.specs, p.enabled, p.active, p.status("a")) == before


def test_cycle_through_an_alias_and_a_self_cycle() -> None:
    p = planner(spec("a", "store"), spec("b", "a"))
    with pytest.raises(DependencyCycle, match=r"c -> b -> a -> c$"):
        p.register(spec("c", "b", provides=("store",)))
    with pytest.raises(DependencyCycle, match=r"d -> d$"):
        p.register(spec("d", "x", provides=("x",)))
    with pytest.raises(DependencyCycle, match=r"e -> e$"):
        p.register(spec("e", "e"))
    assert set(p.specs) == {"a", "b"}


def test_errors_are_naga_errors() -> None:
    p = planner(spec("a"))
    for call in (p.enable, p.disable, p.retry, p.unregister, p.status):
        with pytest.raises(UnknownComponent, match="unknown component: 'nope'"):
            call("nope")
    with pytest.raises(ComponentError, match="already registered"):
        p.register(spec("a"))
    with pytest.raises(ComponentError, match="did not start"):
        p.start_failed("a", "boom")
    with pytest.raises(ComponentError, match="not running"):
        p.crashed("a", "boom")
    assert issubclass(ComponentError, NagaError)


@pytest.mark.parametrize(
    ("name", "requires", "provides"),
    [
        ("", (), ()),
        ("Upper", (), ()),
        ("a b", (), ()),
        ("a" * 129, (), ()),
        ("a", ("cap:",), ()),
        ("a", ("Cap:net",), ()),
        ("a", ("b c",), ()),
        ("a", (), ("cap:net",)),  # a component cannot pose as a fact
        ("a", (), ("a",)),
    ],
)
def test_invalid_specs_are_refused(
    name: str, requires: tuple[str, ...], provides: tuple[str, ...]
) -> None:
    with pytest.raises(ComponentError):
        ComponentSpec.of(name, requires=requires, provides=provides)


def test_a_bare_string_is_not_a_set_of_requirements() -> None:
    with pytest.raises(ComponentError, match="not the string"):
        ComponentSpec.of("a", requires="cap:net")
    with pytest.raises(ComponentError, match="invalid fact"):
        LifecyclePlanner().add_fact("net")


# -- failures ----------------------------------------------------------------


def test_failed_start_blocks_dependents_and_retry_recovers() -> None:
    p = planner(spec("a"), spec("b", "a"), spec("c", "b"), spec("z"))
    for name in ("b", "c", "z"):
        p.enable(name)
    plan = p.enable("a")
    assert plan == start("a", "b", "c")
    # The runtime starts a, then fails to start b and abandons the rest.
    assert p.start_failed("b", "port in use") == Plan.empty()
    assert p.activation_order() == ("a", "z")
    assert str(p.status("b")) == "failed (port in use)"
    assert str(p.status("c")) == "blocked (dependency failed: b)"
    assert p.failed == {"b": "port in use"}
    assert p.retry("b") == start("b", "c")
    assert p.failed == {}


def test_failed_start_resumes_the_independent_rest_of_the_plan() -> None:
    p = planner(spec("a"), spec("b", "a"), spec("m", "a"), spec("n", "m"))
    for name in ("b", "m", "n"):
        p.enable(name)
    assert p.enable("a") == start("a", "b", "m", "n")
    # b failed; m and n were never started but do not need b.
    assert p.start_failed("b", "boom") == start("m", "n")


def test_disable_forgets_a_failure() -> None:
    p = planner(spec("a"))
    p.enable("a")
    p.start_failed("a", "boom")
    assert p.disable("a") == Plan.empty()
    assert p.enable("a") == start("a")


def test_crash_stops_running_dependents() -> None:
    p = chain()
    assert p.crashed("a", "segfault") == stop("c", "b")
    assert str(p.status("c")) == "blocked (dependency failed: a)"
    assert p.retry("a") == start("a", "b", "c")


# -- provides ----------------------------------------------------------------


def test_provides_is_an_alias_any_provider_satisfies() -> None:
    p = planner(
        spec("openai", "cap:net", provides=("model",)),
        spec("local", provides=("model",)),
        spec("agent", "model"),
    )
    p.enable("agent")
    p.enable("openai")
    # Either fix would do: the net for openai, or enabling another provider.
    assert str(p.status("agent")) == "pending (missing: cap:net, model)"
    assert p.enable("local") == start("local", "agent")
    assert p.add_fact("cap:net") == start("openai")
    # One provider going away leaves the agent running on the other.
    assert p.disable("local") == stop("local")
    assert p.active == {"openai", "agent"}


def test_alias_with_every_provider_failed_is_blocked() -> None:
    p = planner(
        spec("p1", provides=("store",)), spec("p2", provides=("store",)), spec("app", "store")
    )
    p.enable("app")
    assert p.enable("p2") == start("p2", "app")
    assert p.start_failed("p2", "disk full") == Plan.empty()
    # p1 could still come: pending, not blocked.
    assert str(p.status("app")) == "pending (missing: store)"
    assert p.enable("p1") == start("p1", "app")
    assert p.start_failed("p1", "disk full") == Plan.empty()
    assert str(p.status("app")) == "blocked (dependency failed: p1, p2)"
    assert p.retry("p2") == start("p2", "app")


# -- determinism -------------------------------------------------------------


def test_ties_break_by_name_whatever_the_registration_order() -> None:
    specs = [spec("root"), spec("zeta", "root"), spec("alpha", "root"), spec("mid"), spec("b")]
    orders: set[tuple[str, ...]] = set()
    for shift in range(len(specs)):
        p = planner(*specs[shift:], *specs[:shift])
        for s in reversed(specs):
            p.enable(s.name)
        orders.add(p.activation_order())
    assert orders == {("b", "mid", "root", "alpha", "zeta")}


def test_stops_mirror_starts() -> None:
    p = planner(spec("a", "cap:go"), spec("b", "cap:go"), spec("c", "a", "b"), spec("d", "c"))
    for name in ("d", "c", "b", "a"):
        p.enable(name)
    assert p.add_fact("cap:go") == start("a", "b", "c", "d")
    assert p.remove_fact("cap:go") == stop("d", "c", "b", "a")


def test_one_shot_matches_the_planner_and_checks_its_input() -> None:
    p = chain()
    assert one_shot(p.specs.values(), p.enabled, p.facts, p.failed) == ("a", "b", "c")
    assert one_shot(p.specs.values(), {"a", "c"}, (), ()) == ("a",)
    with pytest.raises(UnknownComponent):
        one_shot([spec("a")], {"b"}, (), ())
    with pytest.raises(DependencyCycle, match="a -> b -> a"):
        one_shot([spec("b", "a"), spec("a", "b")], (), (), ())


def test_plan_rejects_a_start_before_a_stop() -> None:
    with pytest.raises(ValueError, match="stop before it starts"):
        Plan((Action.start("a"), Action.stop("b")))
    assert str(stop("b")) == "stop b"
    assert str(Plan.empty()) == "(nothing to do)"
