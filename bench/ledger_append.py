"""Ledger append benchmark: prints one JSON object.

Measured in one run on one disk (the one holding --home):

* durable appends/s with concurrent trio appenders through the group
  committer, and the acknowledgement latency p50/p99;
* the raw baseline: the same appenders and the same group-commit loop, but
  each commit is only ``os.write`` of pre-encoded bytes + ``os.fdatasync``
  (no framing, hashing, chaining or bookkeeping) - and the ratio;
* recovery scan MB/s: frame + CRC + SHA-256 chain check over every segment;
* projection rebuild records/s.

The ledger it leaves in --home is an ordinary one (`naga ledger verify
--home DIR` accepts it).

    python bench/ledger_append.py --home /tmp/naga-bench --count 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from naga_core._home import Home, load_signer
from naga_core._store import blob_store, projection_path
from naga_core.ledger import Entry, GroupCommitter, Ledger, Projection
from naga_core.ledger._record import GENESIS_PREV
from naga_core.ledger._segment import parse_name, scan_segment


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _drive(
    count: int, appenders: int, append: Callable[[int], Awaitable[None]]
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    next_i = 0

    async def worker() -> None:
        nonlocal next_i
        while next_i < count:
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            await append(i)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(appenders):
            nursery.start_soon(worker)
    return time.perf_counter() - start, latencies


class _RawCommitter:
    """The group-commit loop of GroupCommitter with nothing but write+sync."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending: list[bytes] = []
        self._waiting: list[trio.Event] = []
        self._work = trio.Event()

    def _commit(self, data: bytes) -> None:
        os.write(self._fd, data)
        os.fdatasync(self._fd)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._work.wait()
            self._work = trio.Event()
            batch, self._pending = self._pending, []
            waiting, self._waiting = self._waiting, []
            await trio.to_thread.run_sync(self._commit, b"".join(batch))
            for ev in waiting:
                ev.set()

    async def append(self, record: bytes) -> None:
        self._pending.append(record)
        done = trio.Event()
        self._waiting.append(done)
        self._work.set()
        await done.wait()


async def _ledger_phase(
    ledger: Ledger, count: int, appenders: int, payload: bytes
) -> tuple[float, list[float], int]:
    gc = GroupCommitter(ledger)
    entry = Entry.of("bench.append", payload)
    async with trio.open_nursery() as nursery:
        await nursery.start(gc.run)

        async def append(_i: int) -> None:
            await gc.append(entry)

        elapsed, lat = await _drive(count, appenders, append)
        nursery.cancel_scope.cancel()
    return elapsed, lat, gc.commits


async def _raw_phase(
    path: str, count: int, appenders: int, record: bytes
) -> tuple[float, list[float]]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        raw = _RawCommitter(fd)
        async with trio.open_nursery() as nursery:
            await nursery.start(raw.run)

            async def append(_i: int) -> None:
                await raw.append(record)

            elapsed, lat = await _drive(count, appenders, append)
            nursery.cancel_scope.cancel()
        return elapsed, lat
    finally:
        os.close(fd)
        os.remove(path)


def _scan_all(seg_dir: str) -> tuple[int, int, float]:
    files = sorted(n for n in os.listdir(seg_dir) if n.endswith(".log"))
    total = records = 0
    prev = GENESIS_PREV
    start = time.perf_counter()
    for name in files:
        parsed = parse_name(name)
        assert parsed is not None
        with open(os.path.join(seg_dir, name), "rb") as f:
            data = f.read()
        res = scan_segment(data, parsed[0], prev)
        if res.damage is not None or res.torn is not None:
            raise SystemExit(f"scan found a fault in {name}: {res.damage or res.torn}")
        prev = res.last_leaf
        total += len(data)
        records += res.count
    return total, records, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description="Ledger append benchmark (prints one JSON object)")
    ap.add_argument("--home", required=True, help="directory for the ledger (a Naga home)")
    ap.add_argument("--count", type=int, default=20000, help="records to append")
    ap.add_argument("--appenders", type=int, default=64, help="concurrent appenders")
    ap.add_argument("--payload-bytes", type=int, default=256)
    ap.add_argument(
        "--sweep",
        type=lambda text: [int(x) for x in text.split(",") if x],
        default=[1, 16],
        help="other appender counts to measure too (comma-separated; '' for none)",
    )
    args = ap.parse_args()
    home = Home.resolve(args.home)
    home.ensure()
    signer = load_signer(home, create=True)
    payload = os.urandom(args.payload_bytes)

    def progress(msg: str) -> None:
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    def measure(appenders: int) -> dict[str, float]:
        progress(f"appending {args.count} records with {appenders} appenders")
        ledger = Ledger.open(home.ledger_dir, signer, blobs=blob_store(home))
        elapsed, lat, commits = trio.run(_ledger_phase, ledger, args.count, appenders, payload)
        framed = 24 + len(ledger.read(ledger.size - 1).body)
        ledger.close()
        progress(f"raw os.write + os.fdatasync baseline, same loop, {appenders} appenders")
        raw_elapsed, raw_lat = trio.run(
            _raw_phase,
            os.path.join(home.root, "raw-baseline.bin"),
            args.count,
            appenders,
            os.urandom(framed),
        )
        rate, raw_rate = args.count / elapsed, args.count / raw_elapsed
        return {
            "appenders": appenders,
            "framed_record_bytes": framed,
            "appends_per_s": round(rate, 1),
            "syncs": commits,
            "records_per_sync": round(args.count / max(commits, 1), 1),
            "ack_latency_ms_p50": round(1000 * statistics.median(lat), 3),
            "ack_latency_ms_p99": round(1000 * _percentile(lat, 0.99), 3),
            "raw_appends_per_s": round(raw_rate, 1),
            "raw_ack_latency_ms_p50": round(1000 * statistics.median(raw_lat), 3),
            "raw_ack_latency_ms_p99": round(1000 * _percentile(raw_lat, 0.99), 3),
            "ratio_to_raw": round(rate / raw_rate, 3),
        }

    with Ledger.open(home.ledger_dir, signer) as existing:
        start_size = existing.size
    main_run = measure(args.appenders)
    sweep = [measure(n) for n in args.sweep if n != args.appenders]

    progress("recovery scan")
    scanned, scanned_records, scan_s = _scan_all(os.path.join(home.ledger_dir, "segments"))
    t0 = time.perf_counter()
    reopened = Ledger.open(home.ledger_dir, signer, blobs=blob_store(home))
    open_s = time.perf_counter() - t0

    progress("projection rebuild")
    t0 = time.perf_counter()
    Projection.rebuild(projection_path(home), reopened).close()
    rebuild_s = time.perf_counter() - t0
    total_records = reopened.size
    reopened.close()

    result = {
        "benchmark": "ledger_append",
        "home": home.root,
        "records": args.count,
        "payload_bytes": args.payload_bytes,
        **main_run,
        "sweep": sweep,
        "recovery_scan_mb_per_s": round(scanned / scan_s / 1e6, 1),
        "recovery_scan_records_per_s": round(scanned_records / scan_s, 1),
        "open_s": round(open_s, 4),
        "ledger_records_total": total_records,
        "ledger_records_before": start_size,
        "projection_rebuild_records_per_s": round(total_records / rebuild_s, 1),
        "targets": {"ratio_to_raw": 0.8, "ack_latency_ms_p99": 10.0, "recovery_scan_mb_per_s": 100},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
