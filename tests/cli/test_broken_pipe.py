"""A reader that goes away (`naga history | head`) ends the command
quietly: no traceback on the owner's terminal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli.conftest import naga_command


def test_a_closed_stdout_ends_the_command_without_a_traceback(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as head does once it has its lines
    try:
        done = subprocess.run(
            [*naga_command(), "daemon", "status", "--home", str(tmp_path / "home")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
