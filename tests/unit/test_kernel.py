"""The kernel's effect forms and rollback, by example (properties live in
tests/property/test_reversibility.py)."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

import pytest

from naga_core.errors import NotFound
from naga_core.kernel._kernel import Actions, Kernel, action, replay
from naga_core.kernel._state import Scalar
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer


def world_actions(world: dict[str, Scalar]) -> Actions:
    acts = Actions()

    def put(args: Mapping[str, Scalar]) -> None:
        world[str(args["k"])] = args["v"]

    def remove(args: Mapping[str, Scalar]) -> None:
        world.pop(str(args["k"]), None)

    acts.register("w.set", put)
    acts.register("w.del", remove)
    return acts


def test_rollback_undoes_last_first_reports_irreversible_and_can_be_undone(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    d = str(tmp_path / "l")
    with Ledger.open(d, fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        keep = k.register("setting", "model", "small")
        k.register("trust", "alice", "owner")
        k.perform([action("w.set", k="f", v="1")], [action("w.del", k="f")], description="write f")
        k.register("setting", "model", "big")
        sent = k.perform([action("w.set", k="msg", v="hi")], None, description="send a message")

        preview = k.preview_rollback(keep)
        assert preview.irreversible == (sent,)
        assert {(c.family, c.key, c.before, c.after) for c in preview.changes} == {
            ("setting", "model", "big", "small"),
            ("trust", "alice", "owner", None),
        }
        assert k.state.snapshot() == {("setting", "model"): "big", ("trust", "alice"): "owner"}

        rb, _ = k.rollback(keep)
        assert k.state.snapshot() == {("setting", "model"): "small"}
        assert world == {"msg": "hi"}  # the sent message stays sent
        assert replay(ledger).snapshot() == replay(ledger, keep).snapshot()

        k.rollback(rb - 1)  # roll back the rollback
        assert k.state.snapshot() == {("setting", "model"): "big", ("trust", "alice"): "owner"}
        assert world == {"msg": "hi", "f": "1"}
        before_restart = k.state.snapshot()
    with Ledger.open(d, fixed_signer()) as ledger:
        again = Kernel.open(ledger, acts)
        assert again.state.snapshot() == before_restart
        assert again.recovered == []


def test_rollback_past_the_end_is_not_found(tmp_path: Path) -> None:
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, Actions())
        k.register("setting", "a", 1)
        with pytest.raises(NotFound):
            k.rollback(5)


def test_a_bracket_left_open_by_a_crash_is_released_on_open(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    acts = world_actions(world)
    d = str(tmp_path / "l")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child dies inside the bracket
        try:
            ledger = Ledger.open(d, fixed_signer())
            k = Kernel.open(ledger, acts)
            with k.bracket(
                action("w.set", k="lock", v="held"), action("w.del", k="lock"), description="lock"
            ):
                os._exit(0)
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    world["lock"] = "held"  # what the dead process left in the world
    with Ledger.open(d, fixed_signer()) as ledger:
        k = Kernel.open(ledger, acts)
        assert world == {}
        assert k.recovered == ["released the resource acquired by effect 0"]


def test_a_rollback_that_would_raise_trust_needs_the_owner(tmp_path: Path) -> None:
    from naga_core.kernel import OwnerRequired, TrustLevel, TrustTable, open_kernel

    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = open_kernel(ledger, Actions())
        trust = TrustTable(k)
        trust.set("wechat:bob", TrustLevel.KNOWN, by_owner=True)
        before_lowering = ledger.size - 1
        trust.lower("wechat:bob", TrustLevel.GUEST, "sent a prompt injection")
        with pytest.raises(OwnerRequired, match="wechat:bob"):
            k.rollback(before_lowering)
        assert trust.level("wechat:bob") is TrustLevel.GUEST  # nothing changed
        k.rollback(before_lowering, by_owner=True)
        assert trust.level("wechat:bob") is TrustLevel.KNOWN


def test_a_deep_in_force_stack_images_and_restores(tmp_path: Path) -> None:
    """3000 reversible effects in force: the image used to hash each stack
    node down to the bottom (a recursion per node: RecursionError past
    about 1000, so no start-up snapshot); and 3000 registrations after
    them cost one change point, not one entry each (ADR 0052)."""
    world: dict[str, Scalar] = {}
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, world_actions(world))
        with k.staged():
            for i in range(3000):
                k.perform(
                    [action("w.set", k=f"f{i}", v=i)], [action("w.del", k=f"f{i}")], description="w"
                )
            for i in range(3000):
                k.register("setting", "n", i)
        ledger.commit()
        img = k.image()
        assert len(img.in_force_tops) == len(img.node_seqs) + 3000 == 6000
        assert len(list(k._in_force.tops.runs())) == 3000  # pyright: ignore[reportPrivateUsage]
        again = Kernel.open(ledger, world_actions({}), image=img, image_seq=ledger.size - 1)
        assert again.image() == img
        assert again.recovered == []


def test_the_effect_seqs_cost_two_bytes_an_effect_not_eight(tmp_path: Path) -> None:
    """ADR 0057: the kernel's effect seqs were an ``array("q")``, 8 bytes an
    effect for the life of the home; delta-encoded they cost about 2. Traced
    by allocating file over a kernel's open (a full replay) and a restore
    from its image."""
    n = 6000
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, world_actions({}))
        with k.staged():
            for i in range(n):
                k.register("setting", "n", i)  # one record each, seqs 0 .. n-1
        ledger.commit()
        img = k.image()
        for build in (
            lambda: Kernel.open(ledger, world_actions({})),
            lambda: Kernel.open(ledger, world_actions({}), image=img, image_seq=ledger.size - 1),
        ):
            tracemalloc.start()
            try:
                kernel = build()
                snap = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            ours = snap.filter_traces(  # where the seqs are held (and nothing is in force)
                [
                    tracemalloc.Filter(True, "*naga_core/kernel/_ascending.py"),
                    tracemalloc.Filter(True, "*naga_core/kernel/_in_force.py"),
                ]
            )
            kept = sum(stat.size for stat in ours.statistics("filename"))
            assert len(kernel._in_force.effect_seqs) == n  # pyright: ignore[reportPrivateUsage]
            assert kept / n < 3, kept / n  # an array("q") of the seqs: 8
            assert kernel.image() == img
