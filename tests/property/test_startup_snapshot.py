"""A start from a snapshot plus the tail equals a start that replays the
whole ledger (docs/adr/0022-hands-startup-snapshot.md), over random ledgers.

The ledgers are written through the real paths: the kernel (registrations,
performs with world actions, a world action that fails and is aborted,
rollbacks, rollbacks of rollbacks), ``token.minted`` records of executor
tokens and budget spending, and the agent's turn records (messages, steers,
model and tool steps, replies, errors, turns left open), memory items
sealed by the memory store and subjects forgotten (their keys destroyed),
``skill.turn`` records, and ``job.fire`` records with and without their
turn's message. Snapshots are taken by the core's writer (StartSnapshots)
at random points, after which the ledger grows again. Besides the kernel
and the sessions, the memory store, the skills' usage and the scheduler's
fire log from a snapshot equal what their old full passes over the ledger
built (docs/adr/0036-hands-one-start-pass.md).

The damaged snapshots are in test_startup_snapshot_damaged.py, over the
homes this file builds (SnapshotHome, open_start, same_start)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, example, given, settings

from naga.trust import TrustLevel
from naga.v1 import agent_pb2 as apb
from naga.v1 import authz_pb2 as zpb
from naga.v1 import job_pb2 as jpb
from naga.v1 import kernel_pb2 as kpb
from naga.v1 import memory_pb2 as mmpb
from naga.v1 import skills_pb2 as skpb
from naga_core._home import Home
from naga_core.agent import (
    ARCHIVED_FAMILY,
    COVERED_NOTHING,
    DISTILL,
    EXECUTOR_ROLE,
    StartFold,
    spent_ids,
)
from naga_core.agent._sessions import Sessions
from naga_core.authz import MINTED_KIND, SPENT_FAMILY
from naga_core.daemon._startup import (
    SNAPSHOT_NAME,
    Opened,
    StartSnapshots,
    open_state,
)
from naga_core.kernel import (
    ActionFailed,
    Actions,
    Kernel,
    KernelError,
    Scalar,
    action,
)
from naga_core.ledger import Entry, Ledger, OsFileSystem, SnapshotStore
from naga_core.memory import KeyRing, MemoryStore, Source
from naga_core.scheduler import FIRE_KIND, FireLog, read_fires
from naga_core.skills import TURN_KIND, Usage
from tests.ledger_helpers import fixed_signer
from tests.property.idle_oracle import idle_by_hand

SEMANTIC = mmpb.MEMORY_LAYER_SEMANTIC
SOURCE = Source(session="s0", turn_id="t-m", trust=TrustLevel.OWNER)
KEYS_KEPT = 4
ENTRIES_KEPT = 6
NOW = 1_000_000


def _actions(world: dict[str, int]) -> Actions:
    acts = Actions()

    def put(args: Mapping[str, Scalar]) -> None:
        world[str(args["k"])] = int(args["v"])  # pyright: ignore[reportArgumentType]

    def boom(_args: Mapping[str, Scalar]) -> None:
        raise RuntimeError("the world said no")

    acts.register("put", put)
    acts.register("boom", boom)
    return acts


def _turn(kind: str, session: str, turn: str, **fields: object) -> Entry:
    body = apb.TurnRecord(session=session, turn_id=turn, **fields)  # pyright: ignore[reportArgumentType]
    return Entry.of(kind, body.SerializeToString())


def _minted(n: int, expires: int) -> Entry:
    """The ``token.minted`` record of executor token ``n`` (as stage_minted
    writes it: the fields the start reads)."""
    rec = zpb.TokenMinted(id=n.to_bytes(16, "big"), role=EXECUTOR_ROLE, minted_by="test")
    rec.expires_at_ns = expires
    return Entry.of(MINTED_KIND, rec.SerializeToString(deterministic=True))


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.integers(0, 5), st.integers(-3, 3)),
        st.tuples(st.just("unset"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("perform"), st.integers(0, 5), st.integers(0, 9)),
        st.tuples(st.just("fail"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("rollback"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("turn"), st.integers(0, 3), st.integers(0, 15)),
        st.tuples(st.just("spend"), st.integers(0, 20), st.integers(1, 50)),
        st.tuples(st.just("forget"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(0)),
        st.tuples(st.just("remember"), st.integers(0, 2), st.integers(0, 99)),
        st.tuples(st.just("unremember"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("skill"), st.integers(0, 3), st.integers(0, 7)),
        st.tuples(st.just("fire"), st.integers(0, 2), st.integers(0, 7)),
        st.tuples(st.just("fired"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("archive"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("unarchive"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("distilled"), st.integers(0, 2), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=40,
)
SUBJECTS = ("owner", "wechat:b/alice", "wechat:b/bob")


class SnapshotHome:
    """A ledger, a kernel over it and the core's snapshot writer, as a core
    runs them (the writer's fold follows the ledger)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.ledger = Ledger.open(os.path.join(root, "ledger"), fixed_signer())
        self.world: dict[str, int] = {}
        self.kernel = Kernel.open(self.ledger, _actions(self.world))
        self.store = SnapshotStore(OsFileSystem(), os.path.join(root, "ledger", "snapshots"))
        self.writer = StartSnapshots(
            self.ledger, self.kernel, self.store, every=lambda: 10**9, clock=lambda: NOW
        )
        self.fires = FireLog()
        self.fold = StartFold(keys_kept=KEYS_KEPT, entries_kept=ENTRIES_KEPT, also=(self.fires,))
        self.writer.follow(self.fold, self.fires)
        self.turns = 0
        self.open: dict[str, str] = {}  # turn id -> session
        home = Home(root)
        home.ensure()
        self.keys = KeyRing.of_home(home)
        self.memory = MemoryStore.over(self.keys, self.kernel)
        self.fired: list[jpb.JobFire] = []  # fires without their turn message yet

    def run(self, op: tuple[str, int, int]) -> None:
        what, a, b = op
        k = self.kernel
        if what == "register":
            k.register("fam", f"k{a}", b)
        elif what == "unset":
            k.register("fam", f"k{a}", None)
        elif what == "perform":
            put = action("put", k=f"w{a}", v=b)
            undo = action("put", k=f"w{a}", v=self.world.get(f"w{a}", 0))
            k.perform([put], [undo], description="put", forward=[_op("wf", a, b)])
        elif what == "fail":
            with contextlib.suppress(ActionFailed):
                k.perform([action("boom")], [], description="fails", forward=[_op("wf", a, 1)])
        elif what == "rollback":
            if self.ledger.size:
                with contextlib.suppress(KernelError):
                    k.rollback(a % self.ledger.size, by_owner=True)
        elif what == "turn":
            self._turn(a, b)
        elif what == "spend":
            self.ledger.append_many([_minted(a, NOW + (a - 10) * 1000)])
            k.perform([], [], description="spent", forward=[_spent(a, b)])
        elif what == "forget":
            k.perform([], [], description="forget", forward=[_spent(a, None)])
        elif what == "snapshot":
            self.writer.write()
        elif what == "remember":
            subject = SUBJECTS[a]
            text = f"{subject} likes the number {b}"
            self.memory.write(
                self.ledger, k, subject=subject, layer=SEMANTIC, text=text, source=SOURCE
            )
            self.ledger.commit()
        elif what == "unremember":
            self.memory.forget(self.ledger, k, SUBJECTS[a])
            self.ledger.commit()
        elif what == "skill":
            names = [f"owner/skill-{i}" for i in range(b % 4)]
            turn = skpb.SkillTurn(
                session=f"s{a}",
                turn_id=f"st{b}",
                offered=names,
                viewed=names[: b % 3],
                followed=names[: b % 2],
                review=("", "reviewed", "declined")[b % 3],
                time_ns=NOW + b,
            )
            self.ledger.append_many([Entry.of(TURN_KIND, turn.SerializeToString())])
        elif what == "fire":
            self._fire(f"j{a}", b)
        elif what == "archive":  # distill18: due from here (ADR 0050)
            k.register(ARCHIVED_FAMILY, f"s{a}", True, description=f"archive session s{a}")
        elif what == "unarchive":
            k.register(ARCHIVED_FAMILY, f"s{a}", None, description=f"unarchive session s{a}")
        elif what == "distilled":
            # b: a record before idle18 (no through_seq), an archive's (the
            # whole history) or an idle one's (after an older entry), both
            # covering through the newest record so far (idle18, ADR 0055),
            # or a call with no usable answer, covering nothing (ADR 0058).
            body = mmpb.MemoryDistillRecord(session=f"s{a}", outcome="nothing worth remembering")
            if b == 3:
                body.outcome, body.through_seq = "the distillation call failed", COVERED_NOTHING
            elif b and self.ledger.size:
                body.through_seq = self.ledger.size - 1
                body.after_seq = (self.ledger.size - 1) // 2 if b == 2 else 0
            self.ledger.append_many([Entry.of(DISTILL, body.SerializeToString())])
        elif what == "fired" and self.fired:
            fire = self.fired.pop(a % len(self.fired))
            message = _turn(
                "turn.message", fire.session, f"jt-{fire.key}", idempotency_key=fire.key
            )
            self.ledger.append_many([message])

    def _fire(self, job: str, shape: int) -> None:
        scheduled = NOW + shape * 60 * 10**9
        fire = jpb.JobFire(
            job_id=job,
            scheduled_ns=scheduled,
            fired_ns=scheduled + shape,
            key=f"job:{job}:{'run:' if shape == 7 else ''}{scheduled}",
            session=f"job.{job}",
            catch_up=shape == 3,
            skipped=shape == 5,
            missed=2 if shape in (3, 5) else 0,
            manual=shape == 7,
        )
        payload = fire.SerializeToString(deterministic=True)
        self.ledger.append_many([Entry.of(FIRE_KIND, payload)])
        if not fire.skipped:
            self.fired.append(fire)

    def _turn(self, session_n: int, shape: int) -> None:
        session = f"s{session_n}"
        running = [t for t, s in self.open.items() if s == session]
        if running and shape % 2:
            turn = running[0]
            kinds = ("turn.reply", "turn.error", "turn.steer", "turn.model", "turn.tool_call")
            # Tool results too: the steps a re-run resumes from.
            kind = (*kinds, "turn.tool")[(shape // 2) % 6]
            fields: dict[str, object] = {"text": f"t{shape}", "ok": shape % 3 != 0}
            if kind in ("turn.tool_call", "turn.tool"):
                fields["call_id"] = f"c{shape % 4}"
            self.ledger.append_many([_turn(kind, session, turn, **fields)])
            if kind in ("turn.reply", "turn.error"):
                del self.open[turn]
            return
        self.turns += 1
        turn = f"t{self.turns}"
        self.open[turn] = session
        message = _turn(
            "turn.message",
            session,
            turn,
            text=f"message {self.turns}",
            idempotency_key=f"k{self.turns % 7}",
            trust="owner",
            risk_ceiling=2,
        )
        self.ledger.append_many([message])

    def close(self) -> None:
        self.ledger.close()


def _op(family: str, a: int, b: int) -> kpb.SetOp:
    return kpb.SetOp(family=family, key=f"k{a}", value=kpb.Value(integer=b))


def _spent(a: int, amount: int | None) -> kpb.SetOp:
    key = a.to_bytes(16, "big").hex()
    if amount is None:
        return kpb.SetOp(family=SPENT_FAMILY, key=key)
    return kpb.SetOp(family=SPENT_FAMILY, key=key, value=kpb.Value(integer=amount))


def open_start(h: SnapshotHome, *, rolled_back: bool = True) -> Opened:
    opened = open_state(
        h.ledger,
        _actions({}),
        ratchets=(),
        store=h.store,
        new_fold=lambda also: StartFold(keys_kept=KEYS_KEPT, entries_kept=ENTRIES_KEPT, also=also),
        keys_kept=KEYS_KEPT,
    )
    opened.fold.advance(h.ledger)
    # Only a rollback makes the start look for tokens again (a full pass).
    assert rolled_back or not opened.fold.unknown
    opened.fold.resolve(h.ledger)  # as the agent's start does
    return opened


def same_start(a: Opened, b: Opened, ledger: Ledger) -> None:
    assert a.kernel.image() == b.kernel.image()
    assert a.kernel.state.snapshot() == b.kernel.state.snapshot()
    assert a.kernel.open_brackets == b.kernel.open_brackets
    fa, fb = a.fold.image(), b.fold.image()
    assert list(fa.sessions) == list(fb.sessions)
    assert list(fa.open_turns) == list(fb.open_turns)
    # The folds themselves, not only their images: what a re-run resumes from.
    assert _resumable(a.fold) == _resumable(b.fold)
    spent = spent_ids(a.kernel)
    assert a.fold.token_expiries(spent) == b.fold.token_expiries(spent)
    assert fa.memory == fb.memory
    assert fa.skills == fb.skills
    assert a.fires.image() == b.fires.image()
    assert list(fa.distill_due) == list(fb.distill_due)
    # Due only while archived: every way the mark goes (unarchive, undo,
    # rollback) takes the session out of what a start distils again.
    archived = a.kernel.state.family(ARCHIVED_FAMILY)
    assert {d.session for d in fa.distill_due} <= set(archived)
    # idle18: what an idle session's distillation needs, as a full replay
    # and as one straight pass over the records find it.
    assert list(fa.distill_idle) == list(fb.distill_idle)
    assert list(fa.distill_idle) == idle_by_hand(ledger)
    for idle_ns in (0, 10**18):  # every ended session due; none (all wait)
        now = 2**62
        assert a.fold.distill_idle.due(now, idle_ns) == b.fold.distill_idle.due(now, idle_ns)
    if ledger.size:
        to = ledger.size // 2
        pa, pb = a.kernel.preview_rollback(to), b.kernel.preview_rollback(to)
        assert (pa.changes, pa.world_actions, pa.irreversible) == (
            pb.changes,
            pb.world_actions,
            pb.irreversible,
        )


def _resumable(fold: StartFold) -> list[tuple[str, list[int], list[tuple[str, str, bool]]]]:
    return [
        (t.turn_id, t.steps, sorted((c.call_id, c.tool, c.answered) for c in t.calls.values()))
        for t in fold.open.found()
    ]


def _items(store: MemoryStore) -> list[tuple[str, str, int, str | None]]:
    return [(i.id, i.subject, i.seq, i.text) for i in store.items()]


def _same_as_old_passes(opened: Opened, h: SnapshotHome) -> None:
    """The memory store, the skills' usage and the scheduler's fires from
    the fold are what their own passes over every record built."""
    ledger = h.ledger
    old_memory = MemoryStore.over(h.keys, opened.kernel)
    old_usage = Usage()
    for record in ledger.iter_records():
        old_memory.see(record)
        old_usage.see_record(record)
    memory = MemoryStore.over(h.keys, opened.kernel)
    memory.load(opened.fold.memory.items())
    assert _items(memory) == _items(old_memory)
    assert memory.subjects() == old_memory.subjects()
    for subject in SUBJECTS:  # recall searches the same texts
        want = [i.id for i in old_memory.search(subject, "number likes", 50)]
        assert [i.id for i in memory.search(subject, "number likes", 50)] == want
    assert (opened.fold.usage.uses, opened.fold.usage.counts) == (
        old_usage.uses,
        old_usage.counts,
    )
    old_fires = read_fires(ledger)
    assert opened.fires == old_fires
    assert list(opened.fires.unstarted) == list(old_fires.unstarted)


def _same_as_rebuild(opened: Opened, ledger: Ledger) -> None:
    """The fold's sessions are what the agent's old start pass built."""
    full = Sessions(kept=10**6, keys_kept=KEYS_KEPT, entries_kept=ENTRIES_KEPT)
    full.rebuild(ledger)
    restored = Sessions(kept=10**6, keys_kept=KEYS_KEPT, entries_kept=ENTRIES_KEPT)
    restored.restore(opened.fold.sessions.image(), through=opened.fold.seq)
    assert len(full) == len(restored)
    for s in full.recent(10**6):
        r = restored.get(s.name)
        assert r is not None
        assert r.summary() == s.summary()
        packed = restored.unloaded(s.name)
        assert packed is not None
        detail = restored.read_detail(ledger, s.name, packed)
        assert detail.entries == s.entries
        assert {k: (e.turn_id, e.message_seq, e.end_seq) for k, e in detail.keys.items()} == {
            k: (e.turn_id, e.message_seq, e.end_seq) for k, e in s.keys.items()
        }


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
# An error noted after a snapshot was coded apart from one in a detail's list.
@example(ops=[("turn", 1, 0), ("snapshot", 0, 0), ("turn", 1, 1)])
# An open turn's steps on both sides of the snapshot (a model answer, an
# intent, a result, another answer).
@example(
    ops=[
        ("turn", 1, 0),
        ("turn", 1, 7),
        ("turn", 1, 9),
        ("turn", 1, 11),
        ("snapshot", 0, 0),
        ("turn", 1, 7),
    ]
)
# A rollback brings back the spending of a token the snapshot had pruned
# (expired, nothing held): the start still finds its expiry and sweeps it.
@example(
    ops=[
        ("register", 0, 0),
        ("register", 0, 0),
        ("spend", 0, 1),
        ("rollback", 0, 0),
        ("snapshot", 0, 0),
        ("rollback", 3, 0),
    ]
)
# Archived sessions due across a snapshot: one distilled after it, one
# still due, one unarchived by a rollback (ADR 0050).
@example(
    ops=[
        ("archive", 0, 0),
        ("archive", 1, 0),
        ("archive", 2, 0),
        ("snapshot", 0, 0),
        ("distilled", 1, 0),
        ("rollback", 1, 0),
    ]
)
# Idle sessions across a snapshot (idle18): one ended and distilled before
# it, talked to again after it; one distilled over a turn still open.
@example(
    ops=[
        ("turn", 0, 0),
        ("turn", 0, 1),
        ("distilled", 0, 1),
        ("turn", 1, 0),
        ("snapshot", 0, 0),
        ("distilled", 1, 2),
        ("turn", 0, 0),
        ("turn", 0, 1),
        ("turn", 1, 1),
    ]
)
def test_a_snapshot_start_equals_a_full_replay(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        h = SnapshotHome(root)
        try:
            for op in ops:
                h.run(op)
            rolled_back = any(op[0] == "rollback" for op in ops)
            snapshotted = open_start(h, rolled_back=rolled_back)
            had = h.store.list(SNAPSHOT_NAME)
            assert snapshotted.image_seq == (had[-1][0] if had else -1)
            assert not snapshotted.ignored
            event("from a snapshot" if had else "no snapshot taken")
            for _seq, path in had:
                os.remove(path)
            replayed = open_start(h, rolled_back=rolled_back)
            assert replayed.image_seq == -1
            same_start(snapshotted, replayed, h.ledger)
            _same_as_rebuild(snapshotted, h.ledger)
            _same_as_old_passes(snapshotted, h)
            _same_as_old_passes(replayed, h)
        finally:
            h.close()
