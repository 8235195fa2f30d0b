"""No project module changes the umask.

The umask belongs to the whole process, and naga-core is threaded (gRPC
server threads, launches in worker threads, tests running a core beside
the test). A temporary ``os.umask(0o177)`` around the core's bind once gave
a directory created meanwhile by a launch thread the mode 0600: without its
x bits, the sandboxed provider could not use its work directory, and the
turn failed with "No usable temporary directory". Modes are set on the
file itself (``os.open(..., 0o600)``, ``fchmod``, bind-then-rename).

Checked statically, so code no test runs is covered too.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("naga", "naga_core", "naga_gateway", "naga_plugins", "sandbox")


def _umask_calls(source: str, filename: str) -> list[int]:
    lines: list[int] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "umask":
            lines.append(node.lineno)
    return lines


def test_the_check_sees_a_umask_call() -> None:
    assert _umask_calls("import os\nold = os.umask(0o177)\n", "x.py") == [2]
    assert _umask_calls("from os import umask\numask(0)\n", "x.py") == [2]
    assert _umask_calls("import os\nos.chmod('p', 0o600)\n", "x.py") == []


def test_no_project_module_changes_the_umask() -> None:
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for line in _umask_calls(path.read_text(encoding="utf-8"), str(path)):
                found.append(f"{path.relative_to(REPO_ROOT)}:{line}")
    assert found == [], "process-wide umask changed at " + ", ".join(found)
