"""run/core.log rotates by size and the logs page reads across the files
(naga_core/daemon/_core_log.py, docs/adr/0032-console-trust-log-rotation.md):
the real handler writing real files, small sizes so that many rotations
happen; a line keeps its number however often the log rotates, paging goes
from the newest file into the older ones, the files never exceed their
bound, and a descriptor that is the log (the detached core's stderr)
follows it into the new file."""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from naga.v1 import console_admin_pb2 as capb
from naga_core.daemon._core_log import (
    RotatingLog,
    first_number,
    read_page,
    rotated_paths,
)

_MAX = 4000
_KEPT = 2
_RECORD = re.compile(r"record (\d+) ")


@pytest.fixture
def logger(tmp_path: Path) -> Iterator[tuple[logging.Logger, RotatingLog, str]]:
    path = str(tmp_path / "core.log")
    handler = RotatingLog(path, max_bytes=_MAX, kept=_KEPT)
    log = logging.getLogger(f"naga.test.rotation.{tmp_path.name}")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        yield log, handler, path
    finally:
        log.removeHandler(handler)
        handler.close()


def _page(path: str, before: int | None = None, limit: int = 500) -> capb.ReadLogResponse:
    page = read_page(path, min_level=0, component="", before=before, limit=limit)
    return capb.ReadLogResponse(lines=page.lines, more=page.more, next_before=page.next_before)


def _numbers(path: str) -> dict[int, int]:
    """record i -> its line number, for every record the kept files hold."""
    out: dict[int, int] = {}
    for line in _page(path).lines:
        m = _RECORD.match(line.message)
        if m is not None:
            out[int(m[1])] = line.number
    return out


def test_the_log_rotates_within_its_bound_and_numbers_run_on(
    logger: tuple[logging.Logger, RotatingLog, str],
) -> None:
    log, _, path = logger
    seen: dict[int, int] = {}
    for i in range(400):
        log.info("record %d %s", i, "x" * (i % 40))
        if i % 37 == 0:
            now = _numbers(path)
            # A line keeps its number while the log rotates around it.
            for rec, number in now.items():
                assert seen.setdefault(rec, number) == number, (rec, number, seen[rec])
    files = rotated_paths(path, _KEPT)
    assert files == [f"{path}.2", f"{path}.1", path]
    assert not os.path.exists(f"{path}.3")
    for f in files:
        assert os.path.getsize(f) <= _MAX + 200, f
        assert os.stat(f).st_mode & 0o777 == 0o600
    now = _numbers(path)
    assert max(now) == 399
    # Consecutive records are consecutive lines, across files too (each new
    # file's first line is the rotation's own line, one number of its own).
    records = sorted(now)
    assert records == list(range(records[0], 400))
    gaps = {now[b] - now[a] for a, b in itertools.pairwise(records)}
    assert gaps <= {1, 2}
    assert 2 in gaps
    # Every new file says which line it is and where the earlier ones are.
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    assert re.search(r"naga\.core\.log rotated: this is line \d+ of the log; earlier lines", first)
    assert first_number(files) == int(re.findall(r"line (\d+) of", first)[0])


def test_pages_go_back_from_the_newest_file_into_the_older_ones(
    logger: tuple[logging.Logger, RotatingLog, str],
) -> None:
    log, _, path = logger
    for i in range(120):
        log.info("record %d", i)
    assert os.path.exists(f"{path}.1")
    got: list[int] = []
    before: int | None = None
    while True:
        page = _page(path, before, limit=7)
        got += [line.number for line in page.lines]
        if not page.more:
            break
        before = page.next_before
    assert got == sorted(got, reverse=True)
    assert len(got) == len(set(got))
    every = _page(path).lines
    assert got == [line.number for line in every]
    lines = sum(Path(f).read_bytes().count(b"\n") for f in rotated_paths(path, _KEPT))
    assert len(every) == lines


def test_a_descriptor_that_is_the_log_follows_it_into_the_new_file(tmp_path: Path) -> None:
    path = str(tmp_path / "core.log")
    raw = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    handler = RotatingLog(path, max_bytes=_MAX, kept=_KEPT, follow=(raw,))
    log = logging.getLogger("naga.test.rotation.follow")
    log.propagate = False
    log.addHandler(handler)
    try:
        for i in range(100):
            log.warning("record %d", i)
        assert os.path.exists(f"{path}.1")
        os.write(raw, b"written raw after the rotation\n")
        assert "written raw after the rotation" in Path(path).read_text(encoding="utf-8")
        assert "written raw" not in Path(f"{path}.1").read_text(encoding="utf-8")
    finally:
        log.removeHandler(handler)
        handler.close()
        os.close(raw)


def test_a_log_that_never_rotated_and_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "core.log"
    assert _page(str(path)).lines == []
    path.write_text("2026-12-01 22:55:22,123 INFO naga.core one\nno newline at the end")
    lines = _page(str(path)).lines
    assert [(x.number, x.message) for x in lines] == [(2, "no newline at the end"), (1, "one")]
