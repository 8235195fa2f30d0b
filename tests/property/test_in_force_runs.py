"""The kernel's in-force values as change points (ADR 0052) read as the plain
list they replace.

(a) :class:`Runs` against a plain list: random appends, overwrites (the
    abort path's in-place set) and reads; every read equal, the whole
    sequence equal, the runs canonical (as few as the list has changes),
    and the round trip through the snapshot's per-index form equal.
(b) A real kernel over a real ledger (registrations, reversible and
    irreversible performs, failing ones that abort, brackets, rollbacks,
    restarts from an image): its image equals the one the old per-effect
    list gave (rebuilt here from the ledger by the old rule), so snapshots
    written before load, and a kernel restored from its image images the
    same and reads the same in-force stack after every effect.
"""

from __future__ import annotations

import bisect
import contextlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.kernel._effect import parse_effect
from naga_core.kernel._kernel import (
    EFFECT_KIND,
    ActionFailed,
    Actions,
    Kernel,
    action,
)
from naga_core.kernel._runs import Runs
from naga_core.kernel._state import Scalar
from naga_core.ledger import Ledger
from tests.ledger_helpers import fixed_signer

# Few values, so that they repeat; big ones too (not the interned small
# ints: equal values, distinct objects, are one run).
POOL = (-1, 0, 1, 10**12)

# ("append", value) | ("set", index, value) | ("read", index); an index is
# taken modulo the length at that point.
runs_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(POOL)),
        st.tuples(st.just("set"), st.integers(0, 10**6), st.sampled_from(POOL)),
        st.tuples(st.just("read"), st.integers(-(10**6), 10**6)),
    ),
    max_size=200,
)


def changes(items: Sequence[int]) -> int:
    return sum(1 for i, v in enumerate(items) if i == 0 or v != items[i - 1])


@settings(max_examples=300, deadline=None)
@given(runs_ops)
def test_runs_read_as_the_plain_list(ops: list[tuple[object, ...]]) -> None:
    runs = Runs()
    ref: list[int] = []
    for op in ops:
        if op[0] == "append":
            value = op[1]
            assert isinstance(value, int)
            runs.append(int(str(value)))  # a distinct object for a big int
            ref.append(value)
        elif op[0] == "set" and ref:
            i, value = op[1], op[2]
            assert isinstance(i, int)
            assert isinstance(value, int)
            runs.set(i % len(ref), int(str(value)))
            ref[i % len(ref)] = value
        elif op[0] == "read" and ref:
            i = op[1]
            assert isinstance(i, int)
            i = i % len(ref) - (len(ref) if i < 0 else 0)  # negative indexes too
            assert runs[i] == ref[i], (i, ops)
        assert len(runs) == len(ref)
        assert list(runs) == ref
        assert all(runs[i] == v for i, v in enumerate(ref))
        starts = [s for s, _ in runs.runs()]
        assert len(starts) == changes(ref), "neighbouring runs hold the same value"
        assert starts == sorted(set(starts))
        assert starts[:1] == ([0] if ref else [])
    back = Runs(list(runs))  # the snapshot's per-index form and back
    assert list(back) == ref
    assert [s for s, _ in back.runs()] == [s for s, _ in runs.runs()]


# --- the kernel -------------------------------------------------------------------

KEYS = ("k0", "k1", "k2")
kernel_ops = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from(KEYS), st.integers(0, 3)),
        st.tuples(st.just("tool"), st.sampled_from(KEYS), st.booleans()),
        st.tuples(st.just("note"), st.sampled_from(KEYS), st.booleans()),
        st.tuples(st.just("bracket"), st.sampled_from(KEYS), st.booleans()),
        st.tuples(st.just("rollback"), st.integers(0, 10**6), st.booleans()),
        st.tuples(st.just("restart"), st.just(""), st.booleans()),
    ),
    max_size=40,
)


def _actions() -> Actions:
    actions = Actions()

    def fail(_args: Mapping[str, Scalar]) -> None:
        raise RuntimeError("the world said no")

    actions.register("w.set", lambda _args: None)
    actions.register("w.del", lambda _args: None)
    actions.register("w.fail", fail)
    return actions


@dataclass(frozen=True, eq=False)
class Node:
    seq: int
    below: Node | None


def old_image(ledger: Ledger) -> tuple[list[int], list[int], dict[int, int]]:
    """Effect seqs, in-force tops and nodes as the plain per-effect list
    gave them (the rule before ADR 0052, applied to the ledger)."""
    seqs: list[int] = []
    tops: list[Node | None] = []
    for rec in ledger.iter_records(0):
        if rec.kind != EFFECT_KIND:
            continue
        effect = parse_effect(rec.payload, rec.seq)
        top = tops[-1] if tops else None
        if effect.form == kpb.EFFECT_FORM_ROLLBACK:
            i = bisect.bisect_right(seqs, effect.rollback_to) - 1
            top = tops[i] if i >= 0 else None
        elif effect.form == kpb.EFFECT_FORM_ABORT:
            i = bisect.bisect_left(seqs, effect.aborted)
            top = tops[i - 1] if i > 0 else None
            if i < len(tops):
                tops[i] = top
        elif not effect.irreversible and (effect.do or effect.undo):
            top = Node(rec.seq, top)
        seqs.append(rec.seq)
        tops.append(top)
    nodes: dict[int, int] = {}
    for top in tops:
        node = top
        while node is not None and node.seq not in nodes:
            nodes[node.seq] = node.below.seq if node.below is not None else -1
            node = node.below
    return seqs, [t.seq if t is not None else -1 for t in tops], nodes


def stacks(kernel: Kernel) -> list[list[int]]:
    """The in-force stack after every effect, as seqs, top first."""
    out: list[list[int]] = []
    in_force = kernel._in_force  # pyright: ignore[reportPrivateUsage]
    node_seq, node_below, depth = in_force.node_seq, in_force.node_below, in_force.node_depth
    for seq in in_force.effect_seqs:
        node = in_force.at(seq)
        stack: list[int] = []
        while node >= 0:
            assert depth[node] == (depth[node_below[node]] if node_below[node] >= 0 else 0) + 1
            stack.append(node_seq[node])
            node = node_below[node]
        out.append(stack)
    return out


def check(kernel: Kernel, ledger: Ledger) -> snpb.KernelImage:
    """The kernel's image is the one the old per-effect list gave."""
    img = kernel.image()
    seqs, tops, nodes = old_image(ledger)
    assert list(img.effect_seqs) == seqs
    assert list(img.in_force_tops) == tops, "the image differs from the old per-effect form"
    assert dict(zip(img.node_seqs, img.node_below, strict=True)) == nodes
    assert list(img.node_seqs) == sorted(nodes)
    return img


def restart(kernel: Kernel, ledger: Ledger) -> Kernel:
    """A kernel restored from ``kernel``'s image: it reads the same stacks
    and images the same (unless its recovery journaled releases)."""
    img = check(kernel, ledger)
    size, before = ledger.size, stacks(kernel)
    restored = Kernel.open(ledger, _actions(), image=img, image_seq=size - 1)
    assert stacks(restored)[: len(before)] == before
    if ledger.size == size:
        assert restored.image() == img
    return restored


@settings(max_examples=200, deadline=None)
@given(kernel_ops)
def test_the_kernel_images_as_the_plain_list_did(ops: list[tuple[str, object, object]]) -> None:
    with tempfile.TemporaryDirectory() as d, Ledger.open(d, fixed_signer()) as ledger:
        kernel = Kernel.open(ledger, _actions())
        for name, arg, flag in ops:
            key = str(arg)
            if name == "register":
                assert isinstance(flag, int)
                kernel.register("f", key, flag)
            elif name in ("tool", "note"):
                do = [action("w.set", key=key), *([action("w.fail")] if flag else [])]
                undo = [action("w.del", key=key)] if name == "tool" else None
                with contextlib.suppress(ActionFailed):  # aborted: nothing came into force
                    kernel.perform(do, undo, description=name)
            elif name == "bracket":
                with kernel.bracket(
                    action("w.set", key=key), action("w.del", key=key), description="b"
                ):
                    if flag:  # back to before the acquire: the rollback releases it
                        kernel.rollback(max(-1, ledger.size - 3), by_owner=True)
            elif name == "rollback" and ledger.size:
                assert isinstance(arg, int)
                kernel.rollback(arg % (ledger.size + 1) - 1, by_owner=True)
            elif name == "restart" and ledger.size:
                kernel = restart(kernel, ledger)
        check(kernel, ledger)
        if ledger.size:
            kernel = restart(kernel, ledger)
        before = stacks(kernel)
        full = Kernel.open(ledger, _actions())  # a full replay reads the same
        assert stacks(full)[: len(before)] == before
