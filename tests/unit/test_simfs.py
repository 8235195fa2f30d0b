"""SimulatedFileSystem: the same answers as the real filesystem, the power-loss
model the crash tests rely on, and fault injection.

Every random choice is seeded; an assertion about a crash names the seed that
produced it, and the hypothesis tests are derandomized.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naga_core.errors import LedgerLocked
from naga_core.ledger._fs import (
    FileHandle,
    FileSystem,
    OsFileSystem,
    makedirs,
    sha256_file,
    write_atomic,
)
from naga_core.ledger._simfs import (
    FAULT_OPS,
    SECTOR,
    SimulatedCrashError,
    SimulatedFileSystem,
)

SEEDS = range(120)


def _fs_with_dir(seed: int = 0, capacity: int | None = None) -> SimulatedFileSystem:
    """A filesystem whose /d exists durably."""
    fs = SimulatedFileSystem(seed, capacity)
    makedirs(fs, "/d")
    return fs


def _durable_file(fs: SimulatedFileSystem, path: str, data: bytes) -> None:
    handle = fs.open(path, "create_new")
    handle.write(data)
    handle.sync()
    handle.close()
    fs.sync_dir(os.path.dirname(path))


# --- conformance with the real filesystem ------------------------------------------------


def _script(fs: FileSystem, base: str) -> list[tuple[str, object]]:
    """Run the same operations on any FileSystem; return what each one answered."""
    seen: list[tuple[str, object]] = []

    def step(label: str, call: Callable[[], object]) -> None:
        try:
            result = call()
        except LedgerLocked:
            result = "LedgerLocked"
        except OSError as exc:
            result = (type(exc).__name__, exc.errno)
        seen.append((label, result))

    def write_file(path: str, mode: str, *chunks: bytes) -> int:
        handle = fs.open(path, "append" if mode == "append" else "create_new")
        for chunk in chunks:
            handle.write(chunk)
        handle.sync()
        size = handle.size()
        handle.close()
        return size

    d = f"{base}/d"
    step("mkdir", lambda: fs.mkdir(d))
    step("mkdir again", lambda: fs.mkdir(d))
    step("mkdir no parent", lambda: fs.mkdir(f"{base}/missing/x"))
    step("listdir empty", lambda: fs.listdir(d))
    step("create", lambda: write_file(f"{d}/a", "create_new", b"hello"))
    step("create again", lambda: write_file(f"{d}/a", "create_new", b"x"))
    step("create over dir", lambda: fs.open(d, "create_new"))
    step("append", lambda: write_file(f"{d}/a", "append", b" ", b"world"))
    step("read all", lambda: fs.read(f"{d}/a"))
    step("read from", lambda: fs.read(f"{d}/a", 6))
    step("read slice", lambda: fs.read(f"{d}/a", 2, 3))
    step("read past end", lambda: fs.read(f"{d}/a", 20))
    step("read long", lambda: fs.read(f"{d}/a", 3, 100))
    step("size", lambda: fs.size(f"{d}/a"))
    step("read_write missing", lambda: fs.open(f"{d}/none", "read_write"))

    def rewrite() -> tuple[int, int]:
        handle = fs.open(f"{d}/a", "read_write")
        handle.truncate(2)
        handle.write(b"XY")
        first = handle.size()
        handle.truncate(6)
        handle.write(b"!")
        handle.sync()
        second = handle.size()
        handle.close()
        return first, second

    step("truncate and write", rewrite)
    step("after truncate", lambda: fs.read(f"{d}/a"))
    step("sync_dir", lambda: fs.sync_dir(d))
    step("rename", lambda: fs.rename(f"{d}/a", f"{d}/b"))
    step("listdir renamed", lambda: fs.listdir(d))
    step("exists old", lambda: fs.exists(f"{d}/a"))
    step("exists new", lambda: fs.exists(f"{d}/b"))
    step("is_dir dir", lambda: fs.is_dir(d))
    step("is_dir file", lambda: fs.is_dir(f"{d}/b"))
    step("read missing", lambda: fs.read(f"{d}/a"))
    step("size missing", lambda: fs.size(f"{d}/a"))
    step("rename missing", lambda: fs.rename(f"{d}/a", f"{d}/z"))
    step("rename to itself", lambda: fs.rename(f"{d}/b", f"{d}/b"))
    step("open under file", lambda: fs.open(f"{d}/b/x", "append"))
    step("exists under file", lambda: fs.exists(f"{d}/b/x"))
    step("exists under missing", lambda: fs.exists(f"{base}/nope/deeper"))
    step("is_dir under file", lambda: fs.is_dir(f"{d}/b/x"))
    step("listdir file", lambda: fs.listdir(f"{d}/b"))
    step("listdir missing", lambda: fs.listdir(f"{d}/nope"))
    step("sync_dir file", lambda: fs.sync_dir(f"{d}/b"))
    step("open dir", lambda: fs.open(d, "append"))
    step("read dir", lambda: fs.read(d))
    step("remove dir", lambda: fs.remove(d))
    step("mkdir sub", lambda: fs.mkdir(f"{d}/sub"))
    step("file over dir", lambda: fs.rename(f"{d}/b", f"{d}/sub"))
    step("dir over file", lambda: fs.rename(f"{d}/sub", f"{d}/b"))
    step("fill sub", lambda: write_file(f"{d}/sub/f", "create_new", b"f"))
    step("mkdir empty", lambda: fs.mkdir(f"{d}/empty"))
    step("dir over full dir", lambda: fs.rename(f"{d}/empty", f"{d}/sub"))
    step("dir into itself", lambda: fs.rename(f"{d}/sub", f"{d}/sub/inner"))
    step("dir over empty dir", lambda: fs.rename(f"{d}/sub", f"{d}/empty"))
    step("moved dir", lambda: (fs.listdir(d), fs.listdir(f"{d}/empty")))
    step("remove", lambda: fs.remove(f"{d}/b"))
    step("remove again", lambda: fs.remove(f"{d}/b"))

    def write_after_remove() -> tuple[int, bool]:
        handle = fs.open(f"{d}/g", "append")
        fs.remove(f"{d}/g")
        handle.write(b"orphan")
        size = handle.size()
        handle.close()
        return size, fs.exists(f"{d}/g")

    step("write after remove", write_after_remove)

    def write_after_close() -> None:
        handle = fs.open(f"{d}/h", "append")
        handle.close()
        handle.close()
        handle.write(b"x")

    step("write after close", write_after_close)
    step("write_atomic", lambda: write_atomic(fs, f"{d}/c", b"one"))
    step("write_atomic again", lambda: write_atomic(fs, f"{d}/c", b"two"))
    step("atomic content", lambda: fs.read(f"{d}/c"))
    step("leftover tmp", lambda: write_file(f"{d}/e.tmp", "create_new", b"junk"))
    step("write_atomic over tmp", lambda: write_atomic(fs, f"{d}/e", b"new"))
    step("listdir atomic", lambda: fs.listdir(d))
    step("makedirs", lambda: makedirs(fs, f"{base}/m/n/o"))
    step("makedirs again", lambda: makedirs(fs, f"{base}/m/n/o"))
    step("made", lambda: (fs.is_dir(f"{base}/m/n/o"), fs.listdir(f"{base}/m")))
    step("sha256", lambda: sha256_file(fs, f"{d}/c", chunk=2))

    def locking() -> tuple[object, ...]:
        lock = f"{d}/LOCK"
        with fs.lock(lock):
            try:
                with fs.lock(lock):
                    nested: object = "taken twice"
            except LedgerLocked:
                nested = "LedgerLocked"
            size = fs.size(lock)
        with fs.lock(lock):
            again = "again"
        return nested, size, again, "LOCK" in fs.listdir(d)

    step("lock", locking)
    step("lock in missing dir", lambda: fs.lock(f"{base}/nope/LOCK").__enter__())
    return seen


def test_same_answers_as_the_real_filesystem(tmp_path: Path) -> None:
    real = _script(OsFileSystem(), str(tmp_path))
    sim = SimulatedFileSystem(seed=7)
    sim.mkdir("/base")
    simulated = _script(sim, "/base")
    assert len(simulated) == len(real)
    for (label, want), (_, got) in zip(real, simulated, strict=True):
        assert got == want, f"{label}: real filesystem said {want!r}, simulated {got!r}"


def test_satisfies_the_protocol() -> None:
    fs: FileSystem = SimulatedFileSystem()
    handle: FileHandle = fs.open("/f", "append")
    handle.write(b"x")
    assert fs.read("/f") == b"x"


def test_paths_are_normalized_and_absolute() -> None:
    fs = _fs_with_dir()
    _durable_file(fs, "/d//f", b"data")
    assert fs.read("/d/./x/../f") == b"data"
    assert fs.exists("//d/f")
    assert fs.listdir("/") == ["d"]
    with pytest.raises(ValueError, match="absolute"):
        fs.read("d/f")


# --- the power-loss model --------------------------------------------------------------


def _check_append_outcome(got: bytes, written: bytes, synced: int, where: str) -> None:
    """Synced bytes exactly as written; the rest written, zero, or cut off."""
    assert synced <= len(got) <= len(written), f"{where}: length {len(got)}"
    assert got[:synced] == written[:synced], f"{where}: synced bytes changed"
    wrong = [i for i in range(synced, len(got)) if got[i] not in (written[i], 0)]
    assert not wrong, f"{where}: byte {wrong[0]} is {got[wrong[0]]}, neither written nor zero"


def test_synced_data_under_a_synced_name_survives_every_crash() -> None:
    payload = bytes(range(1, 256)) * 7
    for seed in SEEDS:
        fs = _fs_with_dir(seed)
        _durable_file(fs, "/d/f", payload)
        handle = fs.open("/d/f", "append")
        handle.write(b"\x07" * 700)
        after = fs.crash(random.Random(seed))
        got = after.read("/d/f")
        _check_append_outcome(got, payload + b"\x07" * 700, len(payload), f"seed {seed}")


def test_a_name_never_synced_does_not_survive_crash_clean() -> None:
    fs = _fs_with_dir()
    handle = fs.open("/d/new", "create_new")
    handle.write(b"synced data, unsynced name")
    handle.sync()
    assert fs.durable_bytes("/d/new") is None
    after = fs.crash_clean()
    assert not after.exists("/d/new")
    assert after.listdir("/d") == []


def test_an_unsynced_name_may_or_may_not_survive_a_crash() -> None:
    outcomes: set[bytes | None] = set()
    for seed in SEEDS:
        fs = _fs_with_dir(seed)
        handle = fs.open("/d/new", "create_new")
        handle.write(b"data")
        handle.sync()
        after = fs.crash(random.Random(seed))
        got = after.read("/d/new") if after.exists("/d/new") else None
        assert got in (None, b"data"), f"seed {seed}: {got!r}"
        outcomes.add(got)
    assert outcomes == {None, b"data"}


def test_a_synced_name_without_synced_data_is_empty_after_crash_clean() -> None:
    fs = _fs_with_dir()
    handle = fs.open("/d/f", "create_new")
    fs.sync_dir("/d")
    handle.write(b"never synced")
    assert fs.durable_bytes("/d/f") == b""
    assert fs.crash_clean().read("/d/f") == b""


def test_removes_and_renames_are_pending_until_the_directory_is_synced() -> None:
    fs = _fs_with_dir()
    _durable_file(fs, "/d/a", b"a")
    _durable_file(fs, "/d/b", b"b")
    fs.remove("/d/a")
    fs.rename("/d/b", "/d/c")
    assert fs.listdir("/d") == ["c"]
    assert fs.clone().crash_clean().listdir("/d") == ["a", "b"]
    fs.sync_dir("/d")
    assert fs.crash_clean().listdir("/d") == ["c"]


def test_a_random_prefix_of_namespace_ops_survives() -> None:
    names = ["a", "b", "c", "d"]
    seen: set[tuple[str, ...]] = set()
    for seed in SEEDS:
        fs = _fs_with_dir(seed)
        for name in names:
            fs.open(f"/d/{name}", "create_new").close()
        survived = tuple(fs.crash(random.Random(seed)).listdir("/d"))
        assert survived == tuple(names[: len(survived)]), f"seed {seed}: {survived}"
        seen.add(survived)
    assert len(seen) == len(names) + 1


def test_a_rename_across_directories_needs_both_synced() -> None:
    fs = SimulatedFileSystem()
    makedirs(fs, "/x")
    makedirs(fs, "/y")
    _durable_file(fs, "/x/f", b"f")
    fs.rename("/x/f", "/y/f")
    fs.sync_dir("/y")
    for seed in SEEDS:
        after = fs.clone().crash(random.Random(seed))
        places = (after.listdir("/x"), after.listdir("/y"))
        assert places in ((["f"], []), ([], ["f"])), f"seed {seed}: {places}"
    assert fs.clone().crash_clean().listdir("/x") == ["f"]
    # Removing the new name and syncing must not bring it back when the
    # rename finally becomes durable.
    fs.remove("/y/f")
    fs.sync_dir("/y")
    fs.sync_dir("/x")
    after = fs.crash_clean()
    assert (after.listdir("/x"), after.listdir("/y")) == ([], [])


def test_every_fate_of_a_pending_write_happens_on_sector_boundaries() -> None:
    head = b"\x01" * 100
    data = b"\xff" * 2000
    fates: set[str] = set()
    for seed in range(400):
        fs = _fs_with_dir(seed)
        _durable_file(fs, "/d/f", head)
        fs.open("/d/f", "append").write(data)
        got = fs.crash(random.Random(seed)).read("/d/f")
        where = f"seed {seed}"
        assert got[:100] == head, where
        tail = got[100:]
        assert set(tail) <= {0, 0xFF}, where
        for i in range(101, len(got)):
            # Data and zeros may only switch where a 512-byte sector starts.
            assert got[i] == got[i - 1] or i % SECTOR == 0, f"{where}: switch at {i}"
        if not tail:
            fates.add("lost")
        elif tail == data:
            fates.add("applied")
        elif tail == bytes(len(data)):
            fates.add("zeroed")
        else:
            fates.add("torn")
    assert fates == {"lost", "applied", "zeroed", "torn"}


def test_a_lost_write_before_a_surviving_one_leaves_zeros() -> None:
    for seed in range(400):
        fs = _fs_with_dir(seed)
        handle = fs.open("/d/f", "create_new")
        fs.sync_dir("/d")
        handle.write(b"A" * SECTOR)
        handle.write(b"B" * SECTOR)
        got = fs.crash(random.Random(seed)).read("/d/f")
        if got == bytes(SECTOR) + b"B" * SECTOR:
            return
    pytest.fail("no seed in 400 lost the first write and kept the second")


def test_crash_clean_and_snapshot_current() -> None:
    fs = _fs_with_dir()
    _durable_file(fs, "/d/f", b"durable")
    fs.open("/d/f", "append").write(b" pending")
    fs.open("/d/g", "create_new").write(b"unnamed")
    assert fs.clone().crash_clean().read("/d/f") == b"durable"
    after = fs.snapshot_current()
    assert after.read("/d/f") == b"durable pending"
    assert after.read("/d/g") == b"unnamed"
    assert after.crash_clean().read("/d/g") == b"unnamed"


def _old_state(seed: int, *, leftover: bool) -> SimulatedFileSystem:
    fs = _fs_with_dir(seed)
    _durable_file(fs, "/d/state", OLD)
    if leftover:
        fs.open("/d/state.tmp", "create_new").write(b"half a previous attempt")
    return fs


OLD = bytes(range(256)) * 5
NEW = b"N" * 1500


@pytest.mark.parametrize("leftover", [False, True])
def test_write_atomic_leaves_old_or_new_after_a_crash_at_every_step(leftover: bool) -> None:
    for step in itertools.count():
        fs = _old_state(step, leftover=leftover)
        fs.fail("*", after=step)
        try:
            write_atomic(fs, "/d/state", NEW)
        except OSError:
            finished = False
        else:
            finished = True
        for seed in range(40):
            got = fs.clone().crash(random.Random(seed)).read("/d/state")
            assert got in (OLD, NEW), f"step {step} seed {seed}: {got[:16]!r}... ({len(got)})"
        assert fs.clone().crash_clean().read("/d/state") == (NEW if finished else OLD)
        if finished:
            assert step == (6 if leftover else 5)
            return


def test_the_old_or_new_check_catches_a_missing_fdatasync() -> None:
    """The model is strict enough to fail write_atomic without its sync."""
    for seed in SEEDS:
        fs = _old_state(seed, leftover=False)
        handle = fs.open("/d/state.tmp", "create_new")
        handle.write(NEW)
        handle.close()
        fs.rename("/d/state.tmp", "/d/state")
        fs.sync_dir("/d")
        if fs.crash(random.Random(seed)).read("/d/state") not in (OLD, NEW):
            return
    pytest.fail("a rename of unsynced data always looked atomic")


_appends = st.lists(st.one_of(st.binary(min_size=1, max_size=1300), st.none()), max_size=12)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(ops=_appends, seed=st.integers(0, 2**32 - 1))
def test_crash_outcomes_of_appends_and_syncs_follow_the_model(
    ops: list[bytes | None], seed: int
) -> None:
    fs = _fs_with_dir(seed)
    handle = fs.open("/d/f", "create_new")
    fs.sync_dir("/d")
    written = b""
    synced = 0
    for op in ops:
        if op is None:
            handle.sync()
            synced = len(written)
        else:
            handle.write(op)
            written += op
    for k in range(6):
        got = fs.clone().crash(random.Random(seed + k)).read("/d/f")
        _check_append_outcome(got, written, synced, f"crash seed {seed + k}")
    assert fs.clone().crash_clean().read("/d/f") == written[:synced]
    assert fs.snapshot_current().read("/d/f") == written


_edits = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(min_size=1, max_size=700)),
        st.tuples(st.just("truncate"), st.integers(0, 2000)),
        st.tuples(st.just("sync"), st.none()),
    ),
    max_size=15,
)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(ops=_edits, seed=st.integers(0, 2**32 - 1))
def test_writes_and_truncations_match_a_reference_file(
    ops: list[tuple[str, bytes | int | None]], seed: int
) -> None:
    fs = _fs_with_dir(seed)
    handle = fs.open("/d/f", "create_new")
    fs.sync_dir("/d")
    model = bytearray()
    durable = b""
    for kind, arg in ops:
        if isinstance(arg, bytes):
            handle.write(arg)
            model += arg
        elif isinstance(arg, int):
            handle.truncate(arg)
            model = model[:arg] + bytes(max(0, arg - len(model)))
        else:
            assert kind == "sync"
            handle.sync()
            durable = bytes(model)
        assert fs.read("/d/f") == model
        assert handle.size() == len(model)
    assert fs.durable_bytes("/d/f") == durable
    got = fs.clone().crash(random.Random(seed)).read("/d/f")
    if len(ops) == 0 or ops[-1][0] == "sync":
        assert got == durable, f"crash seed {seed}: nothing was pending"
    assert fs.crash_clean().read("/d/f") == durable


# --- faults -------------------------------------------------------------------------------


def test_a_fault_fires_once_by_default() -> None:
    fs = _fs_with_dir()
    handle = fs.open("/d/f", "create_new")
    fs.fail("write")
    with pytest.raises(OSError, match=r"write.*'/d/f'") as caught:
        handle.write(b"x")
    assert caught.value.errno == errno.EIO
    handle.write(b"y")
    assert fs.read("/d/f") == b"y"


def test_a_persistent_fault_fires_until_cleared() -> None:
    fs = _fs_with_dir()
    handle = fs.open("/d/f", "create_new")
    fs.fail("sync", times=None)
    for _ in range(5):
        with pytest.raises(OSError):
            handle.sync()
    fs.clear_faults()
    handle.sync()


def test_after_and_times_count_matching_calls() -> None:
    fs = _fs_with_dir()
    fs.fail("open", "/d/*.tmp", after=2, times=2, errno=errno.ENOSPC)
    outcomes: list[object] = []
    for i in range(6):
        fs.open(f"/d/plain{i}", "append").close()
        try:
            fs.open(f"/d/f{i}.tmp", "append").close()
        except OSError as exc:
            outcomes.append(exc.errno)
        else:
            outcomes.append("ok")
    assert outcomes == ["ok", "ok", errno.ENOSPC, errno.ENOSPC, "ok", "ok"]


def test_a_rename_fault_matches_either_path_and_changes_nothing() -> None:
    fs = _fs_with_dir()
    _durable_file(fs, "/d/a", b"a")
    fs.fail("rename", "/d/b")
    with pytest.raises(OSError, match=r"'/d/a' -> '/d/b'"):
        fs.rename("/d/a", "/d/b")
    assert fs.listdir("/d") == ["a"]


def test_failed_operations_have_no_effect() -> None:
    fs = _fs_with_dir()
    for op in ("mkdir", "remove", "sync_dir", "truncate", "sync"):
        fs.fail(op)
    with pytest.raises(OSError):
        fs.mkdir("/d/sub")
    assert not fs.exists("/d/sub")
    handle = fs.open("/d/f", "create_new")
    handle.write(b"data")
    with pytest.raises(OSError):
        handle.truncate(0)
    with pytest.raises(OSError):
        handle.sync()
    assert fs.durable_bytes("/d/f") is None
    with pytest.raises(OSError):
        fs.sync_dir("/d")
    with pytest.raises(OSError):
        fs.remove("/d/f")
    assert fs.read("/d/f") == b"data"
    assert not fs.clone().crash_clean().exists("/d/f")
    fs.fail("read")
    with pytest.raises(OSError, match="read"):
        fs.read("/d/f")
    fs.fail("listdir")
    with pytest.raises(OSError, match="listdir"):
        fs.listdir("/d")
    fs.fail("open")
    with pytest.raises(OSError, match="open"):
        fs.open("/d/f", "append")


def test_a_retried_sync_does_not_bring_back_what_a_failed_one_lost() -> None:
    """fsyncgate: after a writeback error the cache and the disk part ways."""
    data = b"\x5a" * 1500
    lost = 0
    for seed in range(60):
        fs = _fs_with_dir(seed)
        _durable_file(fs, "/d/f", b"head")
        handle = fs.open("/d/f", "append")
        handle.write(data)
        fs.fail("sync")
        with pytest.raises(OSError):
            handle.sync()
        handle.sync()
        assert fs.read("/d/f") == b"head" + data, f"seed {seed}"
        durable = fs.durable_bytes("/d/f")
        assert durable is not None
        _check_append_outcome(durable, b"head" + data, 4, f"seed {seed}")
        assert fs.crash(random.Random(seed)).read("/d/f") == durable, f"seed {seed}"
        lost += durable != b"head" + data
    assert lost > 30


def test_a_partial_write_leaves_a_pending_prefix() -> None:
    data = bytes(range(1, 201)) * 5
    lengths: set[int] = set()
    for seed in range(50):
        fs = _fs_with_dir(seed)
        handle = fs.open("/d/f", "create_new")
        fs.sync_dir("/d")
        fs.fail("write", partial=True)
        with pytest.raises(OSError):
            handle.write(data)
        got = fs.read("/d/f")
        assert len(got) < len(data), f"seed {seed}"
        assert data.startswith(got), f"seed {seed}"
        assert fs.durable_bytes("/d/f") == b"", f"seed {seed}"
        lengths.add(len(got))
        handle.write(b"!")
        assert fs.read("/d/f") == got + b"!", f"seed {seed}"
    assert len(lengths) > 10


def test_capacity_writes_what_fits_then_raises_enospc() -> None:
    fs = _fs_with_dir(capacity=100)
    handle = fs.open("/d/f", "create_new")
    handle.write(b"a" * 60)
    with pytest.raises(OSError) as caught:
        handle.write(b"b" * 60)
    assert caught.value.errno == errno.ENOSPC
    assert fs.read("/d/f") == b"a" * 60 + b"b" * 40
    other = fs.open("/d/g", "create_new")
    with pytest.raises(OSError):
        other.write(b"c")
    handle.truncate(10)
    handle.write(b"d" * 50)
    fs.remove("/d/f")
    other.write(b"e" * 100)
    assert fs.size("/d/g") == 100


def test_calls_are_counted_failed_ones_included() -> None:
    fs = _fs_with_dir()
    base = {op: fs.calls(op) for op in FAULT_OPS}
    handle = fs.open("/d/f", "create_new")
    fs.fail("write", after=1)
    handle.write(b"1")
    with pytest.raises(OSError):
        handle.write(b"2")
    handle.write(b"3")
    handle.sync()
    assert fs.calls("open") - base["open"] == 1
    assert fs.calls("write") - base["write"] == 3
    assert fs.calls("sync") - base["sync"] == 1
    assert fs.calls("rename") == 0


def test_unknown_fault_ops_are_refused() -> None:
    fs = SimulatedFileSystem()
    with pytest.raises(ValueError, match="unknown operation"):
        fs.fail("fsync")
    with pytest.raises(ValueError):
        fs.fail("open", partial=True)
    with pytest.raises(ValueError):
        fs.fail("open", times=0)


# --- reboots, locks, helpers ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["crash", "crash_clean", "snapshot_current"])
def test_a_crashed_filesystem_and_its_handles_are_dead(how: str) -> None:
    fs = _fs_with_dir()
    handle = fs.open("/d/f", "create_new")
    fs.fail("write", times=None)
    if how == "crash":
        after = fs.crash(random.Random(0))
    elif how == "crash_clean":
        after = fs.crash_clean()
    else:
        after = fs.snapshot_current()
    dead: list[Callable[[], object]] = [
        lambda: handle.write(b"x"),
        handle.sync,
        handle.size,
        handle.close,
        lambda: fs.read("/d/f"),
        lambda: fs.exists("/d"),
        lambda: fs.open("/d/g", "append"),
        fs.crash_clean,
    ]
    for call in dead:
        with pytest.raises(SimulatedCrashError):
            call()
    # Faults do not survive the reboot.
    after.open("/d/g", "append").write(b"fine")
    assert after.calls("write") == 1


def test_lock_is_exclusive_and_not_carried_over_a_crash() -> None:
    fs = _fs_with_dir()
    held = fs.lock("/d/LOCK")
    held.__enter__()
    with pytest.raises(LedgerLocked), fs.lock("/d/LOCK"):
        pass
    fs.sync_dir("/d")
    after = fs.crash_clean()
    with after.lock("/d/LOCK"):
        assert after.exists("/d/LOCK")


def test_corrupt_changes_durable_and_current_bytes() -> None:
    fs = _fs_with_dir()
    _durable_file(fs, "/d/f", b"0123456789")
    fs.open("/d/f", "append").write(b"abc")
    fs.corrupt("/d/f", 8, b"XXXX")
    assert fs.read("/d/f") == b"01234567XXXXc"
    assert fs.durable_bytes("/d/f") == b"01234567XX"
    assert fs.durable_bytes("/d/missing") is None
    assert fs.durable_bytes("/d/f/under") is None
    assert fs.crash_clean().read("/d/f") == b"01234567XX"


def test_clone_is_independent_and_deterministic() -> None:
    fs = _fs_with_dir(seed=3)
    _durable_file(fs, "/d/f", b"base")
    fs.open("/d/f", "append").write(b"x" * 3000)
    twin = fs.clone()
    twin.open("/d/g", "create_new").write(b"only in the twin")
    assert not fs.exists("/d/g")
    first = fs.clone().crash(random.Random(11)).read("/d/f")
    second = fs.clone().crash(random.Random(11)).read("/d/f")
    assert first == second
    assert hashlib.sha256(fs.read("/d/f")).digest() == sha256_file(fs, "/d/f")
