"""``Kernel.revert``: one perform effect undone by its author's inverse, as a
new effect, leaving later effects in force; refused for what it cannot
undo (docs/adr/0033-recover13-tool-undo.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from naga.v1 import kernel_pb2 as pb
from naga_core.kernel import Kernel, KernelError, action
from naga_core.kernel._state import Scalar, set_op
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer
from tests.unit.test_kernel import world_actions


def test_revert_undoes_one_effect_and_is_itself_undone_by_a_rollback(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {"a": "old"}
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, world_actions(world))
        first = k.perform(
            [action("w.set", k="a", v="new")], [action("w.set", k="a", v="old")], description="a"
        )
        later = k.perform(
            [action("w.set", k="b", v="1")], [action("w.del", k="b")], description="b"
        )
        undo = k.revert(first, description="undo of a")
        assert world == {"a": "old", "b": "1"}  # the later effect stays in force
        effect = k.effect_at(undo)
        assert effect is not None
        assert effect.form == pb.EFFECT_FORM_PERFORM
        assert not effect.irreversible
        assert effect.description == "undo of a"
        # A rollback to just before the revert brings the write back.
        k.rollback(undo - 1)
        assert world == {"a": "new", "b": "1"}
        assert k.effect_at(later) is not None
        assert k.effect_at(ledger.size + 5) is None


def test_revert_refuses_what_it_cannot_undo(tmp_path: Path) -> None:
    world: dict[str, Scalar] = {}
    with Ledger.open(str(tmp_path / "l"), fixed_signer()) as ledger:
        k = Kernel.open(ledger, world_actions(world))
        sent = k.perform([action("w.set", k="m", v="sent")], None, description="a message")
        stateful = k.perform(
            [action("w.set", k="s", v="1")],
            [action("w.del", k="s")],
            description="with state",
            forward=[set_op("setting", "x", 1)],
        )
        registered = k.register("setting", "y", 2)
        size = ledger.size
        with pytest.raises(KernelError, match="no inverse"):
            k.revert(sent, description="no")
        with pytest.raises(KernelError, match="changed kernel state"):
            k.revert(stateful, description="no")
        with pytest.raises(KernelError, match="not a perform effect"):
            k.revert(registered, description="no")
        with pytest.raises(KernelError, match="not a perform effect"):
            k.revert(size + 3, description="no")
        assert ledger.size == size  # nothing journaled by a refusal
