"""Shadow branches: a copy-on-write snapshot of kernel state that live state
never sees until a gated merge, which is one revertible effect."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from naga.v1 import kernel_pb2 as pb
from naga_core.errors import NotFound
from naga_core.kernel._branch import (
    BranchClosed,
    BranchError,
    BranchStatus,
    MergeConflict,
    MergeRefused,
    open_branch,
    same,
)
from naga_core.kernel._kernel import EFFECT_KIND, Actions, Change, Kernel, action, replay
from naga_core.kernel._settings import Settings
from naga_core.kernel._state import Key, Scalar, set_op
from naga_core.kernel._trust import TrustLevel, TrustRaiseRefused, TrustTable
from naga_core.ledger import Ledger, SimulatedFileSystem
from tests.ledger_helpers import fixed_signer

_fast = hsettings(max_examples=200, derandomize=True, database=None, deadline=None)


@contextlib.contextmanager
def sim_kernel() -> Generator[tuple[Kernel, Ledger]]:
    with Ledger.open("/ledger", fixed_signer(), fs=SimulatedFileSystem()) as ledger:
        yield Kernel.open(ledger, Actions()), ledger


def yes(_changes: list[Change]) -> bool:
    return True


def no(_changes: list[Change]) -> bool:
    return False


# --- by example ---------------------------------------------------------------------------


def test_writes_in_a_branch_stay_in_the_branch_until_a_merge() -> None:
    with sim_kernel() as (k, ledger):
        k.register("setting", "model", "small")
        k.register("setting", "old", 1)
        live = k.state.snapshot()
        b = open_branch(k)
        assert b.base_seq == 1
        b.register("setting", "model", "big")
        b.register("setting", "old", None)
        b.register("tool", "grep", True)
        assert dict(b.state) == {("setting", "model"): "big", ("tool", "grep"): True}
        assert k.state.snapshot() == live
        assert ledger.size == 2  # nothing journaled
        assert b.diff() == [
            Change("setting", "model", "small", "big"),
            Change("setting", "old", 1, None),
            Change("tool", "grep", None, True),
        ]
        seq = b.merge(yes, description="try the big model")
        assert seq == 2
        assert b.status is BranchStatus.MERGED
        assert dict(k.state) == dict(b.state)
        effect = pb.Effect.FromString(ledger.read(2).payload)
        assert ledger.read(2).kind == EFFECT_KIND
        assert (effect.form, effect.description) == (pb.EFFECT_FORM_PERFORM, "try the big model")
        assert not effect.do
        assert not effect.irreversible

        k.rollback(seq - 1)  # the merge is an effect like any other
        assert k.state.snapshot() == live


def test_a_refused_merge_changes_nothing_and_leaves_the_branch_open() -> None:
    with sim_kernel() as (k, ledger):
        k.register("setting", "a", 1)
        b = open_branch(k)
        b.register("setting", "a", 2)
        seen: list[list[Change]] = []

        def gate(changes: list[Change]) -> bool:
            seen.append(changes)
            return False

        with pytest.raises(MergeRefused, match="refused the branch's 1 change"):
            b.merge(gate, description="no")
        assert seen == [[Change("setting", "a", 1, 2)]]
        assert k.state.snapshot() == {("setting", "a"): 1}
        assert ledger.size == 1
        assert b.status is BranchStatus.OPEN
        b.discard()
        with pytest.raises(BranchClosed, match="discarded"):
            b.register("setting", "a", 3)
        with pytest.raises(BranchClosed):
            b.merge(yes, description="too late")


def test_a_live_change_to_a_key_the_branch_wrote_is_a_conflict() -> None:
    with sim_kernel() as (k, _):
        k.register("setting", "a", 1)
        b = open_branch(k)
        b.register("setting", "a", 2)
        b.register("setting", "b", 2)
        k.register("setting", "a", 5)
        with pytest.raises(MergeConflict, match="setting/a: was 1 at the branch's seq, is 5 live"):
            b.merge(yes, description="m")
        k.register("setting", "a", 1)  # back to the base value: no conflict any more
        b.merge(yes, description="m")
        assert k.state.snapshot() == {("setting", "a"): 2, ("setting", "b"): 2}


def test_live_changes_to_other_keys_survive_the_merge() -> None:
    with sim_kernel() as (k, _):
        k.register("setting", "a", 1)
        b = open_branch(k)
        b.register("setting", "b", 2)
        k.register("setting", "c", 3)
        merged = b.merge(yes, description="m")
        assert merged is not None
        assert k.state.snapshot() == {
            ("setting", "a"): 1,
            ("setting", "b"): 2,
            ("setting", "c"): 3,
        }
        k.rollback(merged - 1)
        assert k.state.snapshot() == {("setting", "a"): 1, ("setting", "c"): 3}


def test_the_branch_is_a_snapshot_however_live_state_moves() -> None:
    with sim_kernel() as (k, _):
        k.register("setting", "a", 1)
        k.register("setting", "gone", 1)
        b = open_branch(k)
        view = b.state
        k.register("setting", "a", 2)
        k.register("setting", "gone", None)
        k.register("setting", "new", 1)
        assert dict(view) == {("setting", "a"): 1, ("setting", "gone"): 1}
        assert Settings(b).get("agent.max_steps") == 25
        b.register("setting", "z", 0)
        assert dict(view) == {("setting", "a"): 1, ("setting", "gone"): 1, ("setting", "z"): 0}


def test_a_branch_at_a_past_seq_sees_the_state_replayed_to_it() -> None:
    with sim_kernel() as (k, ledger):
        for i in range(5):
            k.register("setting", "a", i)
            k.register("setting", f"k{i}", i)
        for seq in (-1, 0, 3, 9):
            with open_branch(k, seq) as b:
                assert dict(b.state) == replay(ledger, seq).snapshot()
        with pytest.raises(NotFound):
            open_branch(k, 10)


def test_world_actions_are_refused_in_a_branch_but_state_ops_apply() -> None:
    with sim_kernel() as (k, _):
        b = open_branch(k)
        with pytest.raises(BranchError, match=r"world actions \(w\.send\) cannot run"):
            b.perform([action("w.send", to="bob")], None, description="send")
        b.perform([], [], description="state only", forward=[set_op("tool", "grep", True)])
        assert dict(b.state) == {("tool", "grep"): True}


def test_settings_and_trust_run_against_a_branch() -> None:
    with sim_kernel() as (k, ledger):
        b = open_branch(k)
        settings = Settings(b)
        assert settings.set("agent.max_steps", 50) is None  # no seq in a branch
        assert settings.get("agent.max_steps") == 50
        assert Settings(k).get("agent.max_steps") == 25
        TrustTable(b).set("wechat:bob", TrustLevel.KNOWN, by_owner=True)
        with pytest.raises(TrustRaiseRefused, match=r"wechat:bob: None -> 'known'"):
            b.merge(yes, description="m")  # raising trust through a merge needs the owner too
        assert ledger.size == 0
        b.merge(yes, description="m", by_owner=True)
        assert TrustTable(k).level("wechat:bob") is TrustLevel.KNOWN


def test_an_empty_merge_journals_nothing_and_a_context_discards() -> None:
    with sim_kernel() as (k, ledger):
        k.register("setting", "a", 1)
        b = open_branch(k)
        b.register("setting", "a", 2)
        b.register("setting", "a", 1)  # written back: no net change
        assert b.touched() == {("setting", "a")}
        assert b.diff() == []
        assert b.merge(no, description="m") is None  # the gate is not asked
        assert ledger.size == 1
        with open_branch(k) as c:
            c.register("setting", "a", 3)
        assert c.status is BranchStatus.DISCARDED
        assert k.state.snapshot() == {("setting", "a"): 1}


def test_values_of_different_types_differ() -> None:
    with sim_kernel() as (k, _):
        k.register("setting", "a", 1)
        b = open_branch(k)
        b.register("setting", "a", True)
        b.register("setting", "b", 1.0)
        assert b.diff() == [
            Change("setting", "a", 1, True),
            Change("setting", "b", None, 1.0),
        ]


# --- by property ----------------------------------------------------------------------------

_KEYS: tuple[Key, ...] = tuple((f, k) for f in ("setting", "trust") for k in "abc")
_VALUES = st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["x", "y"]), st.booleans())
_STEP = st.tuples(st.sampled_from(("branch", "branch", "live")), st.sampled_from(_KEYS), _VALUES)


def _fill(k: Kernel, writes: list[tuple[Key, Scalar | None]]) -> None:
    for (family, key), value in writes:
        k.register(family, key, value)


@_fast
@given(
    st.lists(st.tuples(st.sampled_from(_KEYS), _VALUES), max_size=12),
    st.integers(min_value=-1, max_value=12),
    st.lists(_STEP, max_size=30),
)
def test_random_work_in_a_branch_never_changes_live_state(
    history: list[tuple[Key, Scalar | None]],
    at: int,
    steps: list[tuple[str, Key, Scalar | None]],
) -> None:
    with sim_kernel() as (k, ledger):
        _fill(k, history)
        at_seq = min(at, ledger.size - 1)
        b = open_branch(k, at_seq)
        base = replay(ledger, at_seq).snapshot()
        expected_branch = dict(base)
        for where, (family, key), value in steps:
            live_before = k.state.snapshot()
            if where == "live":
                k.register(family, key, value)
                continue
            b.register(family, key, value)
            assert k.state.snapshot() == live_before
            if value is None:
                expected_branch.pop((family, key), None)
            else:
                expected_branch[(family, key)] = value
            assert dict(b.state) == expected_branch
        assert k.state.snapshot() == replay(ledger).snapshot()
        assert dict(b.state) == expected_branch  # the base stayed at at_seq
        assert b.base() == base


@_fast
@given(
    st.lists(st.tuples(st.sampled_from(_KEYS), _VALUES), max_size=10),
    st.lists(_STEP, max_size=30),
)
def test_merge_then_rollback_of_the_merge_restores_the_pre_merge_state(
    history: list[tuple[Key, Scalar | None]],
    steps: list[tuple[str, Key, Scalar | None]],
) -> None:
    with sim_kernel() as (k, ledger):
        _fill(k, history)
        b = open_branch(k)
        for where, (family, key), value in steps:
            (k if where == "live" else b).register(family, key, value)
        pre_merge = k.state.snapshot()
        diff = b.diff()
        base = b.base()
        conflicts = [
            key for key in sorted(b.touched()) if not same(base.get(key), pre_merge.get(key))
        ]
        if conflicts:
            with pytest.raises(MergeConflict) as info:
                b.merge(yes, description="m", by_owner=True)
            assert list(info.value.keys) == conflicts
            assert k.state.snapshot() == pre_merge
            return
        seq = b.merge(yes, description="m", by_owner=True)
        merged = dict(pre_merge)
        for change in diff:
            if change.after is None:
                merged.pop((change.family, change.key), None)
            else:
                merged[(change.family, change.key)] = change.after
        assert k.state.snapshot() == merged
        if seq is None:
            assert diff == []
            return
        assert replay(ledger).snapshot() == merged
        k.rollback(seq - 1)
        assert k.state.snapshot() == pre_merge
        assert replay(ledger).snapshot() == pre_merge
