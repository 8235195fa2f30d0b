"""A world action that raises aborts its effect (docs/design/kernel.md, "Aborts"),
and a rollback into the middle of a bracket leaves that resource tracked."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from naga.v1 import kernel_pb2 as pb
from naga_core.kernel._effect import parse_effect
from naga_core.kernel._kernel import (
    EFFECT_KIND,
    ActionFailed,
    Kernel,
    KernelError,
    action,
    replay,
)
from naga_core.kernel._state import Scalar, set_op
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer
from tests.unit.test_kernel import world_actions


class Flaky:
    """A ``w.flaky`` action that raises while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0

    def __call__(self, args: Mapping[str, Scalar]) -> None:
        self.calls += 1
        if self.broken:
            raise OSError(f"disk says no to {args['k']}")


def effects(ledger: Ledger) -> list[pb.Effect]:
    return [parse_effect(r.payload, r.seq) for r in ledger.iter_records() if r.kind == EFFECT_KIND]


def test_a_failing_action_aborts_the_effect_and_runs_its_undo(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {"a": "old"}
    acts = world_actions(world)
    flaky = Flaky()
    acts.register("w.flaky", flaky)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        k.register("setting", "x", 1)
        with pytest.raises(ActionFailed) as failed:
            k.perform(
                [action("w.set", k="a", v="new"), action("w.flaky", k="b")],
                [action("w.set", k="a", v="old")],
                description="two writes",
                forward=[set_op("setting", "x", 2)],
            )
        assert failed.value.action == "w.flaky"
        assert "disk says no to b" in str(failed.value)
        assert (failed.value.effect_seq, failed.value.abort_seq) == (1, 2)
        assert world == {"a": "old"}, "the undo ran as compensation"
        assert k.state.snapshot() == {("setting", "x"): 1}
        assert replay(ledger).snapshot() == k.state.snapshot()
        abort = effects(ledger)[-1]
        assert abort.form == pb.EFFECT_FORM_ABORT
        assert abort.aborted == 1
        assert "OSError: disk says no to b" in abort.failure
        size = ledger.size
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        again = Kernel.open(ledger, acts)
        assert again.recovered == [], "an aborted effect is not run again on open"
        assert ledger.size == size
        assert flaky.calls == 1


def test_a_rollback_to_an_aborted_effect_does_not_run_it_again(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    flaky = Flaky()
    acts.register("w.flaky", flaky)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        with pytest.raises(ActionFailed):
            k.perform([action("w.flaky", k="a")], [], description="fails")
        k.perform([action("w.set", k="b", v=1)], [action("w.del", k="b")], description="b")
        k.rollback(0)
        assert world == {}
        assert flaky.calls == 1


def test_a_rollback_whose_world_action_fails_leaves_the_state_before_it(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    flaky = Flaky()
    flaky.broken = False
    acts.register("w.flaky", flaky)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        keep = k.register("setting", "x", 1)
        k.perform(
            [action("w.set", k="a", v=1)],
            [action("w.flaky", k="a"), action("w.del", k="a")],
            description="a write whose undo can fail",
            forward=[set_op("setting", "x", 2)],
        )
        flaky.broken = True
        with pytest.raises(ActionFailed):
            k.rollback(keep)
        assert k.state.snapshot() == {("setting", "x"): 2}, "before the rollback"
        assert world == {"a": 1}
        assert replay(ledger).snapshot() == k.state.snapshot()
        flaky.broken = False
        k.rollback(keep)  # once the world allows it, the same rollback works
        assert k.state.snapshot() == {("setting", "x"): 1}
        assert world == {}


def test_a_failed_compensation_is_retried_on_the_next_open(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    flaky = Flaky()
    acts.register("w.flaky", flaky)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        with pytest.raises(KernelError, match="compensation of effect 0 failed"):
            k.perform([action("w.flaky", k="a")], [action("w.flaky", k="undo")], description="x")
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)  # still broken: reported, not raised
        assert len(k.recovered) == 1
        assert "could not be finished" in k.recovered[0]
    flaky.broken = False
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        assert k.recovered == ["re-ran the world actions of effect 1"]
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        assert Kernel.open(ledger, acts).recovered == []


def test_an_effect_whose_action_fails_again_on_recovery_is_aborted(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    flaky = Flaky()
    acts.register("w.flaky", flaky)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        # What a crash between the effect and its first action leaves.
        effect = pb.Effect(
            form=pb.EFFECT_FORM_PERFORM,
            description="interrupted",
            forward=[set_op("setting", "x", 1)],
            inverse=[set_op("setting", "x", None)],
            do=[action("w.flaky", k="a")],
            undo=[action("w.del", k="a")],
        )
        ledger.append(EFFECT_KIND, effect.SerializeToString(deterministic=True))
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        assert len(k.recovered) == 1
        assert k.recovered[0].startswith("effect 0 failed again on recovery")
        assert k.state.snapshot() == {}
        assert effects(ledger)[-1].form == pb.EFFECT_FORM_ABORT


def test_a_failed_acquire_leaves_no_open_bracket(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    acts.register("w.flaky", Flaky())
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        with (
            pytest.raises(ActionFailed),
            k.bracket(action("w.flaky", k="lock"), action("w.del", k="lock"), description="l"),
        ):
            pytest.fail("the body must not run")
        assert k.open_brackets == ()


def test_a_rollback_into_a_bracket_holds_the_resource_until_released_on_open(
    tmp_path: Path,
) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        with k.bracket(
            action("w.set", k="lock", v="held"), action("w.del", k="lock"), description="lock"
        ) as acquired:
            inside = k.register("setting", "x", 1)
        assert world == {}
        k.rollback(inside)
        assert world == {"lock": "held"}, "the world at that point holds the lock"
        assert k.open_brackets == (acquired,)
        k.rollback(k.ledger.size - 3)  # before that rollback (and its marker): released
        assert world == {}
        assert k.open_brackets == ()
        k.rollback(inside)
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        assert k.recovered == [f"released the resource acquired by effect {acquired}"]
        assert world == {}
        assert k.open_brackets == ()


def test_staged_effects_are_durable_only_once_committed(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    d = str(tmp_path / "l")
    with Ledger.open(d, fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        with k.staged():
            a = k.register("setting", "x", 1)
            b = k.register("setting", "y", 2)
        assert (a, b) == (0, 1)
        assert (ledger.size, ledger.next_seq) == (0, 2), "staged, not synced"
        assert k.state.snapshot() == {("setting", "x"): 1, ("setting", "y"): 2}
        assert ledger.commit() == 2
        with k.staged():
            k.register("setting", "z", 3)
            # Write-ahead: an effect with world actions commits what is
            # staged (its own record included) before the world changes.
            k.perform([action("w.set", k="a", v=1)], [action("w.del", k="a")], description="a")
            assert ledger.size == 4
            assert world == {"a": 1}
            k.register("setting", "lost", 4)
        assert ledger.next_seq == 6  # the marker and "lost" are staged
    # Closing drops what was staged and never committed: never acknowledged.
    with Ledger.open(d, fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        assert ("setting", "lost") not in k.state
        assert k.state[("setting", "z")] == 3
        assert k.recovered == ["re-ran the world actions of effect 3"]  # its marker was staged


def test_a_rollback_commits_what_is_staged_first(tmp_path: Path) -> None:
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, world_actions({}))
        with k.staged():
            keep = k.register("setting", "x", 1)
            k.register("setting", "x", 2)
            assert k.preview_rollback(keep).effects == 1
            assert ledger.size == 2
            seq, _ = k.rollback(keep)
        assert ledger.commit() == seq + 1
        assert replay(ledger).snapshot() == {("setting", "x"): 1}
