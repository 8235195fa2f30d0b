"""naga_core.authz is a pure library: the gRPC server that uses it lives
elsewhere and owns the mapping of RejectReason to status codes, so neither
authz nor anything it imports may pull in grpc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.architecture.test_layering import find_forbidden_imports

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_authz_sources_do_not_import_grpc() -> None:
    sources = sorted((REPO_ROOT / "naga_core" / "authz").glob("*.py"))
    assert sources
    violations = [
        v
        for path in sources
        for v in find_forbidden_imports(path.read_text(encoding="utf-8"), path.name, {"grpc"})
    ]
    assert violations == []


def test_importing_authz_loads_no_grpc_module() -> None:
    probe = (
        "import sys, naga_core.authz; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[]"
