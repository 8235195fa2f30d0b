"""Every tampering is detected by ``naga ledger verify`` and named.

"Detected" means: a non-zero exit code, and a problem naming the damaged
file and, for a segment log, the offset of the record the damage is in.
The home has 280 records in 4 KiB segments (eight of them sealed), an
active segment of twenty separate one-record writes, records referencing
blobs and a caught-up projection. Random choices come from a seed printed at
the start (``NAGA_TEST_SEED`` replays it).

The documented limit (docs/design/ledger.md): damage confined to the newest
write of the active segment reads as a torn tail. verify still fails on it,
naming the place and pointing at ``naga ledger recover``; any earlier write
must be reported as damage.
"""

from __future__ import annotations

import bisect
import os
import random
import sqlite3
from typing import Any

import pytest

from tests.cli.conftest import Cli, CliResult, LedgerHome, RecordSpan, read_spans

RANDOM_FLIPS = 200


def verify(cli: Cli, home: LedgerHome) -> CliResult:
    return cli("ledger", "verify", "--home", home.root, "--json")


def problems(res: CliResult) -> list[dict[str, Any]]:
    doc = res.json()
    assert "problems" in doc, f"verify did not report problems: {res.out}{res.err}"
    found: list[dict[str, Any]] = doc["problems"]
    return found


def named(res: CliResult, path: str, offset: int | None = None) -> str | None:
    """None if verify failed and named ``path`` (and ``offset``); else why not."""
    if res.code == 0:
        return "verify passed"
    found = problems(res)
    for p in found:
        if p["path"] == path and (offset is None or p["offset"] == offset):
            return None
    return f"not named as {path} at {offset}: {found}"


def assert_named(res: CliResult, path: str, offset: int | None = None) -> dict[str, Any]:
    why = named(res, path, offset)
    assert why is None, why
    (problem,) = [p for p in problems(res) if p["path"] == path]
    return problem


def flip(path: str, pos: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def record_at(spans: list[RecordSpan], pos: int) -> RecordSpan:
    return spans[bisect.bisect_right([s.offset for s in spans], pos) - 1]


def newest_write_start(spans: list[RecordSpan]) -> int:
    """Offset of the first record of the segment's last write."""
    last = spans[-1]
    return spans[len(spans) - 1 - last.batch_pos].offset


def target_record(home: LedgerHome, which: str) -> tuple[str, RecordSpan]:
    """A record with a blob reference in the middle of a sealed segment or of
    the active segment (not in its newest write)."""
    log = home.sealed_logs[1] if which == "sealed" else home.active_log
    spans = read_spans(log)
    cut = newest_write_start(spans)
    middle = [s for s in spans[1:-1] if s.nrefs == 1 and s.offset < cut]
    assert middle, f"no record with a blob reference in the middle of {log}"
    return log, middle[len(middle) // 2]


def test_the_untouched_home_verifies(cli: Cli, ledger_home: LedgerHome) -> None:
    res = verify(cli, ledger_home)
    assert res.code == 0, res.out
    doc = res.json()
    assert doc["records"] == ledger_home.records
    assert doc["sealed_segments"] == len(ledger_home.sealed_logs) >= 5
    assert doc["blobs_referenced"] == len(ledger_home.refs) > 0
    spans = read_spans(ledger_home.active_log)
    assert len({s.seq - s.batch_pos for s in spans}) >= 10, "active segment: too few writes"


# --- flipped bytes ------------------------------------------------------------------

FIELDS = (
    "magic",
    "version",
    "reserved",
    "body_len",
    "batch_pos",
    "batch_len",
    "crc32",
    "seq",
    "timestamp",
    "prev_hash",
    "kind_len",
    "kind",
    "nrefs",
    "blob_ref",
    "payload",
)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("segment", ["sealed", "active"])
def test_every_byte_of_every_record_field_is_detected(
    cli: Cli, ledger_home: LedgerHome, segment: str, field: str, seed: int
) -> None:
    rng = random.Random(f"{seed}-{segment}-{field}")
    log, rec = target_record(ledger_home, segment)
    failures: list[str] = []
    for pos in rec.fields[field]:
        mask = rng.randrange(1, 256)
        flip(log, pos, mask)
        try:
            res = verify(cli, ledger_home)
        finally:
            flip(log, pos, mask)
        why = named(res, log, rec.offset)
        if why is None and "not a torn tail" not in problems(res)[0]["problem"]:
            why = f"reported as {problems(res)[0]['problem']!r}"
        if why is not None:
            failures.append(f"{field} byte {pos} ^ {mask:#04x}: {why}")
    assert rec.fields[field], f"{field} is empty in the chosen record"
    assert not failures, f"NAGA_TEST_SEED={seed}: " + "\n".join(failures)
    assert verify(cli, ledger_home).code == 0  # every flip was undone


@pytest.mark.parametrize("kind", ["sealed log", "active log", "index", "seal"])
def test_random_byte_flips_are_all_detected(
    cli: Cli, ledger_home: LedgerHome, kind: str, seed: int
) -> None:
    rng = random.Random(f"{seed}-{kind}")
    sealed = rng.choice(ledger_home.sealed_logs)
    stem = sealed[: -len(".log")]
    path = {
        "sealed log": sealed,
        "active log": ledger_home.active_log,
        "index": stem + ".idx",
        "seal": stem + ".seal",
    }[kind]
    spans = read_spans(path) if path.endswith(".log") else []
    newest = newest_write_start(spans) if spans else 0
    size = os.path.getsize(path)
    positions = rng.sample(range(size), min(RANDOM_FLIPS, size))
    failures: list[str] = []
    torn = 0
    for pos in positions:
        # Half single-bit flips (bit rot; 0x20 is also a change of case), half any byte.
        mask = 1 << rng.randrange(8) if rng.random() < 0.5 else rng.randrange(1, 256)
        flip(path, pos, mask)
        try:
            res = verify(cli, ledger_home)
        finally:
            flip(path, pos, mask)
        offset = record_at(spans, pos).offset if spans else None
        why = named(res, path, offset)
        if why is None and spans:
            what: str = assert_named(res, path, offset)["problem"]
            if what.startswith("torn tail"):
                torn += 1
                # Only the active segment's newest write may read as torn.
                if path != ledger_home.active_log or pos < newest:
                    why = f"reported as a torn tail: {what}"
        if why is not None:
            failures.append(f"byte {pos} ^ {mask:#04x}: {why}")
    cli.note(
        f"{kind}: {path}: {len(positions)} flips"
        + (f", {torn} read as a torn tail" if spans else "")
    )
    assert not failures, f"NAGA_TEST_SEED={seed} {path}:\n" + "\n".join(failures)
    assert len(positions) == min(RANDOM_FLIPS, size)
    assert verify(cli, ledger_home).code == 0


def test_every_byte_of_a_seal_signature_line_is_detected(cli: Cli, ledger_home: LedgerHome) -> None:
    # XOR 0x20 turns a hex letter into its other case, which bytes.fromhex
    # reads as the same signature: only a canonical-form check catches it.
    seal = ledger_home.sealed_logs[1][:-4] + ".seal"
    with open(seal, "rb") as f:
        data = f.read()
    start = data.rindex(b"\nsig ") + 1
    failures: list[str] = []
    for pos in range(start, len(data)):
        flip(seal, pos, 0x20)
        try:
            why = named(verify(cli, ledger_home), seal)
        finally:
            flip(seal, pos, 0x20)
        if why is not None:
            failures.append(f"byte {pos} ({data[pos : pos + 1]!r}) ^ 0x20: {why}")
    assert len(data) - start == len("sig ") + 128 + 1
    assert not failures, "\n".join(failures)


def test_damage_at_the_end_of_a_sealed_segment_is_not_a_torn_tail(
    cli: Cli, ledger_home: LedgerHome
) -> None:
    # The last write of a sealed segment looks like a torn tail to the record
    # scan; but a sealed segment cannot have one, and recover would refuse it.
    for log in ledger_home.sealed_logs:
        last = read_spans(log)[-1]
        flip(log, last.offset + 30, 0x10)
        problem = assert_named(verify(cli, ledger_home), log, last.offset)
        assert problem["problem"].endswith(
            "in the last write of a sealed segment: damage, not a torn tail"
        )
        flip(log, last.offset + 30, 0x10)


def test_damage_in_the_newest_write_is_a_named_torn_tail(cli: Cli, ledger_home: LedgerHome) -> None:
    log = ledger_home.active_log
    last = read_spans(log)[-1]
    flip(log, last.offset + 30, 0x10)
    res = verify(cli, ledger_home)
    problem = assert_named(res, log, last.offset)
    assert "torn tail" in problem["problem"]
    assert "naga ledger recover" in problem["problem"]


def test_the_human_output_names_file_and_offset(cli: Cli, ledger_home: LedgerHome) -> None:
    log, rec = target_record(ledger_home, "sealed")
    flip(log, rec.offset + 40, 0x01)
    res = cli("ledger", "verify", "--home", ledger_home.root)
    assert res.code == 1
    assert f"FAIL {log} at offset {rec.offset}: " in res.out
    assert "ledger NOT verified: 1 problem(s)" in res.out


# --- structural damage ---------------------------------------------------------------


@pytest.mark.parametrize(
    "cut",
    [("one byte", 30, 1), ("24 bytes", 10, 24), ("the header", 0, 24), ("a record", 0, -1)],
    ids=lambda c: c[0],
)
@pytest.mark.parametrize("segment", ["sealed", "active"])
def test_a_truncated_middle_is_detected(
    cli: Cli, ledger_home: LedgerHome, segment: str, cut: tuple[str, int, int]
) -> None:
    """Bytes removed from the middle of a segment (a record's start + start,
    ``length`` bytes; -1 = the whole record)."""
    _name, start, length = cut
    log, rec = target_record(ledger_home, segment)
    with open(log, "rb") as f:
        data = f.read()
    a = rec.offset + start
    b = rec.end if length < 0 else a + length
    with open(log, "wb") as f:
        f.write(data[:a] + data[b:])
    problem = assert_named(verify(cli, ledger_home), log, rec.offset)
    assert "torn tail" not in problem["problem"] or "not a torn tail" in problem["problem"]


@pytest.mark.parametrize("how", ["content", "names"])
def test_swapped_sealed_segments_are_detected(cli: Cli, ledger_home: LedgerHome, how: str) -> None:
    a, b = ledger_home.sealed_logs[2], ledger_home.sealed_logs[4]
    suffixes = (".log",) if how == "content" else (".log", ".idx", ".seal")
    for suffix in suffixes:
        pa, pb = a[:-4] + suffix, b[:-4] + suffix
        tmp = pa + ".swap"
        os.rename(pa, tmp)
        os.rename(pb, pa)
        os.rename(tmp, pb)
    problem = assert_named(verify(cli, ledger_home), a, 0)
    assert f"expected {ledger_home.first_seq(a)}" in problem["problem"]


@pytest.mark.parametrize(
    "case",
    [
        ("middle", (".log",), ".log", "segment file is missing"),
        ("middle", (".log", ".idx", ".seal"), "next.log", "missing or out of order"),
        ("first", (".log", ".idx", ".seal"), "next.log", "expected 0"),
        ("middle", (".idx",), ".idx", "index of a sealed segment is missing"),
        ("middle", (".seal",), ".log", "not sealed but later segments exist"),
    ],
    ids=lambda c: f"{c[0]} {'+'.join(c[1])}",
)
def test_a_deleted_segment_is_detected(
    cli: Cli, ledger_home: LedgerHome, case: tuple[str, tuple[str, ...], str, str]
) -> None:
    """(which segment, files removed, the file verify must name, the reason)."""
    which, suffixes, named_file, reason = case
    logs = ledger_home.sealed_logs
    k = 0 if which == "first" else 3
    stem = logs[k][:-4]
    for suffix in suffixes:
        os.remove(stem + suffix)
    path = logs[k + 1] if named_file == "next.log" else stem + named_file
    problem = assert_named(verify(cli, ledger_home), path)
    assert reason in problem["problem"]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE records SET payload = X'00' WHERE seq = 7",
        "UPDATE records SET payload = payload || X'00' WHERE seq = 270",
        "UPDATE records SET kind = 'forged.kind' WHERE seq = 100",
        "UPDATE records SET timestamp_ns = timestamp_ns + 1 WHERE seq = 3",
        "DELETE FROM blob_refs WHERE seq = 1",
        "INSERT INTO blob_refs VALUES (2, 0, zeroblob(32))",
        "DELETE FROM records WHERE seq = (SELECT max(seq) FROM records)",
        "UPDATE meta SET value = 5 WHERE key = 'applied_seq'",
        "CREATE TABLE extra (x)",
    ],
)
def test_an_edited_projection_is_named_and_rebuild_repairs_it(
    cli: Cli, ledger_home: LedgerHome, sql: str
) -> None:
    with sqlite3.connect(ledger_home.projection) as conn:
        assert conn.execute(sql).rowcount != 0
    conn.close()
    problem = assert_named(verify(cli, ledger_home), ledger_home.projection)
    assert problem["problem"].startswith("projection: ")
    assert "naga ledger rebuild" in problem["problem"]
    rebuilt = cli("ledger", "rebuild", "--home", ledger_home.root, "--json")
    assert rebuilt.code == 0, rebuilt.err
    res = verify(cli, ledger_home)
    assert res.code == 0, res.out


def _ref(home: LedgerHome, where: str) -> bytes:
    active_first = home.first_seq(home.active_log)
    for seq, digest in home.refs:
        if (seq >= active_first) == (where == "active"):
            return digest
    raise AssertionError(f"no blob referenced from the {where} segment")


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_replaced_blob_is_named(cli: Cli, ledger_home: LedgerHome, where: str) -> None:
    path = ledger_home.blob_path(_ref(ledger_home, where))
    with open(path, "rb") as f:
        size = len(f.read())
    with open(path, "wb") as f:
        f.write(b"x" * size)  # same length, other bytes
    problem = assert_named(verify(cli, ledger_home), path)
    assert "not to its name" in problem["problem"]


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_deleted_referenced_blob_is_named(cli: Cli, ledger_home: LedgerHome, where: str) -> None:
    path = ledger_home.blob_path(_ref(ledger_home, where))
    os.remove(path)
    problem = assert_named(verify(cli, ledger_home), path)
    assert problem["problem"] == "referenced blob is missing"


@pytest.mark.parametrize(
    "name",
    ["notes.txt", "00000000000000000033.log.bak", "0000000000000000033.log", "LOCK", "x.seal"],
)
def test_a_stray_file_in_segments_is_named(cli: Cli, ledger_home: LedgerHome, name: str) -> None:
    path = os.path.join(ledger_home.segments_dir, name)
    with open(path, "wb") as f:
        f.write(b"hello")
    problem = assert_named(verify(cli, ledger_home), path)
    assert "unexpected file" in problem["problem"]


def test_a_stray_file_among_blobs_is_named(cli: Cli, ledger_home: LedgerHome) -> None:
    digest = ledger_home.refs[0][1]
    path = os.path.join(os.path.dirname(ledger_home.blob_path(digest)), "not-a-blob")
    with open(path, "wb") as f:
        f.write(b"hello")
    assert_named(verify(cli, ledger_home), path)


def test_crash_debris_is_a_note_not_a_problem(cli: Cli, ledger_home: LedgerHome) -> None:
    debris = ledger_home.sealed_logs[0][:-4] + ".seal.tmp"
    with open(debris, "wb") as f:
        f.write(b"half a seal")
    res = verify(cli, ledger_home)
    assert res.code == 0
    assert res.json()["notes"] == [f"crash debris (removed at next open): {debris}"]


@pytest.mark.parametrize("which", ["sealed .log", "sealed .idx", "sealed .seal", "active .log"])
def test_an_unreadable_segment_file_is_named_not_a_traceback(
    cli: Cli, ledger_home: LedgerHome, which: str
) -> None:
    segment, suffix = which.split(" ")
    log = ledger_home.sealed_logs[2] if segment == "sealed" else ledger_home.active_log
    path = log[:-4] + suffix
    os.remove(path)
    os.mkdir(path)  # reading it fails with EISDIR, as a bad sector fails with EIO
    problem = assert_named(verify(cli, ledger_home), path)
    assert problem["problem"].startswith("cannot read: ")


def test_an_index_left_by_an_interrupted_seal_is_a_note(cli: Cli, ledger_home: LedgerHome) -> None:
    active = ledger_home.active_log
    leftover = active[:-4] + ".idx"
    with open(ledger_home.sealed_logs[0][:-4] + ".idx", "rb") as src, open(leftover, "wb") as f:
        f.write(src.read())
    res = verify(cli, ledger_home)
    assert res.code == 0
    assert res.json()["notes"] == [f"crash debris (removed at next open): {leftover}"]
