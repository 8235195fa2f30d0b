"""``verify_ledger`` tells what a crash leaves by design (a note: the next
open cleans it) from damage (a problem), and the open cleans it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from naga_core.ledger import BlobStore, Ledger, OsFileSystem, Projection, verify_ledger
from naga_core.ledger._projection import fresh_projection
from tests.ledger_helpers import fixed_signer, make_ledger


def _verify(tmp_path: Path) -> tuple[bool, list[str], list[str]]:
    report = verify_ledger(
        OsFileSystem(),
        str(tmp_path / "ledger"),
        fixed_signer().verifier(),
        blobs=BlobStore(OsFileSystem(), str(tmp_path / "blobs")),
        projection_path=str(tmp_path / "projection.sqlite3"),
    )
    return report.ok, report.notes, [str(p) for p in report.problems]


def _caught_up(tmp_path: Path) -> None:
    with Ledger.open(str(tmp_path / "ledger"), fixed_signer()) as ledger:
        Projection.open(str(tmp_path / "projection.sqlite3")).catch_up(ledger)


def test_a_blob_put_temp_file_is_a_note_and_the_next_open_removes_it(tmp_path: Path) -> None:
    make_ledger(str(tmp_path / "ledger"), 30)
    _caught_up(tmp_path)
    tmp = tmp_path / "blobs" / "tmp"
    tmp.mkdir(parents=True)
    leftover = tmp / ("cd" * 32 + ".00ff00ff00ff00ff")
    leftover.write_bytes(b"half")
    ok, notes, problems = _verify(tmp_path)
    assert ok, problems
    assert notes == [f"crash leftover (removed at next open): {leftover}"]

    blobs = BlobStore(OsFileSystem(), str(tmp_path / "blobs"))
    with Ledger.open(str(tmp_path / "ledger"), fixed_signer(), blobs=blobs) as ledger:
        assert ledger.report.blobs_cleaned == (str(leftover),)
        assert ledger.report.cleaned
    assert not leftover.exists()
    assert _verify(tmp_path) == (True, [], [])


def test_a_directory_in_the_temp_area_is_damage(tmp_path: Path) -> None:
    make_ledger(str(tmp_path / "ledger"), 5)
    _caught_up(tmp_path)
    (tmp_path / "blobs" / "tmp" / "sub").mkdir(parents=True)
    ok, _notes, problems = _verify(tmp_path)
    assert not ok
    assert problems == [f"{tmp_path / 'blobs' / 'tmp' / 'sub'}: a directory in the temp area"]


def test_an_empty_projection_behind_the_log_is_a_note(tmp_path: Path) -> None:
    make_ledger(str(tmp_path / "ledger"), 12)
    path = str(tmp_path / "projection.sqlite3")
    Projection.open(path).close()  # created, nothing applied: a first start killed
    assert fresh_projection(path)
    ok, notes, problems = _verify(tmp_path)
    assert ok, problems
    assert notes == [
        "projection is 12 records behind the log "
        "(the next start catches it up; so does `naga ledger recover`)"
    ]
    os.unlink(path)  # missing altogether: the same
    assert fresh_projection(path)
    assert _verify(tmp_path)[0]


def test_a_damaged_empty_projection_is_still_a_problem(tmp_path: Path) -> None:
    make_ledger(str(tmp_path / "ledger"), 4)
    path = str(tmp_path / "projection.sqlite3")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE records (x)")  # not the projection's schema
    assert not fresh_projection(path)
    ok, _notes, problems = _verify(tmp_path)
    assert not ok
    assert any("projection" in p for p in problems), problems
