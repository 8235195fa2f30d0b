"""The core's background rehash of sealed segments (ADR 0061), on real cores
in this process whose rehash is watched (``RehashOptions.watch``: told of
each chunk on the rehash's thread, and of each pass's end):

* a segment verified before is not rehashed at the next start (counted);
  once its interval passed (``ledger.reverify_days``), it is;
* a damaged verified list means a full check, never a skip;
* a flipped byte in a segment due for its check is still found: a ledger
  note, and the core stops failed;
* the rehash reads in bounded chunks on a thread of its own at the lowest
  priority, and a turn is served while it is held mid-segment.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from naga.constants import VERIFIED_FILE
from naga.v1 import kernel_pb2 as kpb
from naga_core._home import Home
from naga_core._store import open_ledger
from naga_core.agent import AgentConfig
from naga_core.daemon import RehashOptions, RehashReport, VerifiedList, interval_ns
from naga_core.ledger import Entry
from naga_core.plugins import PluginsConfig
from tests.agent.conftest import PLUGINS, ServerThread, model_server, write_providers
from tests.daemon.conftest import core_in_thread
from tests.fakes.model_server import Reply
from tests.plugin_host.conftest import READY_S, STEADY

__all__ = ["model_server"]  # the fixture, used by name

#: Longest a test waits for a pass (this bounds a broken test; not a timing).
WAIT_S = 120.0
DAY_NS = 86_400 * 1_000_000_000
#: The ledger reads 256 KB chunks: an 8 MB segment is many.
CHUNKS_A_SEGMENT_AT_LEAST = 16
# Unthrottled here: these tests count, they do not time.
FAST = 1 << 40


class Watch:
    """Counts what the rehash reads; ``hold_at``: the chunk it waits at
    (on the rehash's thread) until :attr:`release` is set."""

    def __init__(self, hold_at: int = 0) -> None:
        self.lock = threading.Lock()
        self.chunks = 0
        self.segments: list[str] = []
        self.nice: set[int] = set()
        self.reports: list[RehashReport] = []
        self.passed = threading.Event()
        self.hold_at = hold_at
        self.held = threading.Event()
        self.release = threading.Event()

    def chunk(self, segment: str) -> None:
        with self.lock:
            self.chunks += 1
            if not self.segments or self.segments[-1] != segment:
                self.segments.append(segment)
            self.nice.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            hold = self.chunks == self.hold_at
        if hold:
            self.held.set()
            assert self.release.wait(WAIT_S), "the test never released the rehash"

    def done(self, report: RehashReport) -> None:
        self.reports.append(report)
        self.passed.set()

    def first_pass(self) -> RehashReport:
        assert self.passed.wait(WAIT_S), "no rehash pass ended"
        return self.reports[0]


def _sealed_home(home: str, segments: int) -> list[str]:
    """A home whose ledger has ``segments`` sealed segments; their names."""
    os.makedirs(home, mode=0o700, exist_ok=True)
    with open_ledger(Home(home), create=True) as ledger:
        while len(ledger.seals()) < segments:
            ledger.append_many([Entry.of("test.filler", bytes([i]) * 60_000) for i in range(20)])
        return [s.segment for s in ledger.seals()]


def _clock(offset_ns: int) -> Callable[[], int]:
    return lambda: time.time_ns() + offset_ns


def _start(home: str, watch: Watch, offset_ns: int = 0, **config: object) -> RehashReport:
    """A core's start, its first rehash pass, and its clean stop."""
    options = RehashOptions(bytes_per_s=FAST, watch=watch)
    with core_in_thread(home, rehash=options, clock=_clock(offset_ns), **config) as core:
        report = watch.first_pass()
        with core.client() as c:
            c.shutdown("test: stop")
        assert not core.join().failed
    return report


def _verified_path(home: str) -> str:
    return os.path.join(Home(home).ledger_dir, VERIFIED_FILE)


def test_a_segment_verified_before_is_not_rehashed_until_its_interval_passed(home: str) -> None:
    names = _sealed_home(home, 2)
    first = Watch()
    report = _start(home, first)
    assert (report.hashed, report.skipped, report.found) == (names, 0, [])
    assert first.segments == names
    assert first.chunks >= 2 * CHUNKS_A_SEGMENT_AT_LEAST  # bounded chunks, each a pause point
    verified, problem = VerifiedList.load(_verified_path(home))
    assert problem is None
    assert sorted(verified.entries) == names

    # A day later: within every segment's interval (at least half of 30 days).
    again = Watch()
    report = _start(home, again, DAY_NS)
    assert (report.hashed, report.skipped, again.chunks) == ([], 2, 0)

    # Past the longest interval: both are due again.
    late = Watch()
    report = _start(home, late, 31 * DAY_NS)
    assert (report.hashed, report.skipped) == (names, 0)
    assert max(interval_ns(n, 30) for n in names) <= 30 * DAY_NS


def test_segments_verified_together_come_due_apart() -> None:
    intervals = {interval_ns(f"{i * 40_000:020d}.log", 30) for i in range(50)}
    assert len(intervals) == 50
    assert min(intervals) >= 15 * DAY_NS
    assert max(intervals) <= 30 * DAY_NS
    assert interval_ns("00000000000000000000.log", 0) == 0


@pytest.mark.parametrize(
    "damage",
    ["a flipped byte", "cut short", "another version", "not json"],
)
def test_a_damaged_verified_list_means_a_full_check(home: str, damage: str) -> None:
    names = _sealed_home(home, 2)
    _start(home, Watch())
    path = _verified_path(home)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if damage == "a flipped byte":
        at = data.index(b'"at_ns": ') + len(b'"at_ns": ')
        data[at] = ord("9") if data[at] != ord("9") else ord("8")
    elif damage == "cut short":
        del data[len(data) // 2 :]
    elif damage == "another version":
        data = bytearray(data.replace(b'"version": 1', b'"version": 2'))
    else:
        data = bytearray(b"\x00garbage")
    with open(path, "wb") as f:
        f.write(data)
    watch = Watch()
    report = _start(home, watch, DAY_NS)  # a day later: nothing would be due
    assert report.problem is not None, damage
    assert (report.hashed, report.skipped) == (names, 0)
    assert watch.segments == names
    # Written again whole: the next start skips both.
    report = _start(home, Watch(), 2 * DAY_NS)
    assert (report.problem, report.hashed, report.skipped) == (None, [], 2)


def test_an_entry_for_another_seal_is_not_trusted(home: str) -> None:
    names = _sealed_home(home, 2)
    _start(home, Watch())
    path = _verified_path(home)
    verified, _ = VerifiedList.load(path)
    entry = verified.entries[names[0]]
    verified.entries[names[0]] = type(entry)(bytes(32), entry.at_ns)
    verified.save()  # a well-formed file, its entry bound to other seal hashes
    report = _start(home, Watch(), DAY_NS)
    assert (report.problem, report.hashed, report.skipped) == (None, [names[0]], 1)


def _flip_in_last_record(segment: str) -> None:
    at = os.path.getsize(segment) - 1000  # not the first record (the open reads its frame)
    with open(segment, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x04]))


def test_a_flipped_byte_in_a_segment_due_for_its_check_is_noted_and_stops_the_core(
    home: str,
) -> None:
    names = _sealed_home(home, 2)
    _start(home, Watch())
    segment = os.path.join(Home(home).ledger_dir, "segments", names[1])
    _flip_in_last_record(segment)
    watch = Watch()
    options = RehashOptions(bytes_per_s=FAST, watch=watch)
    with core_in_thread(home, rehash=options, clock=_clock(31 * DAY_NS)) as core:
        report = watch.first_pass()
        ended = core.join()  # the core stops by itself
    assert ended.failed
    assert [e.reason for e in report.found] == ["sealed segment content does not match its seal"]
    assert report.hashed == names
    with open_ledger(Home(home), create=False, check_contents=False) as ledger:
        notes = [
            kpb.Effect.FromString(rec.payload).description
            for rec in ledger.iter_records(ledger.seals()[-1].tree_size)
            if rec.kind == "kernel.effect"
        ]
    assert [n for n in notes if "do not match their seals" in n and segment in n], notes
    # Not marked verified: the next start checks it again.
    verified, _ = VerifiedList.load(_verified_path(home))
    assert verified.due(ledger.seals(), time.time_ns() + 32 * DAY_NS, 30)


def test_a_turn_is_served_while_the_rehash_is_held_mid_segment(
    home: str, model_server: ServerThread
) -> None:
    names = _sealed_home(home, 2)
    write_providers(home, model_server.server.openai_url)
    watch = Watch(hold_at=3)
    options = RehashOptions(bytes_per_s=FAST, watch=watch)
    plugins = PluginsConfig(roots=(str(PLUGINS),), tuning=STEADY)
    agent = AgentConfig(executors=1, turn_timeout_s=60).with_budgets(100_000)
    with core_in_thread(home, rehash=options, plugins=plugins, agent=agent) as core:
        assert watch.held.wait(WAIT_S), "the rehash never reached its third chunk"
        model_server.script(Reply.answer("still here"))
        with core.client() as c:
            events = list(c.run_turn("s-1", "hello", uuid.uuid4().hex, timeout=READY_S * 2))
            assert events[-1].WhichOneof("kind") == "final", events[-1]
            assert events[-1].final.text == "still here"
            # The turn ended while the rehash waited at its third chunk.
            assert not watch.passed.is_set()
            assert watch.chunks == 3
            watch.release.set()
            report = watch.first_pass()
            c.shutdown("test: stop")
        assert not core.join().failed
    assert report.hashed == names
    assert watch.chunks >= 2 * CHUNKS_A_SEGMENT_AT_LEAST
    # Its own thread, at the lowest priority; the others keep theirs.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert watch.nice == {max(base, 19)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base
