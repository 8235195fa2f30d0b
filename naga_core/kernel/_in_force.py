"""Which reversible effects have their world part in force, after every
effect: the kernel's index of its effects and the stack a rollback walks.

A persistent stack, so that the stacks after every effect share their
common parts: node n is effect ``node_seq[n]`` on top of node
``node_below[n]`` (-1: none), ``node_depth[n]`` deep; arrays, not objects
(ADR 0052: an object a node cost about 120 bytes, these 24). The node on top
after each effect (-1: nothing in force) is kept as change points (ADR
0052): most effects bring nothing into force, and a list cost 8 bytes each.

Apart from the kernel because it is the one part of its state that is not
the ledger's state ops: its own replay rule (:meth:`InForceStack.absorb`),
its own walk (:meth:`InForceStack.path`) and its own part of the start-up
image, each checked against the others here.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator

from naga.v1 import kernel_pb2 as kpb
from naga.v1 import snapshot_pb2 as snpb
from naga_core.kernel._ascending import Ascending
from naga_core.kernel._effect import ImageRejected
from naga_core.kernel._runs import Runs


class InForceStack:
    """The effects absorbed (``effect_seqs``, ascending) and the in-force
    stack after each (``tops``, parallel to them)."""

    __slots__ = ("effect_seqs", "node_below", "node_depth", "node_seq", "tops")

    def __init__(self) -> None:
        # seqs of kernel.effect records, ascending: 2 bytes each (ADR 0057)
        self.effect_seqs = Ascending()
        self.node_seq = array("q")
        self.node_below = array("q")
        self.node_depth = array("q")
        self.tops = Runs()

    def top(self) -> int:
        """The node on top now (-1: nothing in force)."""
        return self.tops[-1] if self.tops else -1

    def at(self, seq: int) -> int:
        """The node on top after record ``seq`` (-1: nothing in force)."""
        i = self.effect_seqs.bisect_right(seq) - 1
        return self.tops[i] if i >= 0 else -1

    def after(self, seq: int) -> array[int]:
        """The seqs of the effects after record ``seq``, ascending."""
        return self.effect_seqs.after(seq)

    def _push(self, seq: int, below: int) -> int:
        """A new node: effect ``seq`` in force on top of node ``below``."""
        self.node_seq.append(seq)
        self.node_below.append(below)
        self.node_depth.append(self.node_depth[below] + 1 if below >= 0 else 1)
        return len(self.node_seq) - 1

    def absorb(self, seq: int, effect: kpb.Effect) -> int:
        """Take effect ``seq`` in; returns the node on top after it."""
        top = self.top()
        if effect.form == kpb.EFFECT_FORM_ROLLBACK:
            top = self.at(effect.rollback_to)
        elif effect.form == kpb.EFFECT_FORM_ABORT:
            # The world part of the aborted effect never came into force, not
            # even at its own seq (a rollback to it must not run it again):
            # what is in force there and now is what was just before it.
            i = self.effect_seqs.bisect_left(effect.aborted)
            top = self.tops[i - 1] if i > 0 else -1
            if i < len(self.tops):
                self.tops.set(i, top)
        elif not effect.irreversible and (effect.do or effect.undo):
            top = self._push(seq, top)
        self.effect_seqs.append(seq)
        self.tops.append(top)
        return top

    def stack(self, top: int) -> Iterator[int]:
        """The seqs of the effects in force when ``top`` is on top, top first."""
        while top >= 0:
            yield self.node_seq[top]
            top = self.node_below[top]

    def path(self, to_seq: int) -> tuple[list[int], list[int]]:
        """From the effects in force now to those in force after ``to_seq``,
        through their last common one: the seqs to leave and those to
        enter, each last first."""
        now, then = self.top(), self.at(to_seq)
        node_seq, node_below, depth = self.node_seq, self.node_below, self.node_depth
        leave: list[int] = []
        enter: list[int] = []
        while now != then:
            if now >= 0 and (then < 0 or depth[now] >= depth[then]):
                leave.append(node_seq[now])
                now = node_below[now]
            else:  # then >= 0: the two differ and now is the shallower
                enter.append(node_seq[then])
                then = node_below[then]
        return leave, enter

    def image_into(self, img: snpb.KernelImage) -> None:
        """Write this stack's part of a start-up image."""
        img.effect_seqs.extend(self.effect_seqs)
        node_seq, node_below = self.node_seq, self.node_below
        img.in_force_tops.extend(node_seq[n] if n >= 0 else -1 for n in self.tops)
        nodes: dict[int, int] = {}  # the nodes a top stands on (not an aborted one's)
        for _, top in self.tops.runs():  # the tops, in order
            node = top
            while node >= 0 and node_seq[node] not in nodes:
                below = node_below[node]
                nodes[node_seq[node]] = node_seq[below] if below >= 0 else -1
                node = below
        for seq in sorted(nodes):
            img.node_seqs.append(seq)
            img.node_below.append(nodes[seq])

    @classmethod
    def restore(
        cls, img: snpb.KernelImage, image_seq: int, bad: Callable[[str], ImageRejected]
    ) -> InForceStack:
        """The stack ``img`` describes, every reference in it checked
        (``bad`` builds the error a reference that does not hold raises)."""
        if len(img.in_force_tops) != len(img.effect_seqs) or len(img.node_seqs) != len(
            img.node_below
        ):
            raise bad("its lists disagree in length")
        try:
            seqs = Ascending(img.effect_seqs)
        except ValueError:
            seqs = None
        if seqs is None or (seqs and not 0 <= seqs[0] <= seqs[-1] <= image_seq):
            raise bad("the effect seqs are not ascending within the ledger")
        restored = cls()
        nodes: dict[int, int] = {}  # node seq -> node
        node_seq, node_below = restored.node_seq, restored.node_below
        node_depth = restored.node_depth
        for seq, below in sorted(zip(img.node_seqs, img.node_below, strict=True)):
            under = nodes.get(below, -1) if below >= 0 else -1
            if below >= 0 and (under < 0 or below >= seq):
                raise bad(f"in-force node {seq} stands on unknown node {below}")
            nodes[seq] = len(node_seq)
            node_seq.append(seq)
            node_below.append(under)
            node_depth.append(node_depth[under] + 1 if under >= 0 else 1)
        # The image keeps one top an effect, the proto before ADR 0052: the
        # images older cores wrote load, and older cores load these.
        for top in img.in_force_tops:
            node = nodes.get(top, -1) if top >= 0 else -1
            if top >= 0 and node < 0:
                raise bad(f"in-force top {top} is not a node")
            restored.tops.append(node)
        restored.effect_seqs = seqs
        return restored


__all__ = ["InForceStack"]
