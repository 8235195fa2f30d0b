"""Simulated power loss and I/O faults: always an exact prefix or a loud refusal.

The ledger runs on :class:`SimulatedFileSystem` with small segments (4 KiB),
so sealing, index and seal files, renames and new segments happen every few
records. Each property generates a workload with hypothesis, tracks what was
ACKNOWLEDGED (its commit returned) and everything WRITTEN (staged and handed
to a commit, whatever came of it), and then checks what a reopen finds:

* power loss (a cut at a random operation, then many crash outcomes of the
  same state): opening never refuses, keeps every acknowledged record and
  gives exactly a prefix of what was written; ``verify`` agrees; the ledger
  takes a new record that survives the harshest crash;
* an I/O fault while writing (write, short write, sync, rename, sync_dir,
  open, mkdir, any call; once or from then on; a full disk), aimed at a
  random one of the calls the workload makes: the commit (or open) it hits
  raises ``LedgerFailed``, never a raw ``OSError`` nor a silent success;
  the ledger then accepts nothing and does no more I/O, still reads back
  what was durable, and a restart (same boot with the fault cleared, or a
  crash) gives the same guarantees as power loss. The one exception is
  documented at ``_check_recovers``: every call failing, the ledger's own
  clean-up included, then no reboot (fsyncgate): a later refusal is allowed;
* a fault during recovery itself (open, read, listdir, truncate, sync,
  remove, sync_dir, any call): ``LedgerFailed`` naming the ledger, never a
  raw ``OSError`` nor a refusal, and the next open recovers; a power cut at
  any call of recovery, and exactly between its truncation and its sync,
  then a crash: the next open recovers;
* a torn last write forced sector by sector (lost, zero-filled, torn,
  landed): the recovered size is the acknowledged prefix plus the whole
  records at the head of the torn write, computed here from the bytes.

Seeds: hypothesis is derandomized (the same workloads every run); the crash
outcomes are drawn from ``random.Random(f"{NAGA_TEST_SEED}/...")``, fresh
each run unless ``NAGA_TEST_SEED`` is set. Every failure message starts with
``NAGA_TEST_SEED=...``: with it and the falsifying example hypothesis prints,
the run replays exactly. ``NAGA_POWER_LOSS_EXAMPLES`` sets the number of
examples per property and parameter (the defaults take about 35 s on two
cores). ``pytest --hypothesis-show-statistics`` shows where the cuts and
faults landed.

Write paths never remove a file (only recovery removes crash debris), so
remove faults are exercised during recovery.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import itertools
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

from naga_core.errors import LedgerCorrupt, LedgerError, LedgerFailed
from naga_core.ledger import Entry, FileHandle, Ledger, SimulatedFileSystem, verify_ledger
from naga_core.ledger._fs import OpenMode
from naga_core.ledger._simfs import FAULT_OPS, SECTOR
from tests.ledger_helpers import fixed_signer
from tests.seeds import pick_seed

pytestmark = pytest.mark.slow

HOME = "/naga"
DIR = HOME + "/ledger"
SEG_DIR = DIR + "/segments"
SEGMENT = 4096  # the smallest the ledger allows: a seal every few records
SIGNER = fixed_signer("naga.ledger/v1/power-loss")
VERIFIER = SIGNER.verifier()
KINDS = ("pl.append", "pl.x", "pl.batch-item")
HEADER = 24
BODY_FIXED = 8 + 8 + 32 + 1  # seq, timestamp, prev_hash, kind_len
CRASHES_PER_STATE = 4


def _base_seed() -> int:
    return pick_seed()


SEED = _base_seed()


def _settings(default_examples: int) -> settings:
    env = os.environ.get("NAGA_POWER_LOSS_EXAMPLES")
    return settings(
        max_examples=int(env) if env else default_examples,
        derandomize=True,
        database=None,
        deadline=None,
        # No explain phase: it reruns a failing example hundreds of times.
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _rng(*parts: object) -> random.Random:
    """Positions (of cuts and faults) and crash outcomes come from here, not
    from hypothesis: its generate phase spends many examples on the simplest
    values (position 0), while a Random salted with the run's seed and the
    example spreads them. String seeds are hashed with SHA-512 by
    random.Random: stable across runs and processes, unlike hash()."""
    return random.Random("/".join(map(str, (SEED, *parts))))


# --- what is written ------------------------------------------------------------


def _kind(seq: int) -> str:
    return KINDS[seq % len(KINDS)]


def _payload(seq: int, length: int) -> bytes:
    # Incompressible and different per record, so a zero-filled or stale
    # sector never happens to hold the right bytes.
    return hashlib.shake_256(b"%d/%d" % (seq, length)).digest(length) if length else b""


def _frame_len(kind: str, payload: bytes) -> int:
    return HEADER + BODY_FIXED + len(kind) + 1 + len(payload)


@dataclass(slots=True)
class Model:
    """What the test knows: records written (seq -> kind, payload) and how
    many of them were acknowledged."""

    written: list[tuple[str, bytes]] = field(default_factory=lambda: [])
    acked: int = 0

    def stage(self, lengths: Sequence[int]) -> list[Entry]:
        entries: list[Entry] = []
        for length in lengths:
            seq = len(self.written)
            kind, payload = _kind(seq), _payload(seq, length)
            self.written.append((kind, payload))
            entries.append(Entry.of(kind, payload))
        return entries

    def acknowledge(self) -> None:
        self.acked = len(self.written)

    def recovered(self, size: int) -> Model:
        return Model(self.written[:size], size)


@dataclass(frozen=True, slots=True)
class Batch:
    lengths: tuple[int, ...]  # payload length of each record
    single: bool  # Ledger.append rather than append_many


@dataclass(frozen=True, slots=True)
class Reopen:
    """Close and reopen on the same filesystem (a clean restart)."""


Step = Batch | Reopen


def _random_length(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.04:
        return rng.randint(4000, 5500)  # over a small segment: one of its own
    if r < 0.35:
        return rng.randint(0, 1500)  # spans sectors
    return rng.randint(0, 99)


@dataclass(frozen=True, slots=True)
class Workload:
    """Steps drawn from ``seed``. Hypothesis draws and shrinks the seed and
    the shape; drawing the steps from one Random keeps examples large and
    varied (hypothesis favours tiny lists), and fewer ``steps`` give a prefix
    of the same workload."""

    seed: int
    steps: int
    max_batch: int

    def build(self) -> list[Step]:
        rng = random.Random(self.seed)
        out: list[Step] = []
        for _ in range(self.steps):
            r = rng.random()
            if r < 0.08:
                out.append(Reopen())
            elif r < 0.3:
                out.append(Batch((_random_length(rng),), True))
            else:
                n = rng.randint(1, self.max_batch)
                out.append(Batch(tuple(_random_length(rng) for _ in range(n)), False))
        return out


cases = st.integers(0, (1 << 32) - 1)
# Lower bounds keep hypothesis's simplest examples (it tries many) useful.
workloads = st.builds(Workload, seed=cases, steps=st.integers(3, 20), max_batch=st.integers(3, 30))
restarts = st.sampled_from(("same boot", "crash", "crash_clean"))


# --- a filesystem whose power can be cut ------------------------------------------


class PowerCut(BaseException):
    """The power went off: raised instead of the operation, and by every
    later call. A BaseException so that nothing in the ledger handles it as
    an I/O error and carries on writing."""


@dataclass(frozen=True, slots=True)
class Op:
    """One filesystem call as CutFS saw it (``other``: a rename's source)."""

    name: str
    path: str
    other: str = ""

    def matches(self, op: str, glob: str) -> bool:
        """Would ``SimulatedFileSystem.fail(op, glob)`` count this call?"""
        if not (self.name == op or (op == "*" and self.name in FAULT_OPS)):
            return False
        return any(fnmatch.fnmatchcase(p, glob) for p in (self.path, self.other) if p)


CutRule = Callable[[Op, Sequence[Op]], bool]
_T = TypeVar("_T")


def cut_at(n: int) -> CutRule:
    """Cut before the n-th call (0-based); reads count too, as they take time."""
    return lambda _op, trace: len(trace) >= n


def cut_before_log_sync(op: Op, _trace: Sequence[Op]) -> bool:
    """Cut before the first fdatasync of a segment: its write is pending."""
    return op.name == "sync" and op.path.endswith(".log")


class CutFS:
    """Forwards to a SimulatedFileSystem until ``rule`` says the power is cut.

    The simulated filesystem's own faults raise OSError, which the ledger
    handles (and does more I/O after); a power cut must stop everything
    exactly where it is, and ``crash()`` on the underlying filesystem then
    decides what survived. ``trace`` lists the calls made, for the dry runs
    that size cut points and fault positions; ``errors`` the calls that
    raised OSError, to tell a failure the ledger reported from one it hid.
    """

    def __init__(self, fs: SimulatedFileSystem, rule: CutRule | None = None) -> None:
        self.fs = fs
        self.rule = rule
        self.trace: list[Op] = []
        self.errors: list[Op] = []
        self.cut_before: Op | None = None

    def call(self, fn: Callable[[], _T], name: str, path: str, other: str = "") -> _T:
        op = Op(name, path, other)
        if self.cut_before is None and self.rule is not None and self.rule(op, self.trace):
            self.cut_before = op
        if self.cut_before is not None:
            raise PowerCut(f"power cut before {self.cut_before} (call {len(self.trace)})")
        self.trace.append(op)
        try:
            return fn()
        except OSError:
            self.errors.append(op)
            raise

    def open(self, path: str, mode: OpenMode) -> FileHandle:
        handle = self.call(lambda: self.fs.open(path, mode), "open", path)
        return _CutHandle(self, handle, path)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        return self.call(lambda: self.fs.read(path, offset, length), "read", path)

    def size(self, path: str) -> int:
        return self.call(lambda: self.fs.size(path), "size", path)

    def exists(self, path: str) -> bool:
        return self.call(lambda: self.fs.exists(path), "exists", path)

    def is_dir(self, path: str) -> bool:
        return self.call(lambda: self.fs.is_dir(path), "is_dir", path)

    def listdir(self, path: str) -> list[str]:
        return self.call(lambda: self.fs.listdir(path), "listdir", path)

    def mkdir(self, path: str) -> None:
        self.call(lambda: self.fs.mkdir(path), "mkdir", path)

    def rename(self, src: str, dst: str) -> None:
        self.call(lambda: self.fs.rename(src, dst), "rename", dst, src)

    def remove(self, path: str) -> None:
        self.call(lambda: self.fs.remove(path), "remove", path)

    def sync_dir(self, path: str) -> None:
        self.call(lambda: self.fs.sync_dir(path), "sync_dir", path)

    def lock(self, path: str) -> contextlib.AbstractContextManager[None]:
        return self.call(lambda: self.fs.lock(path), "lock", path)


class _CutHandle:
    def __init__(self, owner: CutFS, handle: FileHandle, path: str) -> None:
        self._owner = owner
        self._handle = handle
        self._path = path

    def write(self, data: bytes) -> None:
        self._owner.call(lambda: self._handle.write(data), "write", self._path)

    def sync(self) -> None:
        self._owner.call(self._handle.sync, "sync", self._path)

    def size(self) -> int:
        return self._owner.call(self._handle.size, "fsize", self._path)

    def truncate(self, size: int) -> None:
        self._owner.call(lambda: self._handle.truncate(size), "truncate", self._path)

    def close(self) -> None:
        self._owner.call(self._handle.close, "close", self._path)


# --- opening, running, checking -----------------------------------------------------


def _new_fs(seed: int, capacity: int | None = None) -> SimulatedFileSystem:
    """A disk whose home directory exists, durably: the home layer creates
    it before the ledger (Home.ensure), the ledger directory below it is the
    ledger's own."""
    fs = SimulatedFileSystem(seed, capacity)
    fs.mkdir(HOME)
    fs.sync_dir("/")
    return fs


def _open(fs: SimulatedFileSystem | CutFS) -> Ledger:
    # A fixed clock: the same workload writes the same bytes every run.
    clock = itertools.count(1_700_000_000_000_000_000, 1_000)
    return Ledger.open(DIR, SIGNER, fs=fs, segment_max_bytes=SEGMENT, clock=clock.__next__)


def _commit(ledger: Ledger, model: Model, batch: Batch) -> None:
    assert ledger.next_seq == len(model.written)
    entries = model.stage(batch.lengths)  # written before the commit: it may half happen
    if batch.single:
        ledger.append(entries[0].kind, entries[0].payload)
    else:
        ledger.append_many(entries)
    model.acknowledge()


def _run(fs: SimulatedFileSystem | CutFS, steps: Sequence[Step], model: Model) -> Ledger:
    """Run a workload on a fault-free filesystem; return the still open ledger."""
    ledger = _open(fs)
    assert ledger.size == len(model.written)
    for step in steps:
        if isinstance(step, Reopen):
            ledger.close()
            ledger = _open(fs)
            # A clean close after acknowledged commits loses nothing.
            assert ledger.size == len(model.written) == model.acked
        else:
            _commit(ledger, model, step)
    return ledger


def _dry_run(fs: SimulatedFileSystem, steps: Sequence[Step], model: Model) -> CutFS:
    """The calls ``steps`` make from this state (on a clone; nothing is cut)."""
    probe = CutFS(fs.clone())
    _run(probe, steps, Model(list(model.written), model.acked))
    return probe


def _pick_cut(trace: Sequence[Op], rng: random.Random) -> int:
    """Where to cut the power in a run that makes the calls in ``trace``.

    Half the time uniformly over all calls, sometimes past the end (the run
    finishes: nothing in flight). Otherwise just before a segment's
    fdatasync (a batch written, not durable: the torn tails recovery cuts)
    or inside a seal (temp files, renames, directory syncs), which a
    uniform pick, mostly reads, reaches less often.
    """
    r = rng.random()
    if r < 0.4:
        wanted = [i for i, op in enumerate(trace) if cut_before_log_sync(op, trace)]
    elif r < 0.55:
        wanted = [
            i
            for i, op in enumerate(trace)
            if op.path.endswith(".tmp") or op.name in ("rename", "sync_dir")
        ]
    else:
        wanted = []
    if wanted:
        return rng.choice(wanted)
    return rng.randrange(len(trace) + len(trace) // 20 + 1)


def _used_bytes(fs: SimulatedFileSystem, path: str = DIR) -> int:
    if not fs.is_dir(path):
        return fs.size(path)
    return sum(_used_bytes(fs, f"{path}/{name}") for name in fs.listdir(path))


def _assert_prefix(ledger: Ledger, model: Model, ctx: str) -> int:
    """Every acknowledged record is there, and only a prefix of what was written."""
    n = ledger.size
    assert model.acked <= n <= len(model.written), (
        f"{ctx}: {n} records after reopening; {model.acked} were acknowledged, "
        f"{len(model.written)} written"
    )
    got = [(r.seq, r.kind, r.payload) for r in ledger.iter_records()]
    want = [(seq, kind, payload) for seq, (kind, payload) in enumerate(model.written[:n])]
    if got != want:
        bad = next(i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w)
        pytest.fail(f"{ctx}: record {bad} is not what was written: {got[bad]!r:.120}")
    return n


def _assert_verifies(fs: SimulatedFileSystem, ctx: str) -> None:
    report = verify_ledger(fs, DIR, VERIFIER)
    assert report.ok, f"{ctx}: verify after recovery: " + "; ".join(map(str, report.problems))


def _open_recovering(fs: SimulatedFileSystem, ctx: str) -> Ledger:
    try:
        return _open(fs)
    except LedgerCorrupt as exc:
        pytest.fail(f"{ctx}: only power loss and I/O faults happened, yet open refused: {exc}")


def _check_recovers(
    fs: SimulatedFileSystem,
    model: Model,
    ctx: str,
    *,
    full_disk: bool = False,
    cache_may_lie: bool = False,
) -> tuple[SimulatedFileSystem, Model]:
    """Open after a crash or restart: exact prefix, verify ok, and the ledger
    goes on: a new record is acknowledged and survives crash_clean (the
    harshest crash). Returns the filesystem and model to continue from.

    ``cache_may_lie``: the restart was in the same boot after a disk that
    failed every call, the ledger's own clean-up included, so the page cache
    may still show a failed write the disk does not hold (fsyncgate). The
    reopen trusts the cache, and a crash after it may end in a refusal: loud
    and clean, which the requirement allows; nothing else is."""
    ledger = _open_recovering(fs, ctx)
    n = _assert_prefix(ledger, model, ctx)
    _assert_verifies(fs, ctx)
    after = model.recovered(n)
    try:
        _commit(ledger, after, Batch((n % 700,), True))
    except LedgerFailed:
        # Only a disk that is still full may refuse it (``after`` then has
        # it written, not acknowledged).
        assert full_disk, f"{ctx}: the first append after recovery failed"
    ledger.close()
    ctx += ", then one more append and crash_clean"
    again = fs.crash_clean()
    if cache_may_lie:
        try:
            ledger = _open(again)
        except LedgerCorrupt:
            event("refused: the cache had outlived a failed sync (no reboot)")
            return again, after
    else:
        ledger = _open_recovering(again, ctx)
    # Open checked every seal and the tail's chain; the records before n
    # were compared above, so the new one is what is left to compare.
    try:
        m = ledger.size
        assert after.acked <= m <= len(after.written), f"{ctx}: {m} records"
        if m > n:
            last = ledger.read(n)
            assert (last.kind, last.payload) == after.written[n], f"{ctx}: record {n}"
    finally:
        ledger.close()
    return again, after.recovered(m)


def _crash_outcomes(
    fs: SimulatedFileSystem, model: Model, ctx: str, *parts: object
) -> tuple[SimulatedFileSystem, Model]:
    """Draw several post-power-loss states of ``fs``; each must recover.

    The first is crash_clean (only what was synced survives), the others
    random crashes. Returns the last, recovered and appended to.
    """
    result: tuple[SimulatedFileSystem, Model] | None = None
    for k in range(CRASHES_PER_STATE):
        twin = fs.clone()
        if k == 0:
            crashed, how = twin.crash_clean(), "crash_clean"
        else:
            key = "/".join(map(str, (*parts, k)))
            crashed, how = twin.crash(_rng(key)), f"crash(Random('{SEED}/{key}'))"
        result = _check_recovers(crashed, model, f"{ctx}, {how}")
    assert result is not None
    return result


def _restart(fs: SimulatedFileSystem, how: str, case: int) -> SimulatedFileSystem:
    if how == "same boot":
        fs.clear_faults()  # the disk is healthy again; the page cache is as it was
        return fs
    if how == "crash":
        return fs.crash(_rng(case, "restart"))
    return fs.crash_clean()


def _context(test: str, case: int) -> str:
    ctx = f"NAGA_TEST_SEED={SEED} {test} case={case}"
    # Printed with the falsifying example whatever the exception, so a
    # failure inside the ledger (no message of ours) still names the seed.
    note(ctx)
    return ctx


# --- 1. power loss -----------------------------------------------------------------------


@_settings(160)
@given(
    phases=st.lists(workloads, min_size=1, max_size=3),
    case=cases,
)
def test_power_loss_leaves_an_exact_prefix(phases: list[Workload], case: int) -> None:
    fs = _new_fs(_rng(case, "fs").getrandbits(64))
    model = Model()
    for phase, workload in enumerate(phases):
        steps = workload.build()
        cut = _pick_cut(_dry_run(fs, steps, model).trace, _rng(case, workload, phase))
        cutfs = CutFS(fs, cut_at(cut))
        try:
            _run(cutfs, steps, model)
            event("the workload finished: crash with nothing in flight")
        except PowerCut:
            assert cutfs.cut_before is not None
            event(f"power cut before {cutfs.cut_before.name}")
        ctx = f"{_context('power-loss', case)} phase {phase}, cut before call {cut}"
        fs, model = _crash_outcomes(fs, model, ctx, case, phase)


# --- 2. I/O faults while writing -----------------------------------------------------------

# Paths each fault is aimed at: everything, or one family of files.
_WRITE_FAULTS: dict[str, tuple[str, ...]] = {
    "write": ("*", "*.log", "*.tmp"),
    "short-write": ("*", "*.log", "*.tmp"),  # a prefix is written, then the error
    "sync": ("*", "*.log", "*.tmp"),
    "rename": ("*", "*.idx", "*.seal"),
    "sync_dir": ("*", "*/segments"),
    "open": ("*", "*.log", "*.tmp"),
    "mkdir": ("*",),
    "*": ("*", "*.log"),  # whatever the n-th call is
    "capacity": ("*",),  # the disk fills up: short write, then ENOSPC
}


def _assert_dead(ledger: Ledger, fs: SimulatedFileSystem, ctx: str) -> None:
    """After LedgerFailed: every write path refuses, and none touches the disk."""
    ops = sorted(FAULT_OPS)
    before = [fs.calls(op) for op in ops]
    attempts: list[Callable[[], object]] = [
        lambda: ledger.stage(Entry.of("pl.after", b"x")),
        ledger.commit,
        lambda: ledger.append("pl.after", b"x"),
        lambda: ledger.append_many([Entry.of("pl.after", b"y")]),
    ]
    for attempt in attempts:
        with pytest.raises(LedgerFailed):
            attempt()
    assert [fs.calls(op) for op in ops] == before, f"{ctx}: a failed ledger did I/O again"


def _open_or_clean_error(disk: CutFS, ctx: str) -> Ledger | None:
    """Open through ``disk``: a ledger if no call failed, else None after a
    clean error (a LedgerError that is not a refusal)."""
    errors = len(disk.errors)
    try:
        ledger = _open(disk)
    except LedgerCorrupt as exc:
        pytest.fail(f"{ctx}: an I/O fault made open refuse the ledger as corrupt: {exc}")
    except LedgerError as exc:
        if len(disk.errors) == errors:
            pytest.fail(f"{ctx}: open failed with no I/O error: {exc}")
        event("an open failed cleanly")
        return None
    except OSError as exc:
        pytest.fail(f"{ctx}: Ledger.open leaked a raw {type(exc).__name__}: {exc}")
    assert len(disk.errors) == errors, f"{ctx}: open hid a failed {disk.errors[-1]}"
    return ledger


def _write_until_failure(
    ledger: Ledger | None, disk: CutFS, steps: Sequence[Step], model: Model, ctx: str
) -> tuple[Ledger | None, bool]:
    """Run ``steps`` until a commit fails; return the ledger and whether it failed.

    A commit during which a call failed must raise LedgerFailed (never
    return: the failed call may be the sync that made it durable), and
    LedgerFailed needs a failed call."""
    for step in steps:
        if ledger is None:
            break
        if isinstance(step, Reopen):
            ledger.close()
            ledger = _open_or_clean_error(disk, ctx)
            continue
        errors = len(disk.errors)
        try:
            _commit(ledger, model, step)
        except LedgerFailed as exc:
            if len(disk.errors) == errors:
                pytest.fail(f"{ctx}: LedgerFailed with no I/O error: {exc}")
            return ledger, True
        except OSError as exc:
            pytest.fail(f"{ctx}: commit leaked a raw {type(exc).__name__}: {exc}")
        assert len(disk.errors) == errors, (
            f"{ctx}: a commit returned over a failed {disk.errors[-1]}"
        )
    return ledger, False


@pytest.mark.parametrize("times", [1, None], ids=["once", "persistent"])
@pytest.mark.parametrize("op", list(_WRITE_FAULTS))
@_settings(20)
@given(
    workload=workloads,
    glob_pick=st.integers(0, 2),
    code=st.sampled_from((errno.EIO, errno.ENOSPC)),
    restart=restarts,
    case=cases,
)
def test_io_faults_fail_loudly_and_recover(
    op: str,
    times: int | None,
    *,
    workload: Workload,
    glob_pick: int,
    code: int,
    restart: str,
    case: int,
) -> None:
    steps = workload.build()
    seed = _rng(case, "fs").getrandbits(64)
    globs = _WRITE_FAULTS[op]
    glob = globs[glob_pick % len(globs)]
    # Aim the fault at a random one of the calls it can hit (the dry run
    # counts them), installed before the first open so mkdir is reachable.
    probe = CutFS(_new_fs(seed))
    _run(probe, steps, Model())
    full_disk = op == "capacity"
    where = _rng(case, workload, "fault").random()
    if full_disk:
        capacity = int(where * _used_bytes(probe.fs))
        fs = _new_fs(seed, capacity)
        what = f"capacity {capacity}"
    else:
        fs = _new_fs(seed)
        name = "write" if op == "short-write" else op
        matching = sum(o.matches(name, glob) for o in probe.trace)
        after = int(where * matching)
        if matching == 0:
            event(f"{op} {glob}: no matching call")
        fs.fail(name, glob, after=after, times=times, errno=code, partial=op == "short-write")
        what = f"fail({name!r}, {glob!r}, after={after}, times={times}, errno={code})"
    ctx = f"{_context('io-fault', case)} {workload} {what} restart={restart}"
    model = Model()
    disk = CutFS(fs)  # cuts nothing: it records which calls failed
    ledger, failed = _write_until_failure(_open_or_clean_error(disk, ctx), disk, steps, model, ctx)
    if ledger is not None and failed:
        event(f"a commit failed ({op})")
        _assert_dead(ledger, fs, ctx)
        # What was durable before the fault still reads back from the failed
        # object (a fault on "*" hits reads too: clear it first).
        if op == "*":
            fs.clear_faults()
        _assert_prefix(ledger, model, ctx + " (the failed ledger)")
        ledger.close()
        if times is None and restart == "same boot" and op != "*":
            # The owner reopens at once, while the disk still fails: open
            # and commit fail cleanly or work, never anything else.
            ctx += " (reopened under the fault)"
            again = _open_or_clean_error(disk, ctx)
            if again is not None:
                model = Model(model.written[: _assert_prefix(again, model, ctx)], model.acked)
                _write_until_failure(again, disk, [Batch((10, 20), False)], model, ctx)
                again.close()
    elif ledger is not None:
        ledger.close()
    # The one hole (see _check_recovers): a fault on every call, even the
    # ledger's truncation of the failed write, and no reboot.
    lies = op == "*" and times is None and restart == "same boot"
    _check_recovers(
        _restart(fs, restart, case), model, ctx, full_disk=full_disk, cache_may_lie=lies
    )


# --- 3. faults and power cuts during recovery --------------------------------------------------

_RECOVERY_FAULTS = ("open", "read", "listdir", "truncate", "sync", "remove", "sync_dir", "*")


def _state_needing_recovery(workload: Workload, case: int) -> tuple[SimulatedFileSystem, Model]:
    """A ledger cut off mid-workload and crashed: torn tails, debris, half seals."""
    fs = _new_fs(_rng(case, "fs").getrandbits(64))
    model = Model()
    steps = workload.build()
    cut = _pick_cut(_dry_run(fs, steps, model).trace, _rng(case, workload, "cut"))
    with contextlib.suppress(PowerCut):
        _run(CutFS(fs, cut_at(cut)), steps, model)
    return fs.crash(_rng(case, "first crash")), model


def _recovery_calls(fs: SimulatedFileSystem) -> list[Op]:
    """The calls a recovery of this state makes (on a clone)."""
    probe = CutFS(fs.clone())
    ledger = _open(probe)
    calls = list(probe.trace)
    ledger.close()
    return calls


@pytest.mark.parametrize("times", [1, None], ids=["once", "persistent"])
@pytest.mark.parametrize("op", _RECOVERY_FAULTS)
@_settings(25)
@given(workload=workloads, restart=restarts, case=cases)
def test_a_fault_during_recovery_is_a_clean_error_and_the_next_open_recovers(
    op: str,
    times: int | None,
    *,
    workload: Workload,
    restart: str,
    case: int,
) -> None:
    fs, model = _state_needing_recovery(workload, case)
    matching = sum(o.matches(op, "*") for o in _recovery_calls(fs))
    if matching == 0:
        event(f"{op}: recovery made no such call")
    after = _rng(case, workload, "fault").randrange(max(matching, 1))
    fs.fail(op, "*", after=after, times=times)
    ctx = (
        f"{_context('recovery-fault', case)} {workload}, "
        f"fail({op!r}, after={after}, times={times}) restart={restart}"
    )
    error: LedgerError | None = None
    try:
        _open(fs).close()
    except LedgerCorrupt as exc:
        pytest.fail(f"{ctx}: an I/O fault made open refuse the ledger as corrupt: {exc}")
    except LedgerError as exc:
        error = exc
    except OSError as exc:
        pytest.fail(f"{ctx}: Ledger.open leaked a raw {type(exc).__name__}: {exc}")
    if error is not None:
        event(f"open failed cleanly ({op})")
        assert DIR in str(error), f"{ctx}: the error does not name the ledger: {error}"
    else:
        assert matching == 0, f"{ctx}: the fault fired, yet open succeeded"
    _check_recovers(_restart(fs, restart, case), model, ctx)


@_settings(80)
@given(workload=workloads, case=cases)
def test_a_power_cut_during_recovery_recovers(workload: Workload, case: int) -> None:
    fs, model = _state_needing_recovery(workload, case)
    calls = _recovery_calls(fs)
    cut = _rng(case, workload, "recovery cut").randrange(len(calls))
    with pytest.raises(PowerCut):
        _open(CutFS(fs, cut_at(cut)))
    event(f"recovery cut before {calls[cut].name}")
    ctx = f"{_context('recovery-cut', case)} {workload}, recovery cut before {calls[cut]}"
    _crash_outcomes(fs, model, ctx, case, "recovery")


def test_a_crash_between_recoverys_truncate_and_its_sync() -> None:
    # 30 acknowledged records, then a batch of 5 whose write is pending when
    # the power goes and lands torn: its first half only.
    fs = _new_fs(1)
    model = Model()
    _run(fs, [Batch((200,) * 30, False)], model).close()
    ledger = _open(CutFS(fs, cut_before_log_sync))
    with pytest.raises(PowerCut):
        _commit(ledger, model, Batch((300,) * 5, False))
    log = f"{SEG_DIR}/{sorted(fs.listdir(SEG_DIR))[-1]}"
    durable = fs.durable_bytes(log)
    assert durable is not None
    pending = fs.read(log)[len(durable) :]
    half = len(pending) // 2
    whole = 0  # records of the torn batch wholly inside its first half
    end = 0
    for kind, payload in model.written[30:]:
        end += _frame_len(kind, payload)
        whole += end <= half
    assert 0 < whole < 5, "the half should hold some whole records and a torn one"
    fs = fs.crash_clean()
    handle = fs.open(log, "append")
    handle.write(pending[:half])
    handle.sync()
    handle.close()

    # Recovery truncates the torn record, then the power goes before it
    # syncs the truncation.
    def after_truncate(op: Op, trace: Sequence[Op]) -> bool:
        return op.name == "sync" and any(o.name == "truncate" for o in trace)

    cutfs = CutFS(fs, after_truncate)
    with pytest.raises(PowerCut):
        _open(cutfs)
    assert cutfs.cut_before == Op("sync", log)
    for k in range(60):
        ctx = f"NAGA_TEST_SEED={SEED} truncate-then-cut, crash {k}"
        crashed = fs.clone().crash(_rng("truncate-then-cut", k))
        ledger = _open_recovering(crashed, ctx)
        assert ledger.size == 30 + whole, ctx
        ledger.close()
        _check_recovers(crashed, model, ctx)


# --- 4. the torn last write, sector by sector -------------------------------------------------

# "written" first: hypothesis's favourite, so the head of the write often
# survives and the oracle's count of whole records is not always zero.
_SECTOR_FATES = ("written", "zeroed", "lost")
_ONE_FATE = {"lost": "lost", "landed": "written", "zero-filled": "zeroed"}


def _batch_of(size_and_seed: tuple[int, int]) -> Batch:
    size, seed = size_and_seed
    rng = random.Random(seed)
    return Batch(tuple(_random_length(rng) for _ in range(size)), False)


@pytest.mark.parametrize("outcome", ["lost", "landed", "zero-filled", "torn"])
@_settings(60)
@given(
    before=workloads,
    torn=st.tuples(st.integers(2, 30), cases).map(_batch_of),
    sector_fates=st.lists(st.sampled_from(_SECTOR_FATES), min_size=1, max_size=64),
)
def test_a_torn_last_write_recovers_to_the_acknowledged_prefix_plus_its_whole_head(
    outcome: str, before: Workload, torn: Batch, sector_fates: list[str]
) -> None:
    # Acknowledged records, then one batch whose write is pending: the power
    # goes before its fdatasync.
    fs = _new_fs(2)
    model = Model()
    _run(fs, before.build(), model).close()
    ledger = _open(CutFS(fs, cut_before_log_sync))
    first_torn = len(model.written)
    with pytest.raises(PowerCut):
        _commit(ledger, model, torn)
    log = f"{SEG_DIR}/{sorted(fs.listdir(SEG_DIR))[-1]}"
    durable = fs.durable_bytes(log)
    assert durable is not None
    current = fs.read(log)
    assert current.startswith(durable)
    start, stop = len(durable), len(current)
    assert stop > start, "the torn batch's write should be pending"
    # The write's fate, sector by sector on absolute file offsets: the model
    # of SimulatedFileSystem.crash, applied here by hand so it is forced.
    disk = bytearray(durable)
    pos, k = start, 0
    while pos < stop:
        sector_end = min(stop, (pos // SECTOR + 1) * SECTOR)
        fate = _ONE_FATE.get(outcome) or sector_fates[k % len(sector_fates)]
        if fate != "lost":
            disk.extend(bytes(pos - len(disk)))  # a hole before it reads as zeros
            disk[pos:sector_end] = (
                current[pos:sector_end] if fate == "written" else bytes(sector_end - pos)
            )
        pos, k = sector_end, k + 1
    # The oracle, from the bytes: the whole records at the head of the torn
    # write survive; the first damaged one and everything after it are cut.
    expect, end = first_torn, start
    for kind, payload in model.written[first_torn:]:
        length = _frame_len(kind, payload)
        if end + length > stop or bytes(disk[end : end + length]) != current[end : end + length]:
            break
        expect, end = expect + 1, end + length
    event(f"{expect - first_torn} of the torn write's records survive")
    crashed = fs.crash_clean()
    if len(disk) > start:
        handle = crashed.open(log, "append")
        handle.write(bytes(disk[start:]))
        handle.sync()
        handle.close()
    ctx = f"torn write ({outcome}) at offset {start}, {stop - start} bytes, fates {sector_fates}"
    ledger = _open_recovering(crashed, ctx)
    try:
        assert ledger.size == expect, f"{ctx}: recovered {ledger.size}, expected {expect}"
        _assert_prefix(ledger, model, ctx)
        cut = [(c.path, c.offset, c.bytes_cut) for c in ledger.report.cut]
        assert cut == ([(log, end, len(disk) - end)] if len(disk) > end else []), ctx
        assert crashed.size(log) == end, f"{ctx}: the file was not cut at {end}"
    finally:
        ledger.close()
    _check_recovers(crashed, model, ctx)
