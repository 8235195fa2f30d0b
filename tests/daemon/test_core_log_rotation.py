"""run/core.log rotation with a real, detached core (``naga daemon start``;
docs/adr/0032-console-trust-log-rotation.md): a core started on a full log
rotates it, keeps at most ``CORE_LOG_KEPT_FILES`` older files, writes its
own output (stdout and stderr are the log) into the new file, and the
console's ReadLog reads across the files with each line's number unchanged
by the rotation."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from naga.constants import CORE_LOG_KEPT_FILES, CORE_LOG_ROTATE_BYTES
from naga.sdk import Client
from naga.v1 import console_admin_pb2 as capb
from naga_core.cli import main
from naga_core.daemon._core_log import RotatingLog, read_page, rotated_paths

_LINE = "x" * 900


def _fill(path: str) -> None:
    """A log that rotated before and is now just under its bound: written by
    the real handler, as an earlier core would have."""
    handler = RotatingLog(path)
    log = logging.getLogger("naga.test.prefill")
    log.propagate = False
    log.addHandler(handler)
    try:
        i = 0
        while len(rotated_paths(path)) < CORE_LOG_KEPT_FILES + 1 or (
            os.path.getsize(path) < CORE_LOG_ROTATE_BYTES - 2000
        ):
            log.warning("prefill %d %s", i, _LINE)
            i += 1
    finally:
        log.removeHandler(handler)
        handler.close()
    # Up to a few bytes short of the bound: the core's first line rotates it.
    short = CORE_LOG_ROTATE_BYTES - os.path.getsize(path) - 10
    with open(path, "a", encoding="utf-8") as f:
        f.write("2026-12-01 00:00:00,000 WARNING naga.test.prefill pad ")
        f.write("p" * max(0, short - 55) + "\n")


def _number_of(lines: list[capb.LogLine], text: str) -> int:
    (found,) = [x.number for x in lines if x.message.startswith(text)]
    return found


def test_a_detached_core_rotates_its_log_and_reads_across_it(
    home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(home).mkdir(mode=0o700, exist_ok=True)
    run = Path(home, "run")
    run.mkdir(mode=0o700)
    path = str(run / "core.log")
    _fill(path)
    before = read_page(path, min_level=0, component="", before=None, limit=500).lines
    newest = "pad ppp"
    assert before[0].message.startswith(newest)
    newest_number = _number_of(before, newest)
    oldest_kept = Path(f"{path}.{CORE_LOG_KEPT_FILES - 1}").read_bytes()[:200]

    assert main(["daemon", "start", "--no-gateway", "--home", home]) == 0, capsys.readouterr()
    try:
        # The start rotated: the old core.log is core.log.1, the oldest file went.
        files = rotated_paths(path)
        assert len(files) == CORE_LOG_KEPT_FILES + 1
        assert not os.path.exists(f"{path}.{CORE_LOG_KEPT_FILES + 1}")
        assert Path(f"{path}.{CORE_LOG_KEPT_FILES}").read_bytes()[:200] == oldest_kept
        assert newest in Path(f"{path}.1").read_text(encoding="utf-8")
        text = Path(path).read_text(encoding="utf-8")
        assert " naga.core.log rotated: this is line " in text.splitlines()[0]
        # What the core prints on stdout after it rotated lands in the new file.
        assert "naga-core serving on unix:" in text
        for f in files:
            assert os.path.getsize(f) <= CORE_LOG_ROTATE_BYTES + 8192, f
            assert os.stat(f).st_mode & 0o777 == 0o600
        with Client.connect(home) as owner:
            page = owner.core_log(capb.ReadLogRequest(limit=500))
            # The line the old file ended with has the number it had.
            assert _number_of(list(page.lines), newest) == newest_number
            rotated = _number_of(list(page.lines), "rotated: this is line ")
            assert rotated == newest_number + 1
            # Paging back from the new file reads on into core.log.1.
            older = owner.core_log(capb.ReadLogRequest(limit=3, before=rotated))
            assert [x.number for x in older.lines] == [rotated - 1, rotated - 2, rotated - 3]
            assert older.lines[0].message.startswith(newest)
            assert older.more
    finally:
        assert main(["daemon", "stop", "--home", home]) == 0
    capsys.readouterr()
