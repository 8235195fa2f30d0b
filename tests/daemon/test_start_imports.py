"""What a core start imports (issue 13: CPU to readiness). A module only a
rare path needs is imported on that path, not by every start."""

from __future__ import annotations

import subprocess
import sys

#: Imported by nothing a core start runs: httpx (with click and pygments,
#: which httpx pulls in when installed) only starts the local model; segno
#: only draws a WeChat login's QR code; yaml only reads or writes a SKILL.md.
NOT_AT_START = ("httpx", "click", "pygments", "segno", "yaml")


def test_the_core_start_does_not_import_what_only_rare_paths_need() -> None:
    code = (
        "import sys, naga_core.cli._main, naga_core.daemon._serve\n"
        f"print(' '.join(m for m in {NOT_AT_START!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == []
