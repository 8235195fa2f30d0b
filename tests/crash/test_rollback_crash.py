"""A SIGKILL in the middle of a rollback leaves the state before or after it, never between.

The parent prepares a ledger of a few hundred effects: registrations, and
reversible performs whose world is a directory of small files (idempotent
``file.write`` / ``file.delete`` handlers, each write fsynced), a few
irreversible sends into an outbox, an earlier rollback and a bracket. It
remembers the state and the files at a point P about 200 effects back, and
at the end. Each iteration copies that prepared directory, forks a child that
opens the Ledger and the Kernel, signals on a pipe and calls ``rollback(P)``
(undoing ~200 effects, so its world actions take a while), and kills it
with SIGKILL after a random delay. The parent then opens the Ledger and the
Kernel (which finishes interrupted world actions) and checks that the state
is exactly the one before the rollback or exactly the one at P, that the
files on disk are those of the same side, that the ledger agrees (no record,
or the ROLLBACK record and its marker), and that opening once more finds
nothing left to recover.

The delays come from the rollback's duration measured in the parent first:
some within its planning (before anything is journaled), some within its
world actions, some past its end; and every tenth kill waits for the child
to say it is done, since a loaded machine can make the child slower than the
calibration. The run must see both outcomes, and kills
that landed between the ROLLBACK record and its marker (files half undone
on disk until recovery), or it did not exercise what it claims.

100 kills by default; NAGA_ROLLBACK_CRASH_ITERATIONS sets another count.
The seed is printed and starts every failure message (NAGA_TEST_SEED replays
the same history and delays).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from naga.v1 import kernel_pb2 as pb
from naga_core.kernel._effect import parse_effect
from naga_core.kernel._kernel import (
    EFFECT_KIND,
    Actions,
    Kernel,
    action,
    replay,
)
from naga_core.kernel._state import Key, Scalar, set_op, to_value
from naga_core.ledger import Ledger
from tests.forking import Child
from tests.ledger_helpers import fixed_signer
from tests.seeds import pick_seed

pytestmark = pytest.mark.slow

ITERATIONS = int(os.environ.get("NAGA_ROLLBACK_CRASH_ITERATIONS") or 100)
SEED = pick_seed()
WHO = f"NAGA_TEST_SEED={SEED}"
SIGNER = fixed_signer("naga.ledger/v1/rollback-crash")
BEFORE_P = 60  # effects kept by the rollback
AFTER_P = 200  # effects it undoes
FILES = 40
READY, DONE = b"r", b"d"

Files = dict[str, bytes]
TypedState = dict[Key, tuple[str, bytes]]


def typed_state(state: Mapping[Key, Scalar]) -> TypedState:
    # Values with their type: 1, True and 1.0 are different values.
    return {k: (type(v).__name__, to_value(v).SerializeToString()) for k, v in state.items()}


def make_actions(world: str) -> Actions:
    """Idempotent file handlers under ``world``; every write is durable."""

    def write(args: Mapping[str, Scalar]) -> None:
        path = os.path.join(world, str(args["path"]))
        data = args["data"]
        assert isinstance(data, bytes)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(args: Mapping[str, Scalar]) -> None:
        path = os.path.join(world, str(args["path"]))
        if os.path.exists(path):
            os.remove(path)

    acts = Actions()
    acts.register("file.write", write)
    acts.register("file.delete", delete)
    return acts


def read_files(world: str) -> Files:
    out: Files = {}
    for sub in sorted(os.listdir(world)):
        for name in sorted(os.listdir(os.path.join(world, sub))):
            out[f"{sub}/{name}"] = Path(world, sub, name).read_bytes()
    return out


def put(name: str, data: bytes | None) -> pb.Action:
    if data is None:
        return action("file.delete", path=name)
    return action("file.write", path=name, data=data)


class History:
    """Builds the prepared ledger and knows both sides of the rollback."""

    def __init__(self, root: str, rng: random.Random) -> None:
        self.ledger_dir = os.path.join(root, "ledger")
        self.world = os.path.join(root, "world")
        os.makedirs(os.path.join(self.world, "files"))
        os.makedirs(os.path.join(self.world, "outbox"))
        self.rng = rng
        with Ledger.open(self.ledger_dir, SIGNER) as ledger:
            kernel = Kernel.open(ledger, make_actions(self.world))
            for _ in range(BEFORE_P):
                self.step(kernel)
            self.to = ledger.size - 1
            self.files_at_to = read_files(self.world)
            for i in range(AFTER_P):
                if i == AFTER_P // 2:  # an earlier rollback inside the range
                    kernel.rollback(ledger.size - 1 - 2 * rng.randrange(3, 12))
                elif i in (AFTER_P // 3, 2 * AFTER_P // 3):
                    kernel.perform([put(f"outbox/m{i}", b"sent %d" % i)], None, description="send")
                elif i == AFTER_P // 4:
                    with kernel.bracket(
                        put("files/lock", b"held"), put("files/lock", None), description="lock"
                    ):
                        self.step(kernel)
                else:
                    self.step(kernel)
            self.size = ledger.size
            self.before = typed_state(replay(ledger).snapshot())
            self.after = typed_state(replay(ledger, self.to).snapshot())
        self.files_before = read_files(self.world)
        outbox = {k: v for k, v in self.files_before.items() if k.startswith("outbox/")}
        self.files_after = self.files_at_to | outbox
        assert self.before != self.after, f"{WHO}: the rollback changes no state"
        assert self.files_before != self.files_after, f"{WHO}: the rollback changes no file"

    def step(self, kernel: Kernel) -> None:
        rng = self.rng
        ops = [
            (rng.choice(("setting", "trust")), f"k{rng.randrange(20)}", self.value())
            for _ in range(rng.randrange(3))
        ]
        if rng.random() < 0.4:
            kernel.register(*(ops[0] if ops else ("setting", "k0", self.value())))
            return
        do: list[pb.Action] = []
        undo: list[pb.Action] = []
        for name in rng.sample([f"files/f{i:02d}" for i in range(FILES)], rng.randrange(1, 3)):
            path = os.path.join(self.world, name)
            old = Path(path).read_bytes() if os.path.exists(path) else None
            new = None if rng.random() < 0.15 else rng.randbytes(rng.randrange(16, 200))
            do.append(put(name, new))
            undo.insert(0, put(name, old))
        kernel.perform(do, undo, description="write files", forward=[set_op(*o) for o in ops])

    def value(self) -> Scalar | None:
        rng = self.rng
        return rng.choice((None, rng.randrange(100), f"t{rng.randrange(100)}", rng.random() < 0.5))


def calibrate(history: History, scratch: str) -> tuple[float, float]:
    """Seconds the rollback spends planning (nothing journaled yet) and in all."""
    plans: list[float] = []
    totals: list[float] = []
    for i in range(3):
        root = os.path.join(scratch, f"calibrate{i}")
        shutil.copytree(os.path.dirname(history.ledger_dir), root)
        world = os.path.join(root, "world")
        with Ledger.open(os.path.join(root, "ledger"), SIGNER) as ledger:
            kernel = Kernel.open(ledger, make_actions(world))
            t0 = time.perf_counter()
            kernel.preview_rollback(history.to)
            t1 = time.perf_counter()
            kernel.rollback(history.to)
            t2 = time.perf_counter()
            # Without a kill the rollback lands on the "after" side.
            assert typed_state(kernel.state.snapshot()) == history.after, WHO
        assert read_files(world) == history.files_after, f"{WHO}: calibration world"
        shutil.rmtree(root)
        plans.append(t1 - t0)
        totals.append(t2 - t1)
    return statistics.median(plans), statistics.median(totals)


def _rollback_child(root: str, to: int, w: int) -> None:
    ledger = Ledger.open(os.path.join(root, "ledger"), SIGNER)
    kernel = Kernel.open(ledger, make_actions(os.path.join(root, "world")))
    os.write(w, READY)
    kernel.rollback(to)
    os.write(w, DONE)
    while True:  # wait for the kill, so that every child dies the same way
        time.sleep(1)


def run_child(root: str, to: int, delay: float) -> bool:
    """Fork a child that rolls back to ``to`` in ``root``; SIGKILL it
    ``delay`` s after it is about to call rollback. True if it had finished."""
    child = Child(_rollback_child, root, to)
    child.read_at_least(1)
    if delay < 0:  # after it is done: a loaded machine can make it slower than calibrated
        child.read_at_least(1 + len(DONE))
    else:
        time.sleep(delay)
    ended_by = child.kill()
    got = child.output
    assert got[:1] == READY, f"{WHO}: the child failed before the rollback (ended by {ended_by})"
    assert ended_by == signal.SIGKILL, f"{WHO}: the child exited on its own"
    return DONE in got


def test_sigkill_mid_rollback_leaves_before_or_after(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    base = str(tmp_path / "base")
    history = History(base, rng)
    plan, total = calibrate(history, str(tmp_path))
    print(
        f"{WHO} to={history.to} size={history.size} plan={plan * 1e3:.1f}ms "
        f"rollback={total * 1e3:.1f}ms"
    )
    outcomes = {"before": 0, "after": 0}
    interrupted = torn = finished = 0
    for it in range(ITERATIONS):
        band = it % 3
        if band == 0:  # planning: nothing journaled yet
            delay = rng.choice((0.0, rng.uniform(0.0, plan)))
        elif band == 1:  # the world actions
            delay = rng.uniform(plan, total)
        elif it % 10 == 2:  # once it is done, whatever the machine's load
            delay = -1.0
        else:  # anywhere, or past the end
            delay = rng.uniform(0.0, 1.5 * total)
        root = str(tmp_path / f"it{it}")
        shutil.copytree(base, root)
        world = os.path.join(root, "world")
        ctx = f"{WHO} iteration={it} delay={delay * 1e3:.2f}ms"
        finished += run_child(root, history.to, delay)
        on_disk = read_files(world)
        torn += on_disk not in (history.files_before, history.files_after)
        with Ledger.open(os.path.join(root, "ledger"), SIGNER) as ledger:
            kernel = Kernel.open(ledger, make_actions(world))
            state = typed_state(kernel.state.snapshot())
            files = read_files(world)
            if state == history.before:
                side = "before"
                assert files == history.files_before, f"{ctx}: state before, files not"
                assert ledger.size == history.size, f"{ctx}: records after a rollback not done"
                assert kernel.recovered == [], f"{ctx}: {kernel.recovered}"
            else:
                assert state == history.after, f"{ctx}: the state is neither before nor after"
                side = "after"
                assert files == history.files_after, f"{ctx}: state after, files not"
                assert ledger.size == history.size + 2, f"{ctx}: ROLLBACK and its marker"
                rec = ledger.read(history.size)
                assert rec.kind == EFFECT_KIND, ctx
                effect = parse_effect(rec.payload, rec.seq)
                assert effect.form == pb.EFFECT_FORM_ROLLBACK, ctx
                assert effect.rollback_to == history.to, ctx
                interrupted += bool(kernel.recovered)
            assert typed_state(replay(ledger).snapshot()) == state, f"{ctx}: replay differs"
        outcomes[side] += 1
        # Recovery is durable: a second open has nothing left to do.
        with Ledger.open(os.path.join(root, "ledger"), SIGNER) as ledger:
            again = Kernel.open(ledger, make_actions(world))
            assert again.recovered == [], f"{ctx}: recovered twice: {again.recovered}"
            assert typed_state(again.state.snapshot()) == state, ctx
            assert read_files(world) == files, ctx
        shutil.rmtree(root)
    summary = (
        f"{WHO} plan={plan * 1e3:.1f}ms rollback={total * 1e3:.1f}ms {outcomes} "
        f"interrupted={interrupted} torn-on-disk={torn} finished={finished}"
    )
    print(summary)
    assert outcomes["before"] > 0, f"no kill landed before the rollback was journaled: {summary}"
    assert outcomes["after"] > 0, f"no kill landed after the rollback was journaled: {summary}"
    assert interrupted > 0, f"no kill landed inside the rollback's world actions: {summary}"
